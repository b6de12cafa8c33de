package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/clock"
)

func intp(n int) *int { return &n }

// shimModes are the two ways Start gets a shim: handed to a warm one, or
// executed for the attempt.
var shimModes = []struct {
	name string
	warm int // Config.WarmShims
}{{"warm", 2}, {"cold", -1}}

func TestExit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		script string
		// wantCode and wantSignal describe the Exited event.
		wantCode   *int
		wantSignal string
	}{
		{name: "exit 0", script: "exit 0", wantCode: intp(0)},
		{name: "exit 3", script: "exit 3", wantCode: intp(3)},
		{name: "killed by a signal", script: "kill -9 $$", wantSignal: "killed"},
	}
	for _, mode := range shimModes {
		for i, tc := range tests {
			t.Run(mode.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				fixed := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
				b := newBackend(t, Config{Clock: clock.NewFake(fixed), WarmShims: mode.warm})
				s := shSpec(t, int64(i+1), tc.script)
				started := start(t, b, s)
				if !started.Time.Equal(fixed) {
					t.Errorf("Started.Time = %v, want the injected clock's %v", started.Time, fixed)
				}
				ev := expect(t, b, s.AttemptID, backend.Exited)
				got := backend.Event{ExitCode: ev.ExitCode, Signal: ev.Signal, Lost: ev.Lost}
				want := backend.Event{ExitCode: tc.wantCode, Signal: tc.wantSignal}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("Exited (-want,+got):\n%s", diff)
				}
				rec, err := readShimRecord(s.Dir)
				if err != nil {
					t.Fatal(err)
				}
				if rec.TrialPID != started.PID || rec.ShimPID <= 0 {
					t.Errorf("shim.json = %+v, want trial pid %d", rec, started.PID)
				}
				if _, err := os.Stat(filepath.Join(s.Dir, ExitFile)); err != nil {
					t.Errorf("exit.json: %v", err)
				}
			})
		}
	}
}

func TestStopTrappedTERM(t *testing.T) {
	t.Parallel()
	b := newBackend(t, Config{})
	s := shSpec(t, 1, `trap 'echo got TERM; exit 7' TERM; echo ready; while :; do sleep 0.05; done`)
	start(t, b, s)
	waitOutput(t, s.Dir, "ready")
	t0 := time.Now()
	if err := b.Stop(s.AttemptID, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(s.AttemptID, 30*time.Second); err != nil { // idempotent
		t.Fatal(err)
	}
	ev := expect(t, b, s.AttemptID, backend.Exited)
	if ev.ExitCode == nil || *ev.ExitCode != 7 {
		t.Fatalf("Exited = %+v, want exit code 7 from the trap", ev)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("stop took %s, want well under the grace", d)
	}
	if !strings.Contains(readOutput(t, s.Dir), "got TERM") {
		t.Errorf("output.log lacks the trap's output:\n%s", readOutput(t, s.Dir))
	}
	if err := b.Stop(s.AttemptID, time.Second); err != nil {
		t.Errorf("Stop after exit: %v", err)
	}
}

func TestStopIgnoredTERMKillsAfterGrace(t *testing.T) {
	t.Parallel()
	b := newBackend(t, Config{})
	s := shSpec(t, 1, `trap '' TERM; sleep 100 & echo $! > child; echo ready; wait`)
	start(t, b, s)
	waitOutput(t, s.Dir, "ready")
	child := readPIDFile(t, filepath.Join(s.Workdir, "child"))
	t0 := time.Now()
	if err := b.Stop(s.AttemptID, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, b, s.AttemptID, backend.Exited)
	if ev.Signal != "killed" {
		t.Fatalf("Exited = %+v, want signal killed", ev)
	}
	if d := time.Since(t0); d < 300*time.Millisecond {
		t.Errorf("killed after %s, before the grace", d)
	}
	waitFor(t, "the grandchild to die", func() bool { return processGone(child) })
}

// TestStopGraceRunsOnTheClock: the SIGKILL at the end of a Stop's grace is
// a timer on the backend's clock: advancing a fake clock past an hour's
// grace kills the trial at once, and the shim is told the kill time on the
// wall clock.
func TestStopGraceRunsOnTheClock(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	b := newBackend(t, Config{Clock: clk})
	s := shSpec(t, 1, `trap '' TERM; echo ready; while :; do sleep 0.05; done`)
	start(t, b, s)
	waitOutput(t, s.Dir, "ready")
	timers := clk.Waiters()
	if err := b.Stop(s.AttemptID, time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := clk.Waiters(); got != timers+1 {
		t.Fatalf("%d timers on the clock after Stop, want %d (the SIGKILL's)", got, timers+1)
	}
	killAt, ok := readStopFile(filepath.Join(s.Dir, StopFile))
	if d := time.Until(killAt); !ok || d < 59*time.Minute || d > time.Hour {
		t.Errorf("stop file says kill at %v (in %s), want an hour from now on the wall clock", killAt, d)
	}
	clk.Advance(time.Hour - time.Millisecond)
	select {
	case ev := <-b.Events():
		t.Fatalf("event %+v before the grace ended", ev)
	default:
	}
	clk.Advance(time.Millisecond)
	ev := expect(t, b, s.AttemptID, backend.Exited)
	if ev.Signal != "killed" {
		t.Fatalf("Exited = %+v, want signal killed", ev)
	}
}

func TestStopKillsProcessGroup(t *testing.T) {
	t.Parallel()
	b := newBackend(t, Config{})
	s := shSpec(t, 1, `sleep 100 & echo $! > child; echo ready; wait`)
	started := start(t, b, s)
	waitOutput(t, s.Dir, "ready")
	child := readPIDFile(t, filepath.Join(s.Workdir, "child"))
	if err := b.Stop(s.AttemptID, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, b, s.AttemptID, backend.Exited)
	if ev.Signal != "terminated" {
		t.Fatalf("Exited = %+v, want signal terminated", ev)
	}
	waitFor(t, "the grandchild to die", func() bool { return processGone(child) })
	if !processGone(started.PID) {
		t.Errorf("trial %d still runs", started.PID)
	}
}

func TestExitKillsLeftovers(t *testing.T) {
	t.Parallel()
	for _, mode := range shimModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			const drain = 300 * time.Millisecond
			b := newBackend(t, Config{WarmShims: mode.warm, ShimDrain: drain})
			// The background sleep keeps stdout open: the shim must not wait
			// for it beyond the drain.
			s := shSpec(t, 1, `sleep 100 & echo $! > child; exit 0`)
			start(t, b, s)
			t0 := time.Now()
			ev := expect(t, b, s.AttemptID, backend.Exited)
			if ev.ExitCode == nil || *ev.ExitCode != 0 {
				t.Fatalf("Exited = %+v, want exit code 0", ev)
			}
			if d := time.Since(t0); d > 5*time.Second {
				t.Errorf("Exited %s after the trial's end, want about the %s drain", d, drain)
			}
			child := readPIDFile(t, filepath.Join(s.Workdir, "child"))
			waitFor(t, "the leftover to die", func() bool { return processGone(child) })
			if out := readOutput(t, s.Dir); !strings.Contains(out, "killing what remains of its process group") {
				t.Errorf("output.log does not say the leftover was killed:\n%s", out)
			}
		})
	}
}

// After the trial's own process ends, the shim waits (up to its drain) for
// what remains of the trial's process group, however deep in the tree:
// here a grandchild orphaned by its parent. A descendant that left the
// group (setsid) is not waited for.
func TestExitWaitsForGroupNotLeavers(t *testing.T) {
	t.Parallel()
	for _, mode := range shimModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			b := newBackend(t, Config{WarmShims: mode.warm, ShimDrain: time.Minute})
			s := shSpec(t, 1, `setsid sleep 60 </dev/null >/dev/null 2>&1 & echo $! > away; sh -c '(sleep 0.5; echo saved > late) </dev/null >/dev/null 2>&1 &'; exit 0`)
			start(t, b, s)
			t0 := time.Now()
			ev := expect(t, b, s.AttemptID, backend.Exited)
			if ev.ExitCode == nil || *ev.ExitCode != 0 {
				t.Fatalf("Exited = %+v, want exit code 0", ev)
			}
			if _, err := os.Stat(filepath.Join(s.Workdir, "late")); err != nil {
				t.Errorf("Exited came before the group's last process ended: %v", err)
			}
			if d := time.Since(t0); d > 20*time.Second {
				t.Errorf("Exited %s after the start: the shim waited for the process that left the group", d)
			}
			away := readPIDFile(t, filepath.Join(s.Workdir, "away"))
			if processGone(away) {
				t.Errorf("the process that left the group (%d) was killed", away)
			}
			_ = unix.Kill(away, unix.SIGKILL)
		})
	}
}

// A wrapper (here sh) that ends at once on SIGTERM must not take down the
// process doing the work, which checkpoints on SIGTERM: the shim lets the
// group drain before it kills it, and reports the end after that.
func TestStopWrappedTrialCheckpoints(t *testing.T) {
	t.Parallel()
	for _, mode := range shimModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			b := newBackend(t, Config{WarmShims: mode.warm})
			s := shSpec(t, 1, `sh -c 'trap "sleep 0.5; echo saved > ckpt; exit 0" TERM; echo ready; while :; do sleep 0.05; done' & wait`)
			start(t, b, s)
			waitOutput(t, s.Dir, "ready")
			if err := b.Stop(s.AttemptID, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			ev := expect(t, b, s.AttemptID, backend.Exited)
			if _, err := os.Stat(filepath.Join(s.Workdir, "ckpt")); err != nil {
				t.Fatalf("Exited (%+v) came before the checkpoint: %v", ev, err)
			}
			if ev.Signal != "terminated" {
				t.Errorf("Exited = %+v, want the wrapper's own status, signal terminated", ev)
			}
		})
	}
}

// While the backend stops a trial, the rest of the group gets the whole stop
// grace, however short the shim's drain after a normal exit.
func TestStopGraceOutlastsDrain(t *testing.T) {
	t.Parallel()
	b := newBackend(t, Config{ShimDrain: 200 * time.Millisecond})
	s := shSpec(t, 1, `sh -c 'trap "sleep 1; echo saved > ckpt; exit 0" TERM; echo ready; while :; do sleep 0.05; done' & wait`)
	start(t, b, s)
	waitOutput(t, s.Dir, "ready")
	if err := b.Stop(s.AttemptID, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, b, s.AttemptID, backend.Exited)
	if _, err := os.Stat(filepath.Join(s.Workdir, "ckpt")); err != nil {
		t.Fatalf("the trainer was killed at the 200ms drain, before its checkpoint (Exited %+v): %v", ev, err)
	}
}

// The drain is bounded by the Stop's grace: what still runs then is killed.
func TestStopGraceBoundsDrain(t *testing.T) {
	t.Parallel()
	b := newBackend(t, Config{ShimDrain: time.Minute})
	s := shSpec(t, 1, `sh -c 'trap "" TERM; echo $$ > child; echo ready; while :; do sleep 0.05; done' & wait`)
	start(t, b, s)
	waitOutput(t, s.Dir, "ready")
	child := readPIDFile(t, filepath.Join(s.Workdir, "child"))
	t0 := time.Now()
	if err := b.Stop(s.AttemptID, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, b, s.AttemptID, backend.Exited)
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("Exited %s after Stop, want about the 300ms grace", d)
	}
	if ev.Signal != "terminated" {
		t.Errorf("Exited = %+v, want the wrapper's own status, signal terminated", ev)
	}
	waitFor(t, "the worker to die", func() bool { return processGone(child) })
}

func TestStopBeforePIDKnown(t *testing.T) {
	t.Parallel()
	b := newBackend(t, Config{})
	s := shSpec(t, 1, `exec sleep 100`)
	if err := b.Start(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(s.AttemptID, 0); err != nil {
		t.Fatal(err)
	}
	expect(t, b, s.AttemptID, backend.Started)
	ev := expect(t, b, s.AttemptID, backend.Exited)
	if ev.Signal != "killed" {
		t.Fatalf("Exited = %+v, want signal killed", ev)
	}
}

func TestOutputAndEnvironment(t *testing.T) {
	t.Parallel()
	for _, mode := range shimModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			testOutputAndEnvironment(t, Config{WarmShims: mode.warm})
		})
	}
}

func testOutputAndEnvironment(t *testing.T, cfg Config) {
	b := newBackend(t, cfg)
	s := shSpec(t, 1, `echo out; echo err >&2; echo "trial=$VIRGA_TRIAL_ID pwd=$(pwd) shimtoken=${VIRGA_SHIM_TOKEN:-none}"; read x && echo "stdin=$x"; printf 'no newline'`)
	// The shim leaves the trial's environment alone, whatever it holds.
	s.Env = map[string]string{"VIRGA_TRIAL_ID": "42", "VIRGA_SHIM_TOKEN": "the-trial's-own"}
	s.Token = "secret"
	s.ReportURL = "http://127.0.0.1:1/never"
	start(t, b, s)
	ev := expect(t, b, s.AttemptID, backend.Exited)
	if ev.ExitCode == nil || *ev.ExitCode != 0 {
		t.Fatalf("Exited = %+v, want exit code 0", ev)
	}
	out := readOutput(t, s.Dir)
	for _, want := range []string{"out\n", "err\n", "trial=42 pwd=" + s.Workdir + " shimtoken=the-trial's-own\n", "no newline"} {
		if !strings.Contains(out, want) {
			t.Errorf("output.log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "stdin=") {
		t.Errorf("the trial read from stdin, want /dev/null:\n%s", out)
	}
}

func TestDefaultWorkdir(t *testing.T) {
	t.Parallel()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range shimModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			b := newBackend(t, Config{WarmShims: mode.warm})
			s := shSpec(t, 1, `echo "pwd=$(pwd)"`)
			s.Workdir = ""
			start(t, b, s)
			expect(t, b, s.AttemptID, backend.Exited)
			if out := readOutput(t, s.Dir); !strings.Contains(out, "pwd="+wd+"\n") {
				t.Errorf("output.log = %q, want pwd=%s", out, wd)
			}
			s = shSpec(t, 2, `true`)
			s.Workdir = "relative"
			if err := b.Start(context.Background(), s); err == nil {
				t.Error("Start with a relative Workdir succeeded")
			}
		})
	}
}

func TestBadCommand(t *testing.T) {
	t.Parallel()
	b := newBackend(t, Config{})
	s := shSpec(t, 1, "")
	s.Argv = []string{"/nonexistent/trial"}
	if err := b.Start(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, b, s.AttemptID, backend.Exited)
	if ev.ExitCode == nil || *ev.ExitCode != 127 || !strings.Contains(ev.Message, "/nonexistent/trial") {
		t.Fatalf("Exited = %+v, want exit code 127 naming the command", ev)
	}
}

// reportServer records reports; the first fail503 requests get 503, bodies
// containing "bad" get 400.
type reportServer struct {
	mu      sync.Mutex
	fail503 int
	calls   int
	got     []string // bodies acknowledged, in order
	auth    []string
}

func (rs *reportServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.calls++
	rs.auth = append(rs.auth, r.Header.Get("Authorization"))
	switch {
	case rs.calls <= rs.fail503:
		http.Error(w, "busy", http.StatusServiceUnavailable)
	case strings.Contains(string(body), "bad"):
		http.Error(w, "metric name bad is not allowed", http.StatusBadRequest)
	default:
		rs.got = append(rs.got, string(body))
		w.Write([]byte(`{"decision":"continue"}`))
	}
}

func TestMetricRelay(t *testing.T) {
	t.Parallel()
	for _, mode := range shimModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			testMetricRelay(t, Config{WarmShims: mode.warm})
		})
	}
}

func testMetricRelay(t *testing.T, cfg Config) {
	rs := &reportServer{fail503: 2}
	srv := httptest.NewServer(rs)
	t.Cleanup(srv.Close)

	b := newBackend(t, cfg)
	s := shSpec(t, 1, `
echo 'VIRGA_METRIC {"step":1,"metrics":{"loss":0.5}}'
echo 'VIRGA_METRIC not json'
echo 'VIRGA_METRIC {"step":2,"metrics":{"bad":1}}'
echo 'VIRGA_METRIC {"step":3,"metrics":{"loss":0.25}}'
echo done`)
	s.ReportURL = srv.URL + "/api/v1/attempts/1/report"
	s.Token = "tok-1"
	start(t, b, s)
	ev := expect(t, b, s.AttemptID, backend.Exited)
	if ev.ExitCode == nil || *ev.ExitCode != 0 {
		t.Fatalf("Exited = %+v", ev)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	want := []string{`{"step":1,"metrics":{"loss":0.5}}`, `{"step":3,"metrics":{"loss":0.25}}`}
	if diff := cmp.Diff(want, rs.got); diff != "" {
		t.Errorf("acknowledged reports (-want,+got):\n%s", diff)
	}
	if rs.calls != 5 { // 2×503 + step 1, the 400, step 3
		t.Errorf("server saw %d requests, want 5", rs.calls)
	}
	for _, a := range rs.auth {
		if a != "Bearer tok-1" {
			t.Errorf("Authorization = %q, want Bearer tok-1", a)
		}
	}
	out := readOutput(t, s.Dir)
	for _, want := range []string{"ignoring VIRGA_METRIC line: malformed: invalid character", "400 Bad Request: metric name bad is not allowed", `VIRGA_METRIC {"step":1`, "done\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output.log lacks %q:\n%s", want, out)
		}
	}
}

// TestMetricLineLimits runs a trial whose VIRGA_METRIC lines break the
// limits a report to the API has: a line of virga.MaxMetricLine bytes is
// reported, a longer one is not and the trial's log says so with its size,
// and too many metrics or too long a name are refused with a note naming
// the limit, before anything is posted.
func TestMetricLineLimits(t *testing.T) {
	t.Parallel()
	rs := &reportServer{}
	srv := httptest.NewServer(rs)
	t.Cleanup(srv.Close)

	const prefix = "VIRGA_METRIC "
	fits := `{"step":1,"metrics":{"loss":2}`
	fits += strings.Repeat(" ", virga.MaxMetricLine-len(prefix)-len(fits)-1) + "}"
	over := `{"step":2,"metrics":{"loss":3}`
	over += strings.Repeat(" ", virga.MaxMetricLine-len(prefix)-len(over)) + "}"
	var many []string
	for i := range virga.MaxMetricsPerReport + 1 {
		many = append(many, fmt.Sprintf(`"m%d":1`, i))
	}
	long := strings.Repeat("n", virga.MaxMetricName+1)
	lines := []string{
		prefix + fits,
		prefix + over,
		prefix + `{"step":3,"metrics":{` + strings.Join(many, ",") + `}}`,
		prefix + `{"step":4,"metrics":{"` + long + `":1}}`,
		prefix + `{"step":5,"metrics":{"a\nb":1}}`,
		prefix + `{"step":6,"metrics":{"loss":1}}`,
	}
	file := filepath.Join(t.TempDir(), "out")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := newBackend(t, Config{WarmShims: -1})
	s := shSpec(t, 1, "cat "+file)
	s.ReportURL = srv.URL + "/api/v1/attempts/1/report"
	start(t, b, s)
	if ev := expect(t, b, s.AttemptID, backend.Exited); ev.ExitCode == nil || *ev.ExitCode != 0 {
		t.Fatalf("Exited = %+v", ev)
	}
	rs.mu.Lock()
	var steps []string
	for _, body := range rs.got {
		var m struct{ Step int64 }
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			t.Errorf("posted %q: %v", clip(body), err)
		}
		steps = append(steps, fmt.Sprint(m.Step))
	}
	rs.mu.Unlock()
	if diff := cmp.Diff([]string{"1", "6"}, steps); diff != "" {
		t.Errorf("steps posted (-want,+got):\n%s", diff)
	}
	out := readOutput(t, s.Dir)
	for _, want := range []string{
		fmt.Sprintf("virga shim: a VIRGA_METRIC line of %d bytes was not reported: such a line may be at most %d bytes", virga.MaxMetricLine+1, virga.MaxMetricLine),
		fmt.Sprintf("virga shim: ignoring VIRGA_METRIC line: metrics: %d values; a report may carry at most %d", virga.MaxMetricsPerReport+1, virga.MaxMetricsPerReport),
		fmt.Sprintf("is %d bytes long; at most %d are allowed", virga.MaxMetricName+1, virga.MaxMetricName),
		`holds the control character U+000A`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output.log lacks %q:\n%s", want, clip(out))
		}
	}
	if strings.Count(out, "was not reported") != 1 {
		t.Errorf("output.log notes %d lines as too long, want 1", strings.Count(out, "was not reported"))
	}
}

func TestCapacity(t *testing.T) {
	t.Parallel()
	capacity := virga.Resources{CPU: 2, MemoryMB: 1024}
	b := newBackend(t, Config{Capacity: capacity})
	var sizer backend.Sizer = b
	if diff := cmp.Diff(capacity, sizer.Capacity()); diff != "" {
		t.Errorf("Capacity (-want,+got):\n%s", diff)
	}
	need := virga.Resources{CPU: 1.5, MemoryMB: 512}
	first := shSpec(t, 1, `exec sleep 100`)
	first.Resources = need
	start(t, b, first)
	if diff := cmp.Diff(capacity.Sub(need), b.Free()); diff != "" {
		t.Errorf("Free (-want,+got):\n%s", diff)
	}
	second := shSpec(t, 2, `exit 0`)
	second.Resources = need
	err := b.Start(context.Background(), second)
	if !errors.Is(err, ErrNoCapacity) || !errors.Is(err, virga.ErrNoCapacity) {
		t.Fatalf("second Start: %v, want ErrNoCapacity", err)
	}
	if err := b.Stop(first.AttemptID, time.Second); err != nil {
		t.Fatal(err)
	}
	expect(t, b, first.AttemptID, backend.Exited)
	if diff := cmp.Diff(capacity, b.Free()); diff != "" {
		t.Errorf("Free after exit (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff(capacity, b.Capacity()); diff != "" {
		t.Errorf("Capacity while running (-want,+got):\n%s", diff)
	}
	start(t, b, second)
	expect(t, b, second.AttemptID, backend.Exited)
}

func TestCapacityDefaultsToMachine(t *testing.T) {
	t.Parallel()
	b := newBackend(t, Config{})
	c := b.Capacity()
	if c.CPU < 1 || c.MemoryMB <= 0 || c != b.Free() {
		t.Errorf("Capacity = %+v (Free %+v), want this machine's CPUs and memory", c, b.Free())
	}
}

func TestStartTwice(t *testing.T) {
	t.Parallel()
	b := newBackend(t, Config{})
	s := shSpec(t, 1, `exec sleep 100`)
	start(t, b, s)
	if err := b.Start(context.Background(), s); !errors.Is(err, virga.ErrConflict) {
		t.Errorf("Start of a running attempt: %v, want ErrConflict", err)
	}
	b.Stop(s.AttemptID, 0)
	expect(t, b, s.AttemptID, backend.Exited)
	if err := b.Start(context.Background(), s); !errors.Is(err, virga.ErrConflict) {
		t.Errorf("Start of a finished attempt: %v, want ErrConflict", err)
	}
}

func TestShimSurvivesSignalsAndItsDeathKillsTrial(t *testing.T) {
	t.Parallel()
	b := newBackend(t, Config{})
	s := shSpec(t, 1, `echo ready; exec sleep 100`)
	started := start(t, b, s)
	waitOutput(t, s.Dir, "ready")
	rec, err := readShimRecord(s.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range []unix.Signal{unix.SIGTERM, unix.SIGINT, unix.SIGHUP} {
		if err := unix.Kill(rec.ShimPID, sig); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if processGone(rec.ShimPID) || processGone(started.PID) {
		t.Fatal("the shim or the trial died of SIGTERM/SIGINT/SIGHUP sent to the shim")
	}
	if err := unix.Kill(rec.ShimPID, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, b, s.AttemptID, backend.Exited)
	if !ev.Lost {
		t.Fatalf("Exited = %+v, want Lost", ev)
	}
	waitFor(t, "the trial to die with its shim", func() bool { return processGone(started.PID) })
}

// A shim killed outright leaves no exit.json; the backend kills what is left
// of the trial's process group (Pdeathsig only took the trial's own process).
func TestShimDeathKillsTrialGroup(t *testing.T) {
	t.Parallel()
	for _, mode := range shimModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			b := newBackend(t, Config{WarmShims: mode.warm})
			s := shSpec(t, 1, `sleep 100 & echo $! > child; echo ready; wait`)
			start(t, b, s)
			waitOutput(t, s.Dir, "ready")
			child := readPIDFile(t, filepath.Join(s.Workdir, "child"))
			t.Cleanup(func() { unix.Kill(child, unix.SIGKILL) })
			rec, err := readShimRecord(s.Dir)
			if err != nil {
				t.Fatal(err)
			}
			if rec.TrialStart == 0 || rec.TrialSession == 0 {
				t.Errorf("shim.json = %+v, want the trial's start time and session", rec)
			}
			if err := unix.Kill(rec.ShimPID, unix.SIGKILL); err != nil {
				t.Fatal(err)
			}
			ev := expect(t, b, s.AttemptID, backend.Exited)
			if !ev.Lost {
				t.Fatalf("Exited = %+v, want Lost", ev)
			}
			waitFor(t, "the grandchild to die", func() bool { return processGone(child) })
		})
	}
}

func TestCloseClosesEvents(t *testing.T) {
	t.Parallel()
	b := newBackend(t, Config{})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-b.Events(); ok {
		t.Error("event after Close")
	}
	if err := b.Start(context.Background(), shSpec(t, 1, "exit 0")); err == nil {
		t.Error("Start after Close succeeded")
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestExitJSON(t *testing.T) {
	t.Parallel()
	b := newBackend(t, Config{})
	s := shSpec(t, 1, "exit 4")
	start(t, b, s)
	expect(t, b, s.AttemptID, backend.Exited)
	data, err := os.ReadFile(filepath.Join(s.Dir, ExitFile))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if m["exit_code"] != 4.0 || m["ended_at"] == nil {
		t.Errorf("exit.json = %s", data)
	}
}
