package slurm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/backend/slurm/slurmtest"
)

// The cluster tests run against the single-host test cluster of
// scripts/slurm.sh: nodes virga1 and virga2 (2 CPUs, 4000 MB each),
// partitions spot (preempted by ondemand, GraceTime 15 s) and ondemand.

func needCluster(t *testing.T) {
	t.Helper()
	slurmtest.Need(t) // skips without the cluster; takes turns with other packages' cluster tests
}

var (
	node1CPU = virga.Resources{CPU: 1, MemoryMB: 100}
	shape    = virga.Resources{CPU: 2, MemoryMB: 4000}
)

// testPools: spot1 and od1 are pinned to virga1 (the tests that must not
// disturb each other use them one at a time); od2 to virga2, with a one
// minute time limit; ondemand spans both nodes.
func testPools() []Pool {
	return []Pool{
		{Name: "spot1", Partition: "spot", Node: shape, Nodes: 1, Preemptible: true, Warning: 15 * time.Second, Args: []string{"--nodelist=virga1"}},
		{Name: "od1", Partition: "ondemand", Node: shape, Nodes: 1, Args: []string{"--nodelist=virga1"}},
		{Name: "od2", Partition: "ondemand", Node: shape, Nodes: 1, TimeLimit: time.Minute, Args: []string{"--nodelist=virga2"}},
		{Name: "ondemand", Partition: "ondemand", Node: shape, Nodes: 2},
		{Name: "requeue1", Partition: "spot", Node: shape, Nodes: 1, Preemptible: true, Args: []string{"--nodelist=virga1", "--requeue"}},
		{Name: "wide1", Partition: "ondemand", Node: shape, Nodes: 5, Args: []string{"--nodelist=virga1"}},
	}
}

// harness collects a backend's events by attempt.
type harness struct {
	b    *Backend
	mu   sync.Mutex
	evs  map[int64][]backend.Event
	cond chan struct{}
	done chan struct{}
}

func newHarness(t *testing.T, prefix string) *harness {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return newHarnessWith(t, Config{Pools: testPools(), AgentPath: exe, JobPrefix: prefix, PollInterval: 250 * time.Millisecond})
}

func newHarnessWith(t *testing.T, cfg Config) *harness {
	t.Helper()
	if os.Getenv("VIRGA_SLURM_DEBUG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{b: b, evs: map[int64][]backend.Event{}, cond: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		for ev := range b.Events() {
			h.mu.Lock()
			h.evs[ev.AttemptID] = append(h.evs[ev.AttemptID], ev)
			close(h.cond)
			h.cond = make(chan struct{})
			h.mu.Unlock()
		}
	}()
	t.Cleanup(func() { h.close() })
	return h
}

func (h *harness) close() {
	_ = h.b.Close()
	<-h.done
}

// wait returns the attempt's events once it has one of kind, failing the
// test after timeout.
func (h *harness) wait(t *testing.T, id int64, kind backend.EventKind, timeout time.Duration) []backend.Event {
	t.Helper()
	deadline := time.After(timeout)
	for {
		h.mu.Lock()
		evs := append([]backend.Event(nil), h.evs[id]...)
		c := h.cond
		h.mu.Unlock()
		for _, ev := range evs {
			if ev.Kind == kind {
				return evs
			}
		}
		select {
		case <-c:
		case <-deadline:
			t.Fatalf("attempt %d: no %s event within %s; events %+v", id, kind, timeout, evs)
		}
	}
}

// exited waits for the attempt's Exited event and checks that Started and
// Exited came at most once each, in order.
func (h *harness) exited(t *testing.T, id int64, timeout time.Duration, wantStarted bool) backend.Event {
	t.Helper()
	h.wait(t, id, backend.Exited, timeout)
	time.Sleep(2 * h.b.cfg.PollInterval) // nothing may follow
	h.mu.Lock()
	evs := append([]backend.Event(nil), h.evs[id]...)
	h.mu.Unlock()
	var kinds []string
	for _, ev := range evs {
		kinds = append(kinds, string(ev.Kind))
	}
	want := "exited"
	if wantStarted {
		want = "started exited"
	}
	if strings.Join(kinds, " ") != want {
		t.Fatalf("attempt %d: events %v, want %s: %+v", id, kinds, want, evs)
	}
	return evs[len(evs)-1]
}

func startSpec(t *testing.T, id int64, pool string, markers string, argv ...string) *backend.StartSpec {
	return &backend.StartSpec{AttemptID: id, TrialID: id, ExperimentID: 1, Argv: argv,
		Env: map[string]string{"MARKERS": markers}, Resources: node1CPU, Nodes: 1, ProcessesPerNode: 1,
		Dir: t.TempDir(), ReportURL: "http://127.0.0.1:9/api/v1/attempts/1/report", Token: "test-token",
		Pool: pool, StopGrace: 5 * time.Second}
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

func exitCode(ev backend.Event) int {
	if ev.ExitCode == nil {
		return -1
	}
	return *ev.ExitCode
}

// squeueState returns the state of the job named name, "" if none.
func squeueState(t *testing.T, name string) string {
	out, err := exec.Command("squeue", "--me", "-h", "--states=all", "--name="+name, "-O", "State").Output()
	if err != nil {
		t.Fatalf("squeue: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func TestCluster(t *testing.T) {
	needCluster(t)
	prefix := fmt.Sprintf("vt%d-%s", os.Getpid(), time.Now().Format("150405"))
	h := newHarness(t, prefix)
	t.Cleanup(func() { cancelJobs(prefix) })
	ctx := context.Background()
	began := time.Now()

	// The time limit takes a minute (Slurm's limits are whole minutes): its
	// attempt runs on virga2 while the other cases run.
	tlMarkers := t.TempDir()
	tl := startSpec(t, 900, "od2", tlMarkers, "run", "600", "0")
	tl.StopGrace = 25 * time.Second
	tl.Env["TERM_CODE"] = "0"
	if err := h.b.Start(ctx, tl); err != nil {
		t.Fatal(err)
	}

	t.Run("completes", func(t *testing.T) {
		m := t.TempDir()
		s := startSpec(t, 1, "od1", m, "run", "1", "0")
		if err := h.b.Start(ctx, s); err != nil {
			t.Fatal(err)
		}
		if err := h.b.Start(ctx, s); !errors.Is(err, virga.ErrConflict) {
			t.Fatalf("a second Start of the attempt: %v, want ErrConflict", err)
		}
		ev := h.exited(t, 1, 60*time.Second, true)
		if exitCode(ev) != 0 || ev.Preempted || ev.Lost || ev.Pool != "od1" {
			t.Fatalf("exit %+v, want code 0 on od1", ev)
		}
		if !exists(filepath.Join(m, "start-0")) {
			t.Fatal("the agent did not run")
		}
		if _, err := os.Stat(filepath.Join(s.Dir, "output.log")); err != nil {
			t.Fatalf("no output.log in the attempt's directory: %v", err)
		}
	})

	t.Run("fails", func(t *testing.T) {
		s := startSpec(t, 2, "od1", t.TempDir(), "run", "0.5", "3")
		if err := h.b.Start(ctx, s); err != nil {
			t.Fatal(err)
		}
		ev := h.exited(t, 2, 60*time.Second, true)
		if exitCode(ev) != 3 || ev.Preempted {
			t.Fatalf("exit %+v, want code 3", ev)
		}
	})

	t.Run("stop", func(t *testing.T) {
		// One trial ends on SIGTERM, one ignores it and is killed.
		m1, m2 := t.TempDir(), t.TempDir()
		s1 := startSpec(t, 3, "od1", m1, "run", "600", "0")
		s2 := startSpec(t, 4, "od1", m2, "ignore-term", "run", "600", "0")
		for _, s := range []*backend.StartSpec{s1, s2} {
			if err := h.b.Start(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		h.wait(t, 3, backend.Started, 60*time.Second)
		h.wait(t, 4, backend.Started, 60*time.Second)
		waitFile(t, filepath.Join(m1, "start-0"))
		waitFile(t, filepath.Join(m2, "start-0"))
		stopped := time.Now()
		_ = h.b.Stop(3, 5*time.Second)
		_ = h.b.Stop(4, 3*time.Second)
		ev := h.exited(t, 3, 30*time.Second, true)
		if ev.Signal != "terminated" || ev.ExitCode != nil || ev.Preempted {
			t.Fatalf("attempt 3: %+v, want signal terminated (the agent's 143: the trial died of SIGTERM)", ev)
		}
		ev = h.exited(t, 4, 30*time.Second, true)
		if ev.Signal != "killed" || ev.Preempted {
			t.Fatalf("attempt 4: %+v, want killed", ev)
		}
		if !exists(filepath.Join(m2, "term-0")) {
			t.Fatal("attempt 4 was killed without SIGTERM first")
		}
		if d := time.Since(stopped); d < 3*time.Second {
			t.Fatalf("attempt 4 was killed %s after Stop, before its grace", d)
		}
		if _, err := os.Stat(filepath.Join(m1, "term-0")); err != nil {
			t.Fatal("attempt 3 got no SIGTERM")
		}
	})

	t.Run("stop pending", func(t *testing.T) {
		// Another job holds virga1: the attempt waits, and Stop cancels it.
		defer holdNode(t, "virga1", "ondemand")()
		s := startSpec(t, 7, "od1", t.TempDir(), "run", "600", "0")
		if err := h.b.Start(ctx, s); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		if st := squeueState(t, JobName(h.b.cfg.JobPrefix, 7)); st != "PENDING" {
			t.Fatalf("attempt 7's job is %q, want PENDING behind the job holding virga1", st)
		}
		_ = h.b.Stop(7, 10*time.Second)
		ev := h.exited(t, 7, 30*time.Second, false)
		if ev.Preempted || ev.Lost {
			t.Fatalf("attempt 7: %+v", ev)
		}
	})

	t.Run("gang", func(t *testing.T) {
		m := t.TempDir()
		s := startSpec(t, 8, "ondemand", m, "run", "1", "0")
		s.Nodes, s.Resources = 2, virga.Resources{CPU: 2, MemoryMB: 200}
		if err := h.b.Start(ctx, s); err != nil {
			t.Fatal(err)
		}
		ev := h.exited(t, 8, 60*time.Second, true)
		if exitCode(ev) != 0 {
			t.Fatalf("gang: %+v", ev)
		}
		a, _ := os.ReadFile(filepath.Join(m, "start-0"))
		b, _ := os.ReadFile(filepath.Join(m, "start-1"))
		n0, n1 := strings.Fields(string(a)), strings.Fields(string(b))
		if len(n0) < 3 || len(n1) < 3 || n0[0] == n1[0] || n0[1] != n1[1] {
			t.Fatalf("gang: node 0 %q, node 1 %q: want one job on two nodes", a, b)
		}
		t.Logf("gang on %s and %s (job %s, nodes %s)", n0[0], n1[0], n0[1], n0[2])

		// Losing one node's agent ends the whole gang.
		s = startSpec(t, 9, "ondemand", t.TempDir(), "run", "1", "5", "1")
		s.Nodes, s.Resources = 2, virga.Resources{CPU: 2, MemoryMB: 200}
		if err := h.b.Start(ctx, s); err != nil {
			t.Fatal(err)
		}
		ev = h.exited(t, 9, 40*time.Second, true)
		// srun ends the other node with SIGTERM: its 143 may be the status.
		if (ev.ExitCode == nil && ev.Signal == "") || (ev.ExitCode != nil && *ev.ExitCode == 0) || ev.Preempted || ev.Lost {
			t.Fatalf("gang with a failed node: %+v, want a failure", ev)
		}
	})

	t.Run("preempted", func(t *testing.T) {
		// Two trials on spot (virga1): one checkpoints and exits on SIGTERM,
		// one ignores it and is killed after the partition's GraceTime; then
		// an ondemand job takes the whole node.
		m1, m2 := t.TempDir(), t.TempDir()
		s1 := startSpec(t, 10, "spot1", m1, "run", "600", "0")
		s1.Env["TERM_DELAY"] = "1"
		s2 := startSpec(t, 11, "spot1", m2, "ignore-term", "run", "600", "0")
		for _, s := range []*backend.StartSpec{s1, s2} {
			if err := h.b.Start(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		h.wait(t, 10, backend.Started, 60*time.Second)
		h.wait(t, 11, backend.Started, 60*time.Second)
		waitFile(t, filepath.Join(m1, "start-0"))
		waitFile(t, filepath.Join(m2, "start-0"))
		defer holdNode(t, "virga1", "ondemand")()
		ev := h.exited(t, 10, 40*time.Second, true)
		if !ev.Preempted || ev.Signal != "terminated" {
			t.Fatalf("attempt 10: %+v, want preempted, terminated by its SIGTERM (143)", ev)
		}
		ev = h.exited(t, 11, 40*time.Second, true)
		if !ev.Preempted {
			t.Fatalf("attempt 11: %+v, want preempted", ev)
		}
		t.Logf("preempted: %s / %s", h.evs[10][1].Message, ev.Message)
		if !exists(filepath.Join(m1, "term-0")) || !exists(filepath.Join(m2, "term-0")) {
			t.Fatal("a preempted trial got no SIGTERM")
		}
		for _, id := range []int64{10, 11} {
			if st := squeueState(t, JobName(h.b.cfg.JobPrefix, id)); st == "PENDING" || st == "RUNNING" || st == "REQUEUED" {
				t.Fatalf("attempt %d's job is %s after its preemption", id, st)
			}
		}
	})

	t.Run("requeued", func(t *testing.T) {
		// A site that requeues preempted jobs (here: --requeue and an
		// explicit requeue): Virga cancels the job and reports it
		// preempted, to place its next attempt itself.
		m := t.TempDir()
		if err := h.b.Start(ctx, startSpec(t, 15, "requeue1", m, "run", "600", "0")); err != nil {
			t.Fatal(err)
		}
		h.wait(t, 15, backend.Started, 60*time.Second)
		waitFile(t, filepath.Join(m, "start-0"))
		name := JobName(h.b.cfg.JobPrefix, 15)
		id, err := exec.Command("squeue", "--me", "-h", "--name="+name, "-o", "%i").Output()
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("scontrol", "requeue", strings.TrimSpace(string(id))).CombinedOutput(); err != nil {
			t.Fatalf("scontrol requeue: %v: %s", err, out)
		}
		ev := h.exited(t, 15, 30*time.Second, true)
		if !ev.Preempted || !strings.Contains(ev.Message, "requeued") {
			t.Fatalf("requeued: %+v, want preempted", ev)
		}
		for range 50 {
			if st := squeueState(t, name); st != "PENDING" && st != "REQUEUED" && st != "RUNNING" {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("the requeued job is still %s", squeueState(t, name))
	})

	t.Run("adopt", func(t *testing.T) {
		prefix := h.b.cfg.JobPrefix
		h1 := newHarness(t, prefix)
		s := startSpec(t, 12, "od1", t.TempDir(), "run", "4", "7")
		if err := h1.b.Start(ctx, s); err != nil {
			t.Fatal(err)
		}
		m14 := t.TempDir()
		if err := h1.b.Start(ctx, startSpec(t, 14, "od1", m14, "run", "600", "0")); err != nil {
			t.Fatal(err)
		}
		h1.wait(t, 12, backend.Started, 60*time.Second)
		h1.wait(t, 14, backend.Started, 60*time.Second)
		waitFile(t, filepath.Join(m14, "start-0"))
		// A second backend (a restarted server) after the first is gone.
		h1.close()
		h2 := newHarness(t, prefix)
		// Stopped as soon as adopted (a stop the earlier server had begun):
		// the trial still gets SIGTERM first.
		if err := h2.b.Adopt(ctx, &virga.Attempt{ID: 14, Pool: "od1"}, node1CPU); err != nil {
			t.Fatal(err)
		}
		_ = h2.b.Stop(14, 10*time.Second)
		if ev := h2.exited(t, 14, 30*time.Second, true); ev.Signal != "terminated" || !exists(filepath.Join(m14, "term-0")) {
			t.Fatalf("adopted and stopped: %+v, want signal terminated after SIGTERM", ev)
		}
		at := &virga.Attempt{ID: 12, Pool: "od1"}
		if err := h2.b.Adopt(ctx, at, node1CPU); err != nil {
			t.Fatal(err)
		}
		if err := h2.b.Adopt(ctx, at, node1CPU); !errors.Is(err, virga.ErrConflict) {
			t.Fatalf("adopting twice: %v", err)
		}
		if got := h2.b.Pools()[1].Free; got.CPU != 1 {
			t.Fatalf("pool od1 while the adopted attempt runs: free %+v, want 1 CPU", got)
		}
		h2.wait(t, 12, backend.Started, 30*time.Second)
		ev := h2.exited(t, 12, 30*time.Second, true)
		if exitCode(ev) != 7 {
			t.Fatalf("adopted: %+v, want exit code 7", ev)
		}
		if got := h2.b.Pools()[1].Free; got.CPU != 2 {
			t.Fatalf("pool od1 after: free %+v", got)
		}
		// An attempt whose job never existed is lost.
		if err := h2.b.Adopt(ctx, &virga.Attempt{ID: 13}, node1CPU); err != nil {
			t.Fatal(err)
		}
		if ev := h2.exited(t, 13, 30*time.Second, false); !ev.Lost {
			t.Fatalf("adopting an attempt without a job: %+v, want Lost", ev)
		}
	})

	t.Run("polling cost", func(t *testing.T) {
		// Ten attempts (two run on virga1, eight wait): each poll is still
		// one squeue.
		for id := int64(20); id < 30; id++ {
			if err := h.b.Start(ctx, startSpec(t, id, "wide1", t.TempDir(), "run", "600", "0")); err != nil {
				t.Fatal(err)
			}
		}
		before := h.b.Stats()
		start := time.Now()
		time.Sleep(3 * time.Second)
		q := h.b.Stats().Queries - before.Queries
		cycles := int64(time.Since(start)/h.b.cfg.PollInterval) + 1
		t.Logf("%d squeue calls in %d poll cycles with 10+ attempts", q, cycles)
		if q > cycles || q < cycles/2 {
			t.Fatalf("%d queries in %d cycles: want one per cycle", q, cycles)
		}
		for id := int64(20); id < 30; id++ {
			_ = h.b.Stop(id, 0)
		}
		for id := int64(20); id < 30; id++ {
			h.wait(t, id, backend.Exited, 30*time.Second)
		}
	})

	t.Run("time limit", func(t *testing.T) {
		// Warned (SIGTERM) before the limit, it exits 0 having saved its
		// work: preempted, to resume in a new job.
		ev := h.exited(t, 900, 150*time.Second, true)
		if !ev.Preempted || !exists(filepath.Join(tlMarkers, "term-0")) {
			t.Fatalf("time limit: %+v (SIGTERM seen: %v), want preempted after SIGTERM", ev, exists(filepath.Join(tlMarkers, "term-0")))
		}
		t.Logf("time limit: %s", ev.Message)
	})
	t.Logf("stats %+v; the cluster cases took %s", h.b.Stats(), time.Since(began).Round(time.Second))
}

// cancelJobs cancels whatever jobs of the test are left (a test that
// failed half-way).
func cancelJobs(prefix string) {
	out, _ := exec.Command("squeue", "--me", "-h", "-o", "%i %j").Output()
	for line := range strings.Lines(string(out)) {
		if id, name, ok := strings.Cut(strings.TrimSpace(line), " "); ok && strings.HasPrefix(name, prefix+"-a") {
			_ = exec.Command("scancel", id).Run()
		}
	}
}

// holdNode submits a job that takes the whole node on partition and
// waits until it runs; the function returned cancels it.
func holdNode(t *testing.T, node, partition string) func() {
	t.Helper()
	out, err := exec.Command("sbatch", "--parsable", "--partition="+partition, "--nodelist="+node, "--exclusive",
		"--mem=1000", "--job-name=virga-test-holder", "--output=/dev/null", "--wrap=sleep 300").CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch a job holding %s: %v: %s", node, err, out)
	}
	id := strings.TrimSpace(string(out))
	return func() { _ = exec.Command("scancel", id).Run() }
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	for range 200 {
		if exists(path) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", path)
}
