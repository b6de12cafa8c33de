package slurm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/agent"
	"github.com/virga-ml/virga/internal/backend"
)

// Lines as squeue 22.05 prints them in QueueFormat.
const sampleQueue = `21|RUNNING|None|0|0|N/A|2026-11-22T05:03:49|NONE|(null)|virga-a1|
22|FAILED|NonZeroExitCode|768|0|N/A|2026-11-22T05:03:52|2026-11-22T05:03:53|(null)|virga-a2|
2|FAILED|NonZeroExitCode|36608|0|2026-11-22T04:45:34|2026-11-22T04:45:31|2026-11-22T04:45:37|(null)|virga-a3|
35|PREEMPTED|None|9|0|2026-11-22T05:04:50|2026-11-22T05:04:20|2026-11-22T05:04:50|(null)|virga-a4|
48|COMPLETED|None|0|0|N/A|2026-11-22T05:04:00|2026-11-22T05:04:36|virga:time-limit|virga-a5|
50|PENDING|BeginTime|0|1|N/A|N/A|N/A|(null)|virga-a6|
51|PENDING|Priority|0|0|N/A|2027-01-01T00:00:00|2027-01-01T01:00:00|a|comment|with bars|
52|NODE_FAIL|NodeDown|0|0|N/A|2026-11-22T05:04:00|2026-11-22T05:05:00|(null)|virga-a8|
53|TIMEOUT|TimeLimit|0|0|N/A|2026-11-22T05:04:00|2026-11-22T05:05:00|(null)|virga-a9|
`

func TestParseQueue(t *testing.T) {
	jobs, bad := ParseQueue(sampleQueue+"garbage line\n\n", time.UTC)
	if len(bad) != 1 || bad[0] != "garbage line" {
		t.Fatalf("bad lines %q", bad)
	}
	if len(jobs) != 9 {
		t.Fatalf("%d jobs: %+v", len(jobs), jobs)
	}
	j := jobs[0]
	if j.ID != "21" || j.State != "RUNNING" || !j.Running() || j.Ended() || !j.End.IsZero() ||
		j.Start != time.Date(2026, 11, 22, 5, 3, 49, 0, time.UTC) || j.Name != "virga-a1" {
		t.Fatalf("running job: %+v", j)
	}
	if j := jobs[1]; j.ExitCode() != 3 || j.ExitSignal() != 0 || !j.Ended() {
		t.Fatalf("failed job: %+v", j)
	}
	if j := jobs[2]; j.ExitCode() != 143 || j.Preempted.IsZero() {
		t.Fatalf("preempted failed job: %+v", j)
	}
	if j := jobs[3]; j.ExitCode() != -1 || j.ExitSignal() != 9 {
		t.Fatalf("killed job: %+v", j)
	}
	if j := jobs[4]; j.Comment != warnComment {
		t.Fatalf("warned job: %+v", j)
	}
	if j := jobs[5]; !j.Requeued() || j.Restarts != 1 {
		t.Fatalf("requeued job: %+v", j)
	}
	if j := jobs[6]; j.Comment != "a" || j.Name != "comment|with bars" {
		// A bar in the comment shifts only the free-text fields: such a
		// name matches no attempt.
		t.Fatalf("job with bars: %+v", j)
	}
}

func TestExitEvent(t *testing.T) {
	jobs, _ := ParseQueue(sampleQueue, time.UTC)
	now := time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		i         int
		stopping  bool
		killed    bool
		code      int // -1: none
		signal    string
		preempted bool
	}{
		{i: 1, code: 3},
		{i: 2, code: -1, signal: "terminated", preempted: true},          // preempted, died of its SIGTERM (143)
		{i: 2, stopping: true, code: -1, signal: "terminated"},           // Virga's stop wins
		{i: 3, code: -1, signal: "killed", preempted: true},              // killed after GraceTime
		{i: 4, code: 0, preempted: true},                                 // warned of its time limit
		{i: 3, stopping: true, killed: true, code: -1, signal: "killed"}, // Virga's SIGKILL
		{i: 7, code: -1, signal: "killed", preempted: true},              // its node failed
		{i: 8, code: -1, signal: "killed", preempted: true},              // killed at its time limit
	} {
		a := &attempt{id: 1, stopping: c.stopping, killed: c.killed}
		ev := exitEvent(a, &jobs[c.i], now)
		code := -1
		if ev.ExitCode != nil {
			code = *ev.ExitCode
		}
		if code != c.code && c.code != -1 || ev.Signal != c.signal || ev.Preempted != c.preempted || ev.Kind != backend.Exited {
			t.Errorf("job %d (stopping %v): %+v, want code %d signal %q preempted %v", c.i, c.stopping, ev, c.code, c.signal, c.preempted)
		}
		if !ev.Time.Equal(jobs[c.i].End) {
			t.Errorf("job %d: time %s, want its end %s", c.i, ev.Time, jobs[c.i].End)
		}
	}
}

func TestNames(t *testing.T) {
	if n := JobName("virga", 42); n != "virga-a42" {
		t.Fatal(n)
	}
	p1, p2 := PrefixFor("/srv/a/.virga"), PrefixFor("/srv/b/.virga")
	if p1 == p2 || p1 != PrefixFor("/srv/a/.virga") || len(p1) != 14 {
		t.Fatalf("prefixes %q %q", p1, p2)
	}
	if id, ok := attemptOf(p1, JobName(p1, 7)); !ok || id != 7 {
		t.Fatalf("attemptOf(%q): %d %v", JobName(p1, 7), id, ok)
	}
	b, err := New(Config{Pools: []Pool{{Node: virga.Resources{CPU: 1}, Nodes: 1}}, AgentPath: "v", JobPrefix: p1})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	for name, want := range map[string]int64{"virga-a42": 42, "virga-a": 0, "virga-a042": 0, "virga-a-1": 0,
		"virga-b1": 0, "virgax-a1": 0, "virga-a1x": 0, "virga-a99999999999999999999": 0} {
		id, ok := attemptOf("virga", name)
		if id != want || ok != (want != 0) {
			t.Errorf("%q: %d %v, want %d", name, id, ok, want)
		}
	}
	for out, want := range map[string]string{"123\n": "123", "123;cluster\n": "123",
		"sbatch: warning: x\n77\n": "77", "": "", "Submitted batch job 5": ""} {
		id, err := parseSubmitted(out)
		if id != want || (err != nil) != (want == "") {
			t.Errorf("%q: %q %v", out, id, err)
		}
	}
}

func TestTimeLimit(t *testing.T) {
	for _, c := range []struct{ timeout, grace, pool, want time.Duration }{
		{0, 0, 0, 0},
		{0, time.Minute, 2 * time.Hour, 2 * time.Hour},
		{30 * time.Minute, 2 * time.Minute, 0, 33 * time.Minute},
		{30*time.Minute + time.Second, 0, 0, 32 * time.Minute},
		{10 * time.Hour, time.Minute, 2 * time.Hour, 2 * time.Hour},
		{0, 0, 90 * time.Second, time.Minute},
		{0, 0, time.Second, time.Minute},
	} {
		if got := timeLimit(c.timeout, c.grace, c.pool); got != c.want {
			t.Errorf("timeLimit(%s, %s, %s) = %s, want %s", c.timeout, c.grace, c.pool, got, c.want)
		}
	}
	if w := warnSeconds(25*time.Second, time.Minute); w != 25 {
		t.Error(w)
	}
	if w := warnSeconds(10*time.Minute, time.Minute); w != 30 {
		t.Error(w)
	}
}

// TestJob checks sbatch's arguments and that the batch script is valid
// bash carrying the agent's Spec.
func TestJob(t *testing.T) {
	b, err := New(Config{Pools: []Pool{{Name: "gpu", Partition: "p", QoS: "q", Account: "acct",
		Node: virga.Resources{CPU: 8, MemoryMB: 64000, GPU: 4}, Nodes: 4, TimeLimit: 24 * time.Hour,
		Args: []string{"--constraint=a100"}}}, AgentPath: "/opt/virga it's/virga", JobPrefix: "srv1"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := &backend.StartSpec{AttemptID: 7, TrialID: 3, ExperimentID: 1, Argv: []string{"python", "train.py"},
		Env: map[string]string{"VIRGA_HPARAMS": `{"lr":0.1}`}, Resources: virga.Resources{CPU: 14, MemoryMB: 2000, GPU: 4},
		Nodes: 2, ProcessesPerNode: 2, Dir: "/data/attempts/7", ReportURL: "http://srv:7070/api/v1/attempts/7/report",
		Token: "tok", Timeout: time.Hour, StopGrace: 2 * time.Minute}
	p, _ := b.poolNamed("gpu")
	script, args := b.job(s, p)
	want := []string{"--parsable", "--hold", "--job-name=srv1-a7", "--output=/data/attempts/7/output.log", "--chdir=/data/attempts/7",
		"--no-requeue", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=7", "--mem=1000", "--gres=gpu:2",
		"--partition=p", "--qos=q", "--account=acct", "--time=63", "--signal=B:USR1@120", "--constraint=a100"}
	joined := " " + strings.Join(args, " ") + " "
	for _, w := range want {
		if !strings.Contains(joined, " "+w+" ") {
			t.Errorf("sbatch arguments %q lack %q", args, w)
		}
	}
	path := filepath.Join(t.TempDir(), "job.sh")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("bash", "-n", path).CombinedOutput(); err != nil {
		t.Fatalf("the batch script is not valid bash: %v: %s\n%s", err, out, script)
	}
	if !strings.Contains(script, `'/opt/virga it'\''s/virga' 'agent'`) || !strings.Contains(script, "--cpus-per-task=7") {
		t.Fatalf("script:\n%s", script)
	}
	// The exported Spec decodes to the attempt's.
	out, err := exec.Command("bash", "-c", "eval \"$(grep '^export "+agent.EnvSpec+"=' "+path+")\"; printf %s \"$"+agent.EnvSpec+"\"").Output()
	if err != nil {
		t.Fatal(err)
	}
	spec, err := agent.Decode(string(out))
	if err != nil {
		t.Fatal(err)
	}
	if spec.AttemptID != 7 || spec.Nodes != 2 || spec.ProcessesPerNode != 2 || spec.Server != "http://srv:7070" || spec.Token != "tok" {
		t.Fatalf("spec %+v", spec)
	}
}

func TestStartRefusals(t *testing.T) {
	b, err := New(Config{Pools: []Pool{{Name: "a", Node: virga.Resources{CPU: 2, MemoryMB: 1000}, Nodes: 2}},
		AgentPath: "/bin/false", Sbatch: "/nonexistent/sbatch", Scancel: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := &backend.StartSpec{AttemptID: 1, TrialID: 1, Argv: []string{"x"}, Dir: "/tmp/x", Nodes: 3,
		Resources: virga.Resources{CPU: 3}}
	if err := b.Start(t.Context(), s); err == nil || !strings.Contains(err.Error(), "never fit") {
		t.Fatalf("3 nodes on a pool of 2: %v", err)
	}
	s.Nodes, s.Resources = 1, virga.Resources{CPU: 3}
	if err := b.Start(t.Context(), s); err == nil || !strings.Contains(err.Error(), "never fit") {
		t.Fatalf("3 CPUs on nodes of 2: %v", err)
	}
	s.Resources = virga.Resources{CPU: 1}
	if err := b.Start(t.Context(), s); err == nil || strings.Contains(err.Error(), "capacity") {
		t.Fatalf("sbatch missing: %v", err)
	}
	if f := b.Free(); f.CPU != 4 {
		t.Fatalf("free after a failed start: %+v", f)
	}
	for _, cfg := range []Config{{}, {Pools: []Pool{{Name: "a", Node: virga.Resources{CPU: 1}, Nodes: 1}}},
		{Pools: []Pool{{Node: virga.Resources{CPU: 1}, Nodes: 1}, {Name: "b", Node: virga.Resources{CPU: 1}, Nodes: 1}}, AgentPath: "v"},
		{Pools: []Pool{{Name: "a", Node: virga.Resources{CPU: 1}}}, AgentPath: "v"}} {
		if b, err := New(cfg); err == nil {
			b.Close()
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

func FuzzParseQueue(f *testing.F) {
	f.Add(sampleQueue)
	f.Add("1|RUNNING|None|0|0|N/A|N/A|N/A|||\n")
	f.Add("1_2|CANCELLED by 0|None|15|0|N/A|2026-01-01T00:00:00|x|c|n|\r\n")
	f.Fuzz(func(t *testing.T, out string) {
		jobs, bad := ParseQueue(out, time.UTC)
		for _, j := range jobs {
			if !validJobID(j.ID) || j.State == "" || j.Restarts < 0 || strings.ContainsAny(j.Name, "\n") {
				t.Fatalf("job %+v from %q", j, out)
			}
			_ = j.ExitCode()
			_ = j.Requeued()
			ev := exitEvent(&attempt{id: 1}, &j, time.Now())
			if (ev.ExitCode == nil) == (ev.Signal == "") {
				t.Fatalf("exit event %+v: want an exit code or a signal", ev)
			}
			if _, ok := attemptOf("virga", j.Name); ok && !strings.HasPrefix(j.Name, "virga-a") {
				t.Fatalf("name %q", j.Name)
			}
		}
		if len(jobs)+len(bad) > strings.Count(out, "\n")+1 {
			t.Fatalf("%d jobs and %d bad lines from %d lines", len(jobs), len(bad), strings.Count(out, "\n")+1)
		}
	})
}
