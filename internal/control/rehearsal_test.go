package control_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/backend/local"
	"github.com/virga-ml/virga/internal/control"
	"github.com/virga-ml/virga/internal/store"
)

// toggles is an Availability that starts up and flips at each of its times.
type toggles []time.Time

var _ backend.Availability = toggles(nil)

func (s toggles) Up(t time.Time) (bool, time.Time) {
	up := true
	for _, x := range s {
		if t.Before(x) {
			return up, x
		}
		up = !up
	}
	return up, time.Time{}
}

// reportHandler serves the report route of the API for trials, straight to
// the controller.
func reportHandler(ctl *control.Controller) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/attempts/{id}/report", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
		var rep wire.Report
		if err == nil {
			err = json.NewDecoder(r.Body).Decode(&rep)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		d, err := ctl.Report(r.Context(), id, rep)
		switch {
		case errors.Is(err, control.ErrSuperseded):
			http.Error(w, err.Error(), http.StatusConflict)
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		default:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"decision":%q}`, d.String())
		}
	})
	return mux
}

// serve runs a controller over h's store and the local backend with pools,
// trials being this test binary (trialMain); stop ends it as a crash would
// (trials run on), and is idempotent.
func serve(t *testing.T, h *harness, pools []local.Pool) (stop func()) {
	t.Helper()
	be, err := local.New(local.Config{Pools: pools, ShimCommand: shimCommand(), PollInterval: 20 * time.Millisecond, WarmShims: -1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(nil)
	ctl, err := control.New(control.Config{Store: h.st, Backend: be, Checkpoints: h.ck, DataDir: h.dir,
		ReportBase: "http://" + srv.Listener.Addr().String(), Secret: []byte("test secret"), TickInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = reportHandler(ctl)
	srv.Start()
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- ctl.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		srv.CloseClientConnections()
		srv.Close()
		cancel()
		if err := <-runErr; err != nil {
			t.Errorf("Run: %v", err)
		}
		be.Close()
	}
	t.Cleanup(stop)
	select {
	case <-ctl.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("controller not ready")
	}
	h.ctl = ctl
	return stop
}

// waitEnd waits for an experiment to end and returns it: its trials are
// real processes, so it waits for the loop's updates, not on passes.
func waitEnd(t *testing.T, h *harness, id int64) *virga.Experiment {
	t.Helper()
	ups, cancel := h.ctl.Subscribe(id)
	defer cancel()
	timeout := time.After(30 * time.Second)
	for {
		if e := h.exp(id); e.State.Terminal() {
			return e
		}
		select {
		case <-ups:
		case <-timeout:
			t.Fatalf("the experiment did not end within 30s: %+v", h.trials(id))
		}
	}
}

// rehearse runs yaml to its end on a server with pools.
func rehearse(t *testing.T, pools []local.Pool, yaml string) (*harness, *virga.Experiment) {
	t.Helper()
	h := newHarness(t)
	serve(t, h, pools)
	e, err := h.ctl.Submit(context.Background(), "exp.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return h, waitEnd(t, h, e.ID)
}

// rehearsalYAML is an experiment of one trial (trialMain) of steps steps.
func rehearsalYAML(out string, steps int) string {
	return fmt.Sprintf(`name: rehearsal
entrypoint:
  command: [%q]
  env: {%s: "1", TRIAL_OUT: %q, TRIAL_STEPS: "%d", TRIAL_IGNORE_TERM: "1", GORACE: "atexit_sleep_ms=0"}
hyperparameters:
  x: {type: float, min: 0, max: 1}
searcher: random
objective: {metric: loss, direction: minimize}
max_trials: 1
max_restarts: 0
resources: {cpu: 1}
`, os.Args[0], trialEnv, out, steps)
}

// readRecord reads what trialMain recorded in out under name.
func readRecord(t *testing.T, out, name string) (string, bool) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(out, name))
	if errors.Is(err, os.ErrNotExist) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(data), true
}

// TestRehearsedPreemption rehearses a spot reclaim on one machine with real
// processes: a trial on an emulated spot pool gets SIGTERM at the reclaim's
// warning, writes its checkpoint and reports it, runs on regardless and is
// SIGKILLed at the reclaim; its attempt is PREEMPTED on the spot pool, and
// the trial resumes from that checkpoint, on the on-demand pool or on the
// spot pool once it is back, and completes without a restart counted.
func TestRehearsedPreemption(t *testing.T) {
	t.Parallel()
	const warning = 1500 * time.Millisecond
	one := virga.Resources{CPU: 1}
	tests := []struct {
		name string
		// pools are the backend's, given the reclaim's time; spot first.
		pools func(reclaim time.Time) []local.Pool
		// wantPool is where the trial resumes; back is how long after the
		// reclaim the spot pool is up again (0: never).
		wantPool string
		back     time.Duration
	}{
		{"resumes on another pool", func(reclaim time.Time) []local.Pool {
			return []local.Pool{
				{Name: "spot", Capacity: one, Availability: toggles{reclaim}, Warning: warning},
				{Name: "ondemand", Capacity: one},
			}
		}, "ondemand", 0},
		{"resumes when the pool is back", func(reclaim time.Time) []local.Pool {
			return []local.Pool{{Name: "spot", Capacity: one, Availability: toggles{reclaim, reclaim.Add(time.Second)}, Warning: warning}}
		}, "spot", time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := t.TempDir()
			reclaim := time.Now().Add(3 * time.Second)
			h, e := rehearse(t, tc.pools(reclaim), rehearsalYAML(out, 60))
			checkRehearsal(t, h, e, out, reclaim, warning, tc.wantPool, tc.back)
		})
	}
}

// checkRehearsal checks the end of a rehearsed preemption (see
// TestRehearsedPreemption): the trial resumed on wantPool, back after the
// reclaim if back > 0.
func checkRehearsal(t *testing.T, h *harness, e *virga.Experiment, out string, reclaim time.Time, warning time.Duration, wantPool string, back time.Duration) {
	t.Helper()
	trials := h.trials(e.ID)
	if e.State != virga.ExperimentCompleted || len(trials) != 1 {
		t.Fatalf("experiment %s with %d trials, want COMPLETED with 1", e.State, len(trials))
	}
	tr := trials[0]
	as := h.attempts(tr.ID)
	if len(as) < 1 {
		t.Fatal("no attempts")
	}
	first, ok := readRecord(t, out, "attempt-"+strconv.FormatInt(as[0].ID, 10))
	if !ok && as[0].Outcome == virga.OutcomePreempted && (as[0].StartedAt.IsZero() || as[0].StartedAt.After(reclaim.Add(-warning))) {
		t.Skipf("the first attempt started %v before the reclaim, inside its warning, and never ran the trial: the machine is too slow for this test", reclaim.Sub(as[0].StartedAt))
	}
	if !ok {
		t.Fatal("the first attempt never ran the trial")
	}
	term, warned := readRecord(t, out, "term-"+strconv.FormatInt(as[0].ID, 10))
	if !warned && as[0].Outcome == virga.OutcomePreempted {
		t.Skip("the trial was not ready for the warning; the machine is too slow for this test")
	}
	if first != "0" || !warned || tr.State != virga.TrialCompleted || tr.Restarts != 0 || len(as) != 2 {
		t.Fatalf("trial %s with %d restarts, %d attempts (first from step %s, warned %v); want COMPLETED, 0 restarts, 2 attempts, SIGTERM to the first",
			tr.State, tr.Restarts, len(as), first, warned)
	}

	// 1. SIGTERM at the warning; SIGKILL at the reclaim.
	var termStep, termNS int64
	if _, err := fmt.Sscan(term, &termStep, &termNS); err != nil {
		t.Fatalf("term record %q: %v", term, err)
	}
	if termAt := time.Unix(0, termNS); termAt.Before(reclaim.Add(-warning)) || !termAt.Before(reclaim) {
		t.Errorf("SIGTERM at reclaim%+v, want within the %s warning", termAt.Sub(reclaim), warning)
	}
	a1, a2 := as[0], as[1]
	if a1.Outcome != virga.OutcomePreempted || a1.Pool != "spot" || a1.Signal != "killed" || a1.EndedAt.Before(reclaim) {
		t.Errorf("first attempt: outcome %s, pool %q, signal %q, ended at reclaim%+v; want PREEMPTED on spot, killed at the reclaim",
			a1.Outcome, a1.Pool, a1.Signal, a1.EndedAt.Sub(reclaim))
	}

	// 2. Resumed from the checkpoint written at the SIGTERM.
	second, _ := readRecord(t, out, "attempt-"+strconv.FormatInt(a2.ID, 10))
	if a2.Restored == "" || second != strconv.FormatInt(termStep, 10) {
		t.Errorf("second attempt restored %q and started from step %q, want the checkpoint of step %d", a2.Restored, second, termStep)
	}
	if a2.Outcome != virga.OutcomeSucceeded || a2.Pool != wantPool {
		t.Errorf("second attempt: outcome %s on pool %q, want SUCCEEDED on %s", a2.Outcome, a2.Pool, wantPool)
	}
	if back > 0 && a2.StartedAt.Before(reclaim.Add(back)) {
		t.Errorf("second attempt started at reclaim%+v, before the pool was back", a2.StartedAt.Sub(reclaim))
	}
	if tr.Step != 60 {
		t.Errorf("trial at step %d, want 60", tr.Step)
	}

	// 3. The trial's history says which pool reclaimed it.
	evs, err := h.st.Events(context.Background(), store.EventFilter{TrialID: tr.ID})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range evs {
		found = found || ev.Kind == virga.EventTrialPreempted && strings.Contains(ev.Message, "pool spot reclaimed its capacity")
	}
	if !found {
		t.Errorf("no trial.preempted event naming pool spot in %+v", evs)
	}
}

// TestRehearsedPreemptionAcrossRestart: the server stops (as in a crash)
// after the trial got its SIGTERM and saved its checkpoint; the next server
// adopts the attempt, kills it at the reclaim and records it PREEMPTED, and
// the trial resumes from that checkpoint on the on-demand pool.
func TestRehearsedPreemptionAcrossRestart(t *testing.T) {
	t.Parallel()
	const warning = 1500 * time.Millisecond
	one := virga.Resources{CPU: 1}
	out := t.TempDir()
	reclaim := time.Now().Add(3 * time.Second)
	pools := []local.Pool{
		{Name: "spot", Capacity: one, Availability: toggles{reclaim}, Warning: warning},
		{Name: "ondemand", Capacity: one},
	}
	h := newHarness(t)
	stop := serve(t, h, pools)
	e, err := h.ctl.Submit(context.Background(), "exp.yaml", []byte(rehearsalYAML(out, 60)))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m, _ := filepath.Glob(filepath.Join(out, "term-*")); len(m) > 0 {
			break
		}
		if time.Now().After(deadline) || !time.Now().Before(reclaim) {
			t.Skip("the trial got no SIGTERM before the reclaim; the machine is too slow for this test")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()

	serve(t, h, pools)
	e = waitEnd(t, h, e.ID)
	checkRehearsal(t, h, e, out, reclaim, warning, "ondemand", 0)
	evs, err := h.st.Events(context.Background(), store.EventFilter{ExperimentID: e.ID})
	if err != nil {
		t.Fatal(err)
	}
	adopted := false
	for _, ev := range evs {
		adopted = adopted || ev.Kind == virga.EventAttemptAdopted
	}
	if !adopted {
		t.Error("no attempt.adopted event: the second server did not adopt the attempt")
	}
}
