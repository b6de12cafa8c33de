package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/client"
	"github.com/virga-ml/virga/internal/api/wire"
)

// Binaries built once for the end-to-end tests.
var (
	virgaBin string
	trialBin string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "virga-e2e-bin")
	if err != nil {
		panic(err)
	}
	virgaBin = filepath.Join(dir, "virga")
	trialBin = filepath.Join(dir, "steptrial")
	for _, b := range [][2]string{{virgaBin, "."}, {trialBin, "./testdata/steptrial"}} {
		// The binary under test has the drivers of this test binary.
		cmd := exec.Command("go", "build", "-tags", strings.Join(buildTags(), ","), "-o", b[0], b[1])
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building", b[1], err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// stepExperiment writes an experiment of steptrial trials.
func stepExperiment(t *testing.T, dir, name string, trials, concurrent, steps, sleepMs int, extra string) string {
	t.Helper()
	y := fmt.Sprintf(`name: %s
entrypoint:
  command: [%s]
  env: {STEPTRIAL_LEDGER: %q}
hyperparameters:
  x: {type: float, min: 0, max: 1}
  steps: %d
  sleep_ms: %d
%s
searcher: random
objective: {metric: loss, direction: minimize}
max_trials: %d
max_concurrent: %d
max_restarts: 5
stop_grace: 5s
seed: 11
`, name, trialBin, dir, steps, sleepMs, extra, trials, concurrent)
	p := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func runCLI(t *testing.T, dir string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(virgaBin, args...)
	cmd.Dir = dir
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return o.String(), e.String(), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), 0
}

func TestRunEmbeddedEndToEnd(t *testing.T) {
	dir := t.TempDir()
	exp := stepExperiment(t, dir, "embedded", 4, 2, 4, 10, "")
	out, errOut, code := runCLI(t, dir, "run", exp)
	if code != 0 {
		t.Fatalf("virga run: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{"experiment 1 embedded COMPLETED", "4 completed", "best trial"} {
		if !strings.Contains(out, want) {
			t.Errorf("run output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, ".virga", "virga.db")); err != nil {
		t.Errorf("no embedded database: %v", err)
	}
	// After the run, the read commands find everything from the store alone.
	out, _, code = runCLI(t, dir, "trials", "1", "--json")
	if code != 0 {
		t.Fatalf("trials exit %d", code)
	}
	var trials []virga.Trial
	if err := json.Unmarshal([]byte(out), &trials); err != nil {
		t.Fatalf("trials --json: %v\n%s", err, out)
	}
	if len(trials) != 4 {
		t.Fatalf("got %d trials, want 4", len(trials))
	}
	for _, tr := range trials {
		if tr.State != virga.TrialCompleted || tr.Step != 3 || tr.Best == nil || tr.Checkpoint == "" {
			t.Errorf("trial %d: state %s step %d best %v checkpoint %q; want COMPLETED at step 3 with a best and a checkpoint",
				tr.ID, tr.State, tr.Step, tr.Best, tr.Checkpoint)
		}
	}
	out, _, code = runCLI(t, dir, "best", "1")
	if code != 0 || !strings.Contains(out, "best trial") || !strings.Contains(out, "loss") {
		t.Errorf("best: exit %d\n%s", code, out)
	}
	out, _, code = runCLI(t, dir, "logs", strconv.FormatInt(trials[0].ID, 10))
	if code != 0 || !strings.Contains(out, "") {
		t.Errorf("logs: exit %d\n%s", code, out)
	}
	out, _, code = runCLI(t, dir, "ls")
	if code != 0 || !strings.Contains(out, "embedded") || !strings.Contains(out, "COMPLETED") {
		t.Errorf("ls: exit %d\n%s", code, out)
	}
	out, _, code = runCLI(t, dir, "show", "1")
	if code != 0 || !strings.Contains(out, "experiment.completed") {
		t.Errorf("show: exit %d\n%s", code, out)
	}
	// Writes without a server say how to get one.
	_, errOut, code = runCLI(t, dir, "stop", "1")
	if code == 0 || !strings.Contains(errOut, "virga server") {
		t.Errorf("stop without a server: exit %d, stderr %q", code, errOut)
	}
}

// TestBadFilesExitTwo runs every bad experiment file of the spec corpus: each
// gets its precise message, exit code 2, and nothing is written.
func TestBadFilesExitTwo(t *testing.T) {
	files, _ := filepath.Glob("../../internal/spec/testdata/bad/*.yaml")
	if len(files) < 25 {
		t.Fatalf("only %d bad files in the corpus, want at least 25", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			dir := t.TempDir()
			abs, _ := filepath.Abs(f)
			want, err := os.ReadFile(strings.TrimSuffix(abs, ".yaml") + ".want")
			if err != nil {
				t.Fatal(err)
			}
			// The CLI names the file as given; give it by base name from its directory.
			cmd := exec.Command(virgaBin, "run", filepath.Base(abs), "--data-dir", dir+"/state")
			cmd.Dir = filepath.Dir(abs)
			var o, e bytes.Buffer
			cmd.Stdout, cmd.Stderr = &o, &e
			err = cmd.Run()
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != 2 {
				t.Fatalf("exit: %v, want code 2; stderr:\n%s", err, e.String())
			}
			if !strings.Contains(e.String(), strings.TrimSpace(string(want))) {
				t.Errorf("stderr:\n%s\nwant it to contain:\n%s", e.String(), want)
			}
			if _, err := os.Stat(dir + "/state"); !os.IsNotExist(err) {
				t.Errorf("the data directory was created for a bad file")
			}
		})
	}
}

// server is a `virga server` child process.
type serverProc struct {
	cmd  *exec.Cmd
	url  string
	logs *bytes.Buffer
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startServer(t *testing.T, dataDir string, port int, db string, extra ...string) *serverProc {
	t.Helper()
	args := append([]string{"server", "--data-dir", dataDir}, extra...)
	if port != 0 {
		args = append(args, "--listen", "127.0.0.1:"+strconv.Itoa(port))
	}
	if db != "" {
		args = append(args, "--db", db)
	}
	s := &serverProc{cmd: exec.Command(virgaBin, args...), url: "http://127.0.0.1:" + strconv.Itoa(port), logs: &bytes.Buffer{}}
	if port == 0 {
		// The server reuses the address its data directory recorded last.
		var info struct{ URL string }
		b, err := os.ReadFile(filepath.Join(dataDir, "server.json"))
		if err != nil || json.Unmarshal(b, &info) != nil {
			t.Fatalf("no server.json in %s: %v", dataDir, err)
		}
		s.url = info.URL
	}
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(s.url + "/api/v1/health")
		if err == nil {
			resp.Body.Close()
			// The server serves before it records its address in
			// server.json, where the CLI looks for it: wait for both.
			var info struct{ URL string }
			b, _ := os.ReadFile(filepath.Join(dataDir, "server.json"))
			if resp.StatusCode == 200 && json.Unmarshal(b, &info) == nil && info.URL == s.url {
				return s
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = s.cmd.Process.Kill()
	t.Fatalf("server did not come up:\n%s", s.logs)
	return nil
}

func (s *serverProc) kill9() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
}

func (s *serverProc) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		s.kill9()
	}
}

// ledger is what steptrial processes wrote about one trial.
type ledger struct {
	starts []ledgerStart
	steps  map[int][]int // step -> pids that computed it
	acks   map[int]bool
}

type ledgerStart struct{ pid, from int }

var ledgerLine = regexp.MustCompile(`^(start|step|ack) (?:pid=(\d+) from=(\d+)|(\d+) pid=(\d+))`)

func readLedger(t *testing.T, dir string, trialID int64) ledger {
	t.Helper()
	l := ledger{steps: map[int][]int{}, acks: map[int]bool{}}
	f, err := os.Open(filepath.Join(dir, fmt.Sprintf("trial-%d.log", trialID)))
	if err != nil {
		t.Fatalf("ledger of trial %d: %v", trialID, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := ledgerLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		switch m[1] {
		case "start":
			pid, _ := strconv.Atoi(m[2])
			from, _ := strconv.Atoi(m[3])
			l.starts = append(l.starts, ledgerStart{pid, from})
		case "step":
			s, _ := strconv.Atoi(m[4])
			pid, _ := strconv.Atoi(m[5])
			l.steps[s] = append(l.steps[s], pid)
		case "ack":
			s, _ := strconv.Atoi(m[4])
			l.acks[s] = true
		}
	}
	return l
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s", d, what)
}

func waitDone(t *testing.T, c *client.Client, id int64, d time.Duration) *client.Client {
	t.Helper()
	waitFor(t, fmt.Sprintf("experiment %d to end", id), d, func() bool {
		v, err := c.Experiment(context.Background(), id)
		return err == nil && v.State.Terminal()
	})
	return c
}

// TestTrialKill9 kills a trial process: it restarts from its latest
// checkpoint and repeats only the steps after it.
func TestTrialKill9(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	s := startServer(t, filepath.Join(dir, "state"), port, "")
	defer s.stop()
	c := client.New(s.url, "")
	exp := stepExperiment(t, dir, "kill-trial", 1, 1, 30, 40, "")
	data, _ := os.ReadFile(exp)
	e, err := c.Submit(context.Background(), "kill-trial.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	var trialID int64
	waitFor(t, "the trial to report step 10", 30*time.Second, func() bool {
		ts, err := c.Trials(context.Background(), e.ID)
		if err != nil || len(ts) == 0 {
			return false
		}
		trialID = ts[0].ID
		return ts[0].Step >= 10
	})
	l := readLedger(t, dir, trialID)
	victim := l.starts[0].pid
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitDone(t, c, e.ID, 60*time.Second)
	v, _ := c.Experiment(context.Background(), e.ID)
	if v.State != virga.ExperimentCompleted {
		t.Fatalf("experiment %s: %s", v.State, v.Message)
	}
	tr, err := c.Trial(context.Background(), trialID)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Restarts != 1 || len(tr.AttemptList) != 2 {
		t.Fatalf("restarts %d attempts %d, want 1 and 2", tr.Restarts, len(tr.AttemptList))
	}
	if a := tr.AttemptList[0]; a.Signal != "killed" || a.Outcome != virga.OutcomeFailed {
		t.Errorf("first attempt: signal %q outcome %s, want killed and FAILED", a.Signal, a.Outcome)
	}
	l = readLedger(t, dir, trialID)
	if len(l.starts) != 2 {
		t.Fatalf("ledger starts %v, want 2", l.starts)
	}
	// The second process started right after the last checkpoint the server kept...
	restored := tr.AttemptList[1].Restored
	cks, _ := c.Checkpoints(context.Background(), trialID)
	var restoredStep int64 = -1
	for _, ck := range cks {
		if ck.ID == restored {
			restoredStep = ck.Step
		}
	}
	ms, _ := c.Metrics(context.Background(), trialID)
	lastAckBefore := -1
	for s := range l.acks {
		for _, pid := range l.steps[s] {
			if pid == victim && s > lastAckBefore {
				lastAckBefore = s
			}
		}
	}
	from := l.starts[1].from
	if from != lastAckBefore+1 && from != lastAckBefore+2 {
		t.Errorf("resumed from step %d; the killed process's last acknowledged step was %d", from, lastAckBefore)
	}
	if restoredStep >= 0 && int64(from) != restoredStep+1 {
		t.Errorf("resumed from step %d, but the restored checkpoint is of step %d", from, restoredStep)
	}
	// ...so the only repeated step is the one in progress when it was killed.
	repeated := 0
	for _, pids := range l.steps {
		if len(pids) > 1 {
			repeated++
		}
	}
	if repeated > 1 {
		t.Errorf("%d steps were computed twice, want at most 1", repeated)
	}
	if len(ms) != 30 {
		t.Errorf("%d metrics stored, want 30 (steps 0..29)", len(ms))
	}
}

// TestServerKill9SQLite and TestServerKill9Postgres kill the server with
// SIGKILL at random moments of a 20-trial experiment and restart it.
func TestServerKill9SQLite(t *testing.T) { serverKillTest(t, "") }

func TestServerKill9Postgres(t *testing.T) {
	base := os.Getenv("VIRGA_TEST_POSTGRES")
	if base == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("VIRGA_TEST_POSTGRES is not set; CI must run the PostgreSQL tests (scripts/test.sh sets it)")
		}
		t.Skip("VIRGA_TEST_POSTGRES is not set; run scripts/postgres.sh start and export its URL to run this test")
	}
	schema := fmt.Sprintf("virga_e2e_%d", time.Now().UnixNano())
	conn, err := pgx.Connect(context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(context.Background(), "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		conn.Close(context.Background())
	})
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	serverKillTest(t, base+sep+"search_path="+schema)
}

func serverKillTest(t *testing.T, db string) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	port := freePort(t)
	s := startServer(t, state, port, db)
	c := client.New(s.url, "")
	exp := stepExperiment(t, dir, "kill-server", 20, 4, 8, 60, "")
	data, _ := os.ReadFile(exp)
	e, err := c.Submit(context.Background(), "kill-server.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	kills := 0
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		time.Sleep(time.Duration(150+rng.IntN(900)) * time.Millisecond)
		v, err := c.Experiment(context.Background(), e.ID)
		if err == nil && v.State.Terminal() {
			break
		}
		s.kill9()
		kills++
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		s = startServer(t, state, port, db)
	}
	defer s.stop()
	waitDone(t, c, e.ID, time.Minute)
	t.Logf("killed the server %d times", kills)
	if kills < 2 {
		t.Errorf("only %d kills happened; the test proves little", kills)
	}
	v, err := c.Experiment(context.Background(), e.ID)
	if err != nil {
		t.Fatal(err)
	}
	if v.State != virga.ExperimentCompleted || v.Counts[virga.TrialCompleted] != 20 {
		t.Fatalf("experiment %s with %v, want COMPLETED with 20 completed trials (%s)\nserver log:\n%s", v.State, v.Counts, v.Message, s.logs)
	}
	trials, _ := c.Trials(context.Background(), e.ID)
	if len(trials) != 20 {
		t.Fatalf("%d trials, want 20", len(trials))
	}
	for _, tr := range trials {
		l := readLedger(t, dir, tr.ID)
		ms, err := c.Metrics(context.Background(), tr.ID)
		if err != nil {
			t.Fatal(err)
		}
		have := map[int64]bool{}
		for _, m := range ms {
			have[m.Step] = true
		}
		for step := range l.acks {
			if !have[int64(step)] {
				t.Errorf("trial %d: acknowledged step %d is not in the store", tr.ID, step)
			}
		}
		if len(ms) != 8 {
			t.Errorf("trial %d: %d metrics, want 8", tr.ID, len(ms))
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "violations")); err == nil {
		t.Errorf("two processes of one trial lived at once:\n%s", b)
	}
}

// TestPauseResume pauses an experiment mid-run and resumes it: paused trials
// continue from their checkpoints.
func TestPauseResume(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, filepath.Join(dir, "state"), freePort(t), "")
	defer s.stop()
	c := client.New(s.url, "")
	exp := stepExperiment(t, dir, "pause", 2, 2, 20, 40, "")
	data, _ := os.ReadFile(exp)
	e, err := c.Submit(context.Background(), "pause.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both trials past step 5", 30*time.Second, func() bool {
		ts, _ := c.Trials(context.Background(), e.ID)
		return len(ts) == 2 && ts[0].Step >= 5 && ts[1].Step >= 5
	})
	if _, err := c.Control(context.Background(), e.ID, wire.OpPause); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both trials paused", 20*time.Second, func() bool {
		ts, _ := c.Trials(context.Background(), e.ID)
		return len(ts) == 2 && ts[0].State == virga.TrialPaused && ts[1].State == virga.TrialPaused
	})
	if _, err := c.Control(context.Background(), e.ID, wire.OpPause); err == nil {
		t.Error("pausing a paused experiment succeeded; want a conflict")
	}
	if _, err := c.Control(context.Background(), e.ID, wire.OpResume); err != nil {
		t.Fatal(err)
	}
	waitDone(t, c, e.ID, 60*time.Second)
	ts, _ := c.Trials(context.Background(), e.ID)
	for _, tr := range ts {
		if tr.State != virga.TrialCompleted || tr.Step != 19 {
			t.Errorf("trial %d: %s at step %d, want COMPLETED at 19", tr.ID, tr.State, tr.Step)
		}
		l := readLedger(t, dir, tr.ID)
		if len(l.starts) != 2 || l.starts[1].from == 0 {
			t.Errorf("trial %d: starts %v; want a second start from its checkpoint", tr.ID, l.starts)
		}
		if tr.Restarts != 0 {
			t.Errorf("trial %d: a pause counted as %d restarts", tr.ID, tr.Restarts)
		}
	}
}

// TestStdoutMetricsAndFailures reports through VIRGA_METRIC lines, and has a
// trial exit 3 once: it is restarted and completes.
func TestStdoutMetricsAndFailures(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, filepath.Join(dir, "state"), freePort(t), "")
	defer s.stop()
	c := client.New(s.url, "")
	exp := stepExperiment(t, dir, "stdout", 2, 2, 5, 10, "  report: stdout\n")
	data, _ := os.ReadFile(exp)
	e, err := c.Submit(context.Background(), "stdout.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, c, e.ID, 60*time.Second)
	ts, _ := c.Trials(context.Background(), e.ID)
	for _, tr := range ts {
		ms, _ := c.Metrics(context.Background(), tr.ID)
		if len(ms) != 5 || tr.State != virga.TrialCompleted {
			t.Errorf("trial %d: %s with %d metrics, want COMPLETED with 5", tr.ID, tr.State, len(ms))
		}
	}
	exp = stepExperiment(t, dir, "fail", 1, 1, 6, 10, "  fail_at: 2\n")
	data, _ = os.ReadFile(exp)
	e, err = c.Submit(context.Background(), "fail.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, c, e.ID, 60*time.Second)
	ts, _ = c.Trials(context.Background(), e.ID)
	if len(ts) != 1 || ts[0].State != virga.TrialCompleted || ts[0].Restarts != 1 {
		t.Fatalf("trial: %+v; want COMPLETED after 1 restart", ts[0])
	}
	l := readLedger(t, dir, ts[0].ID)
	if len(l.starts) != 2 || l.starts[1].from != 3 {
		t.Errorf("starts %v; want the second from step 3", l.starts)
	}
}

// TestExamples runs both example experiments end to end from the repository
// root, as a user would: the Go trainer and the PyTorch trainer.
func TestExamples(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"digits-go", "digits-torch"} {
		t.Run(name, func(t *testing.T) {
			state := t.TempDir()
			cmd := exec.Command(virgaBin, "run", "examples/"+name+"/experiment-quick.yaml", "--data-dir", state)
			cmd.Dir = root
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("virga run: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), "2 completed") || !strings.Contains(string(out), "best trial") {
				t.Fatalf("run output:\n%s", out)
			}
			cmd = exec.Command(virgaBin, "best", "1", "--json", "--data-dir", state)
			cmd.Dir = root
			b, err := cmd.Output()
			if err != nil {
				t.Fatal(err)
			}
			var best struct {
				Trial   virga.Trial   `json:"trial"`
				Metrics *virga.Metric `json:"metrics"`
			}
			if err := json.Unmarshal(b, &best); err != nil {
				t.Fatalf("best --json: %v\n%s", err, b)
			}
			if best.Metrics == nil || best.Metrics.Values["val_accuracy"] < 0.8 || best.Trial.Checkpoint == "" {
				t.Errorf("best trial: %s; want validation accuracy >= 0.8 after 3 epochs and a checkpoint", b)
			}
		})
	}
}

// runExample runs an example experiment to its end in a fresh data
// directory and returns the directory, the run's output and its trials.
func runExample(t *testing.T, file string) (state string, out []byte, trials []virga.Trial) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	state = t.TempDir()
	cmd := exec.Command(virgaBin, "run", file, "--data-dir", state)
	cmd.Dir = root
	if out, err = cmd.CombinedOutput(); err != nil {
		t.Fatalf("virga run: %v\n%s", err, out)
	}
	b, err := exec.Command(virgaBin, "trials", "1", "--json", "--data-dir", state).Output()
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &trials); err != nil {
		t.Fatalf("trials --json: %v\n%s", err, b)
	}
	return state, out, trials
}

// TestExampleTPEASHA runs the TPE + ASHA (promote mode) example end to end:
// trials pause at the first rung, the best are resumed from their
// checkpoints (the trainer says so in its log), some run all 9 epochs, the
// others end as not promoted, and the best model is good.
func TestExampleTPEASHA(t *testing.T) {
	state, out, trials := runExample(t, "examples/digits-go/experiment-tpe-asha.yaml")
	var completed, notPromoted, resumed int
	for _, tr := range trials {
		switch {
		case tr.State == virga.TrialCompleted && tr.Step == 9:
			completed++
		case tr.State == virga.TrialStopped && tr.Message == "not promoted by the searcher":
			notPromoted++
		default:
			t.Errorf("trial %d: %s at step %d (%s)", tr.ID, tr.State, tr.Step, tr.Message)
		}
		if tr.Attempts > 1 {
			resumed++
			logs, err := exec.Command(virgaBin, "logs", strconv.FormatInt(tr.ID, 10), "--data-dir", state).CombinedOutput()
			if err != nil || !strings.Contains(string(logs), "resuming from") {
				t.Errorf("trial %d has %d attempts but its log shows no resume from a checkpoint (%v):\n%s", tr.ID, tr.Attempts, err, logs)
			}
		}
	}
	// Which trials pause depends on the order trials finish epochs; a trial
	// promotable at once goes on without pausing, so not every completed
	// trial was resumed.
	if len(trials) != 15 || completed == 0 || notPromoted == 0 || resumed == 0 {
		t.Fatalf("%d trials: %d completed, %d not promoted, %d resumed; want 15 with some of each\n%s", len(trials), completed, notPromoted, resumed, out)
	}
	b, err := exec.Command(virgaBin, "best", "1", "--json", "--data-dir", state).Output()
	if err != nil {
		t.Fatal(err)
	}
	var best struct {
		Metrics *virga.Metric `json:"metrics"`
	}
	if err := json.Unmarshal(b, &best); err != nil || best.Metrics == nil || best.Metrics.Values["val_accuracy"] < 0.95 {
		t.Errorf("best trial %s (%v): want validation accuracy >= 0.95", b, err)
	}
}

// TestExampleCurve runs the curve-stopper example: forecasts reach the
// trials table, and trials unlikely to beat the best are stopped.
func TestExampleCurve(t *testing.T) {
	state, _, trials := runExample(t, "examples/digits-go/experiment-curve.yaml")
	table, err := exec.Command(virgaBin, "trials", "1", "--data-dir", state).Output()
	if err != nil || !strings.Contains(string(table), "PREDICTED") || !strings.Contains(string(table), " ± ") {
		t.Fatalf("virga trials shows no forecast (%v):\n%s", err, table)
	}
	stopped := 0
	for _, tr := range trials {
		if tr.State == virga.TrialStopped && tr.Step < 9 {
			stopped++
			if p := tr.Prediction; p == nil || p.Horizon != 9 || p.ProbBetter >= 0.05 {
				t.Errorf("trial %d was stopped at step %d with forecast %+v; want one under the 0.05 threshold", tr.ID, tr.Step, p)
			}
		}
	}
	if stopped == 0 {
		t.Errorf("the curve stopper stopped no trial:\n%s", table)
	}
}

// TestExamplePBT runs the population based training example: members are
// replaced by children that restore a strong member's checkpoint (their
// trainer resumes at the parent's epoch) and record their lineage.
func TestExamplePBT(t *testing.T) {
	state, out, trials := runExample(t, "examples/digits-go/experiment-pbt.yaml")
	byID := map[int64]virga.Trial{}
	for _, tr := range trials {
		byID[tr.ID] = tr
	}
	children := 0
	for _, tr := range trials {
		if tr.Parent == 0 {
			continue
		}
		children++
		parent, ok := byID[tr.Parent]
		if !ok || tr.ParentCheckpoint == "" || tr.ParentStep < 1 || tr.ParentStep >= 12 {
			t.Errorf("trial %d: parent %d (known %v), checkpoint %q, step %d", tr.ID, tr.Parent, ok, tr.ParentCheckpoint, tr.ParentStep)
		}
		if tr.HParams["lr"] == parent.HParams["lr"] && tr.HParams["l2"] == parent.HParams["l2"] {
			t.Errorf("trial %d has its parent's hyperparameters: nothing was explored", tr.ID)
		}
		logs, err := exec.Command(virgaBin, "logs", strconv.FormatInt(tr.ID, 10), "--data-dir", state).CombinedOutput()
		if want := fmt.Sprintf("after epoch %d", tr.ParentStep); err != nil || !strings.Contains(string(logs), want) {
			t.Errorf("trial %d: its log does not say it resumed %s (%v):\n%s", tr.ID, want, err, logs)
		}
	}
	if children == 0 {
		t.Fatalf("no trial continued from another:\n%s", out)
	}
}

// TestInterruptLeavesRunning sends SIGINT to a non-interactive `virga run`:
// the experiment is left running, its trials go on without the embedded
// server, and a `virga server` on the same data directory adopts and
// finishes them.
func TestInterruptLeavesRunning(t *testing.T) {
	dir := t.TempDir()
	exp := stepExperiment(t, dir, "interrupt", 2, 2, 25, 40, "")
	cmd := exec.Command(virgaBin, "run", exp)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "trial 1 to report a few steps", 30*time.Second, func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "trial-1.log"))
		return strings.Count(string(b), "ack ") >= 3
	})
	_ = cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Fatalf("virga run after SIGINT: %v, want exit 130\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "leaving experiment 1 running") {
		t.Errorf("output lacks the leave-running message:\n%s", out.String())
	}
	// Without --listen the server takes the address the running trials know.
	s := startServer(t, filepath.Join(dir, ".virga"), 0, "")
	defer s.stop()
	c := client.New(s.url, "")
	waitDone(t, c, 1, 60*time.Second)
	ts, _ := c.Trials(context.Background(), 1)
	for _, tr := range ts {
		if tr.State != virga.TrialCompleted || tr.Step != 24 {
			t.Errorf("trial %d: %s at step %d, want COMPLETED at 24", tr.ID, tr.State, tr.Step)
		}
		if l := readLedger(t, dir, tr.ID); len(l.starts) != 1 {
			t.Errorf("trial %d started %d times; the server should have adopted the running process", tr.ID, len(l.starts))
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "violations")); err == nil {
		t.Errorf("two processes of one trial lived at once:\n%s", b)
	}
}

// TestCLIAnswers: the CLI's answers to common mistakes, and its read-only
// mode (no server running) that serves the data directory in-process.
func TestCLIAnswers(t *testing.T) {
	dir := t.TempDir()
	if _, stderr, code := runCLI(t, dir, "ls", "--server", "localhost:7070"); code != 2 || !strings.Contains(stderr, "want a URL like http://HOST:PORT") {
		t.Errorf("ls --server localhost:7070: exit %d %q; want 2 asking for a URL", code, stderr)
	}
	port := freePort(t)
	if _, stderr, code := runCLI(t, dir, "ls", "--server", fmt.Sprintf("http://127.0.0.1:%d", port)); code != 1 || !strings.Contains(stderr, "is `virga server` running? (VIRGA_SERVER / --server)") {
		t.Errorf("ls against nothing: exit %d %q; want 1 asking whether a server runs", code, stderr)
	}

	// --cpu alone: the memory is this machine's.
	data := filepath.Join(dir, ".virga")
	s := startServer(t, data, port, "", "--cpu", "2")
	exp := stepExperiment(t, dir, "answers", 1, 1, 2, 1, "  report: stdout\n")
	if out, stderr, code := runCLI(t, dir, "run", exp, "--server", s.url); code != 0 {
		t.Fatalf("run: exit %d\n%s%s", code, out, stderr)
	}
	if _, stderr, code := runCLI(t, dir, "stop", "1"); code != 1 || !strings.Contains(stderr, "experiment 1 has already ended (COMPLETED); nothing to stop") {
		t.Errorf("stop of a completed experiment: exit %d %q", code, stderr)
	}
	s.stop()

	// No server: reads are served in-process; following needs a server.
	if out, stderr, code := runCLI(t, dir, "logs", "1"); code != 0 || !strings.Contains(out, "VIRGA_METRIC") {
		t.Errorf("logs without a server: exit %d %q %q; want the trial's output", code, out, stderr)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, stderr, code := runCLI(t, dir, "logs", "1", "-f"); code != 1 || !strings.Contains(stderr, "following needs a running server") {
			t.Errorf("logs -f without a server: exit %d %q; want 1 saying a server is needed", code, stderr)
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("logs -f without a server hangs")
	}
	if out, stderr, code := runCLI(t, dir, "ls", "--json"); code != 0 || !strings.Contains(out, `"COMPLETED"`) {
		t.Errorf("ls without a server: exit %d %q %q", code, out, stderr)
	}
	if _, stderr, code := runCLI(t, dir, "ls", "--state", "bogus"); code != 1 || !strings.Contains(stderr, "ACTIVE, PAUSED") {
		t.Errorf("ls --state bogus: exit %d %q; want 1 listing the states", code, stderr)
	}
}

// TestServerGivesUpOnAnUnreachableDatabase: with --db-wait 0, a PostgreSQL
// that refuses connections ends virga server at once with an error about
// the database, not a hint to start a Virga server; a negative wait is a
// usage error.
func TestServerGivesUpOnAnUnreachableDatabase(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	db := "postgres://virga@" + addr + "/virga?sslmode=disable"
	_, stderr, code := runCLI(t, dir, "server", "--data-dir", filepath.Join(dir, "data"), "--db", db, "--db-wait", "0")
	if code != 1 || !strings.Contains(stderr, "connection refused") || strings.Contains(stderr, "is `virga server` running?") ||
		strings.Contains(stderr, "waiting for the database") {
		t.Errorf("exit %d, stderr:\n%s\nwant 1, the refused connection at once, and no hint to start a Virga server", code, stderr)
	}
	if _, stderr, code := runCLI(t, dir, "server", "--data-dir", filepath.Join(dir, "data"), "--db", db, "--db-wait", "-1s"); code != 2 || !strings.Contains(stderr, "--db-wait -1s") {
		t.Errorf("--db-wait -1s: exit %d, stderr:\n%s\nwant 2 naming the flag", code, stderr)
	}
}

// TestRunWithoutResultFails: a search that ends with no trial that reported
// the objective ends FAILED with a reason, and `virga run` exits 1, so that a
// script or CI job stops there; --json says the same on its end event.
func TestRunWithoutResultFails(t *testing.T) {
	for _, tc := range []struct {
		name, command string
		// wantReason is the experiment's reason; wantOut a part of run's summary.
		wantReason virga.ExperimentReason
		wantOut    string
	}{
		{"missing trainer", "[/nonexistent/train]", virga.ReasonAllTrialsFailed, "all 3 trials failed"},
		{"no objective", `[sh, -c, "echo VIRGA_METRIC step=1 acc=0.5"]`, virga.ReasonNoObjective, `no trial reported the objective metric "val_loss"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			y := fmt.Sprintf(`name: noresult
entrypoint:
  command: %s
hyperparameters:
  x: {type: float, min: 0, max: 1}
searcher: random
objective: {metric: val_loss, direction: minimize}
max_trials: 3
max_restarts: 0
`, tc.command)
			if err := os.WriteFile(filepath.Join(dir, "exp.yaml"), []byte(y), 0o644); err != nil {
				t.Fatal(err)
			}
			out, errOut, code := runCLI(t, dir, "run", "exp.yaml")
			if code != 1 {
				t.Fatalf("virga run: exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			for _, want := range []string{"experiment 1 noresult FAILED (" + string(tc.wantReason) + ")", tc.wantOut} {
				if !strings.Contains(out, want) {
					t.Errorf("run output lacks %q:\n%s", want, out)
				}
			}
			out, errOut, code = runCLI(t, dir, "run", "exp.yaml", "--json")
			if code != 1 || !strings.Contains(errOut, "experiment 2 FAILED ("+string(tc.wantReason)+")") {
				t.Errorf("virga run --json: exit %d, stderr %q; want 1 naming the reason", code, errOut)
			}
			var end struct {
				Event string           `json:"event"`
				Data  virga.Experiment `json:"data"`
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &end); err != nil || end.Event != "end" ||
				end.Data.State != virga.ExperimentFailed || end.Data.Reason != tc.wantReason {
				t.Errorf("last --json line %q (%v); want the end event, FAILED with reason %s", lines[len(lines)-1], err, tc.wantReason)
			}
			out, _, code = runCLI(t, dir, "show", "1")
			if code != 0 || !strings.Contains(out, "state:      FAILED, "+string(tc.wantReason)) {
				t.Errorf("show: exit %d\n%s", code, out)
			}
		})
	}
}

// TestLogsJSON: logs --json gives each attempt's output as its log.
func TestLogsJSON(t *testing.T) {
	dir := t.TempDir()
	y := `name: twice
entrypoint:
  command: [sh, -c, 'if [ -e first ]; then echo second; echo "VIRGA_METRIC {\"step\":0,\"metrics\":{\"loss\":1}}"; else touch first; echo first; exit 3; fi']
  workdir: .
hyperparameters:
  x: {type: float, min: 0, max: 1}
searcher: random
objective: {metric: loss, direction: minimize}
max_trials: 1
max_restarts: 1
`
	if err := os.WriteFile(filepath.Join(dir, "exp.yaml"), []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runCLI(t, dir, "run", "exp.yaml"); code != 0 {
		t.Fatalf("virga run: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code := runCLI(t, dir, "logs", "1", "--json")
	if code != 0 {
		t.Fatalf("logs --json: exit %d %s", code, errOut)
	}
	var v struct {
		ID       int64 `json:"id"`
		Attempts []struct {
			Number  int    `json:"number"`
			Outcome string `json:"outcome"`
			Log     string `json:"log"`
		} `json:"attempt_list"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("logs --json: %v\n%s", err, out)
	}
	if v.ID != 1 || len(v.Attempts) != 2 || v.Attempts[0].Log != "first\n" || !strings.HasPrefix(v.Attempts[1].Log, "second\n") {
		t.Errorf("logs --json = %s\nwant trial 1 with attempt 1's log \"first\\n\" and attempt 2's starting \"second\\n\"", out)
	}
	if _, errOut, code := runCLI(t, dir, "logs", "1", "--json", "-f"); code != 2 || !strings.Contains(errOut, "drop -f") {
		t.Errorf("logs --json -f: exit %d %q; want 2 saying to drop -f", code, errOut)
	}
}

// TestMissingFileExitsTwo: a file named on the command line that cannot be
// read is a bad argument: exit 2 from every command, naming the file.
func TestMissingFileExitsTwo(t *testing.T) {
	dir := t.TempDir()
	good := stepExperiment(t, dir, "good", 1, 1, 1, 1, "")
	capFile := capacityFile(t)
	for _, args := range [][]string{
		{"validate", "nope.yaml"},
		{"validate", "nope.yaml", "--json"},
		{"run", "nope.yaml"},
		{"run", "nope.yaml", "--json"},
		{"estimate", "nope.yaml", "--capacity", capFile},
		{"run", good, "--capacity", "nope.yaml"},
		{"server", "--capacity", "nope.yaml"},
	} {
		_, errOut, code := runCLI(t, dir, args...)
		if code != 2 || !strings.Contains(errOut, "nope.yaml") || !strings.Contains(errOut, "no such file") {
			t.Errorf("virga %s: exit %d, stderr %q; want 2 naming nope.yaml and saying it does not exist", strings.Join(args, " "), code, errOut)
		}
	}
}

// TestValidateJSON: validate --json prints one document on stdout, the
// experiment of each good file and the problems of each bad one, and exits
// 2 when any file is bad.
func TestValidateJSON(t *testing.T) {
	dir := t.TempDir()
	good := stepExperiment(t, dir, "good", 1, 1, 1, 1, "")
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("name: bad\nobjective: loss\nsearcher: random\nmax_trials: \"ten\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	type doc struct {
		Valid bool `json:"valid"`
		Files []struct {
			File       string          `json:"file"`
			Valid      bool            `json:"valid"`
			Experiment json.RawMessage `json:"experiment"`
			Problems   []struct {
				File    string `json:"file"`
				Line    int    `json:"line"`
				Col     int    `json:"col"`
				Field   string `json:"field"`
				Message string `json:"message"`
			} `json:"problems"`
		} `json:"files"`
	}
	out, errOut, code := runCLI(t, dir, "validate", "--json", good, "bad.yaml", "nope.yaml")
	var d doc
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("validate --json: exit %d, stdout not JSON (%v):\n%s\nstderr:\n%s", code, err, out, errOut)
	}
	if code != 2 || d.Valid || len(d.Files) != 3 {
		t.Fatalf("validate --json: exit %d, %+v; want 2 and three files, not all valid", code, d)
	}
	if f := d.Files[0]; f.File != good || !f.Valid || !strings.Contains(string(f.Experiment), `"name": "good"`) || len(f.Problems) != 0 {
		t.Errorf("good file %s: valid %v, problems %+v, experiment %s; want valid with its experiment", f.File, f.Valid, f.Problems, f.Experiment)
	}
	if f := d.Files[1]; f.Valid || len(f.Problems) != 1 || f.Problems[0].File != "bad.yaml" || f.Problems[0].Line != 4 ||
		f.Problems[0].Col != 13 || f.Problems[0].Field != "max_trials" || !strings.Contains(f.Problems[0].Message, `expected an integer, got the string "ten"`) {
		t.Errorf("bad file: %+v, want the problem at bad.yaml:4:13 in max_trials", f)
	}
	if f := d.Files[2]; f.Valid || len(f.Problems) != 1 || f.Problems[0].Line != 0 || !strings.Contains(f.Problems[0].Message, "no such file") {
		t.Errorf("missing file: %+v, want one problem saying so", f)
	}
	out, _, code = runCLI(t, dir, "validate", "--json", good)
	if err := json.Unmarshal([]byte(out), &d); err != nil || code != 0 || !d.Valid {
		t.Errorf("validate --json of a good file: exit %d %v\n%s", code, err, out)
	}
}

// TestServerFlagReadsTheTokenFile: with --server and neither --token nor
// VIRGA_API_TOKEN, the CLI sends the admin token of --data-dir's admin-token
// file, as documented; a token the server refuses is named by its file.
func TestServerFlagReadsTheTokenFile(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "srv")
	port := freePort(t)
	// Off loopback, so that every request needs the token.
	s := &serverProc{cmd: exec.Command(virgaBin, "server", "--data-dir", data, "--listen", fmt.Sprintf("0.0.0.0:%d", port)),
		url: fmt.Sprintf("http://127.0.0.1:%d", port), logs: &bytes.Buffer{}}
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	waitFor(t, "the server to answer with its admin token", 20*time.Second, func() bool {
		tok, err := os.ReadFile(filepath.Join(data, "admin-token"))
		if err != nil {
			return false
		}
		_, err = client.New(s.url, strings.TrimSpace(string(tok))).Health(context.Background())
		return err == nil
	})
	clean := func(cmd *exec.Cmd) {
		cmd.Env = append(os.Environ(), "VIRGA_API_TOKEN=", "VIRGA_SERVER=", "VIRGA_DATA_DIR=")
	}
	run := func(args ...string) (string, string, int) {
		cmd := exec.Command(virgaBin, args...)
		cmd.Dir = dir
		clean(cmd)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return o.String(), e.String(), ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return o.String(), e.String(), 0
	}
	if out, errOut, code := run("ls", "--server", s.url, "--data-dir", data); code != 0 {
		t.Errorf("ls --server with the server's --data-dir: exit %d %q %q; want 0 with the token of %s/admin-token", code, out, errOut, data)
	}
	if _, errOut, code := run("ls", "--server", s.url, "--data-dir", filepath.Join(dir, "none")); code != 1 || !strings.Contains(errOut, "a token is required") {
		t.Errorf("ls --server without a token: exit %d %q; want 1 asking for one", code, errOut)
	}
	other := filepath.Join(dir, "other")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "admin-token"), []byte("vtnotthisone\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := run("ls", "--server", s.url, "--data-dir", other); code != 1 ||
		!strings.Contains(errOut, filepath.Join(other, "admin-token")) || !strings.Contains(errOut, "--token") {
		t.Errorf("ls --server with another server's token file: exit %d %q; want 1 naming the file and --token", code, errOut)
	}
}
