package control_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/control"
)

func TestMaxConcurrentRespected(t *testing.T) {
	h := newHarness(t)
	h.start(newFakeBackend())
	e := h.submit(expYAML("conc", "max_trials: 5\nmax_concurrent: 2"))
	live := map[int64]*backend.StartSpec{}
	done := 0
	for done < 5 {
		// Wait for every start the loop wants, then check the bound.
		for len(live) < 2 && len(live)+done < 5 {
			s := h.nextStart()
			live[s.AttemptID] = s
			h.started(s)
		}
		h.noStart()
		if len(live) > 2 {
			t.Fatalf("%d attempts live, max_concurrent is 2", len(live))
		}
		for id := range live {
			h.succeeded(id)
			delete(live, id)
			done++
			break
		}
	}
	h.waitExp(e.ID, virga.ExperimentCompleted)
	ts := h.trials(e.ID)
	if len(ts) != 5 {
		t.Fatalf("%d trials, want 5", len(ts))
	}
	for _, tr := range ts {
		if tr.State != virga.TrialCompleted || tr.Attempts != 1 {
			t.Errorf("trial %d: state %s attempts %d, want COMPLETED after 1", tr.ID, tr.State, tr.Attempts)
		}
	}
}

func TestFailedAttemptRestartsThenFails(t *testing.T) {
	h := newHarness(t)
	h.start(newFakeBackend())
	e := h.submit(expYAML("fail", "max_trials: 1\nmax_restarts: 2"))
	var trialID int64
	for i := 1; i <= 3; i++ {
		s := h.nextStart()
		trialID = s.TrialID
		h.started(s)
		h.exited(s.AttemptID, 3)
	}
	tr := h.waitTrial(trialID, virga.TrialFailed)
	if tr.Attempts != 3 || tr.Restarts != 2 {
		t.Errorf("attempts %d restarts %d, want 3 and 2", tr.Attempts, tr.Restarts)
	}
	h.noStart()
	for _, a := range h.attempts(trialID) {
		if a.Outcome != virga.OutcomeFailed || a.ExitCode == nil || *a.ExitCode != 3 {
			t.Errorf("attempt %d: outcome %s exit %v, want FAILED with code 3", a.Number, a.Outcome, a.ExitCode)
		}
	}
	// Its only trial failed: the experiment has no result and fails.
	if got := h.waitExp(e.ID, virga.ExperimentFailed); got.Reason != virga.ReasonAllTrialsFailed {
		t.Errorf("experiment FAILED with reason %q (%s), want %q", got.Reason, got.Message, virga.ReasonAllTrialsFailed)
	}
}

// TestEndStateByResult: a search that ends is COMPLETED only when some trial
// reported the objective; with every trial failed, or none reporting, it is
// FAILED with a reason that says which.
func TestEndStateByResult(t *testing.T) {
	for _, tc := range []struct {
		name string
		// codes are the exit codes of the three trials; report, whether the
		// second reports the objective before it exits.
		codes  [3]int
		report bool
		// wantState and wantReason are the experiment's end; wantMsg a part of its message.
		wantState  virga.ExperimentState
		wantReason virga.ExperimentReason
		wantMsg    string
	}{
		{"all failed", [3]int{127, 127, 127}, false, virga.ExperimentFailed, virga.ReasonAllTrialsFailed, "all 3 trials failed"},
		{"none reported", [3]int{0, 0, 0}, false, virga.ExperimentFailed, virga.ReasonNoObjective, `no trial reported the objective metric "loss"`},
		{"some failed, none reported", [3]int{0, 1, 0}, false, virga.ExperimentFailed, virga.ReasonNoObjective, "1 of 3 trials failed"},
		{"one reported", [3]int{1, 0, 1}, true, virga.ExperimentCompleted, virga.ReasonSearchFinished, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.start(newFakeBackend())
			e := h.submit(expYAML("end", "max_trials: 3\nmax_restarts: 0"))
			for i, code := range tc.codes {
				s := h.nextStart()
				h.started(s)
				if i == 1 && tc.report {
					h.report(s.AttemptID, 1, 0.5)
				}
				h.exited(s.AttemptID, code)
				h.waitTrial(s.TrialID, map[bool]virga.TrialState{true: virga.TrialCompleted, false: virga.TrialFailed}[code == 0])
			}
			got := h.waitExp(e.ID, tc.wantState)
			if got.Reason != tc.wantReason || !strings.Contains(got.Message, tc.wantMsg) {
				t.Errorf("experiment %s: reason %q message %q; want reason %q and a message with %q",
					got.State, got.Reason, got.Message, tc.wantReason, tc.wantMsg)
			}
		})
	}
}

func TestLostAttemptRestartsWithoutCounting(t *testing.T) {
	h := newHarness(t)
	h.start(newFakeBackend())
	e := h.submit(expYAML("lost", "max_trials: 1\nmax_restarts: 0"))
	s := h.nextStart()
	h.started(s)
	h.lost(s.AttemptID)
	s2 := h.nextStart()
	if s2.TrialID != s.TrialID {
		t.Fatalf("restart of trial %d, want %d", s2.TrialID, s.TrialID)
	}
	if tr := h.trial(s.TrialID); tr.Restarts != 0 {
		t.Errorf("restarts %d after a lost attempt, want 0", tr.Restarts)
	}
	h.started(s2)
	h.succeeded(s2.AttemptID)
	tr := h.waitTrial(s.TrialID, virga.TrialCompleted)
	if tr.Attempts != 2 || tr.Restarts != 0 {
		t.Errorf("attempts %d restarts %d, want 2 and 0", tr.Attempts, tr.Restarts)
	}
	as := h.attempts(s.TrialID)
	if as[0].Outcome != virga.OutcomeLost || as[1].Outcome != virga.OutcomeSucceeded {
		t.Errorf("outcomes %s, %s; want LOST, SUCCEEDED", as[0].Outcome, as[1].Outcome)
	}
	h.waitExp(e.ID, virga.ExperimentCompleted)
}

// writeCkpt replaces the content of a trial's checkpoint directory.
func writeCkpt(t *testing.T, s *backend.StartSpec, content string) {
	t.Helper()
	dir := s.Env["VIRGA_CHECKPOINT_DIR"]
	if err := os.WriteFile(filepath.Join(dir, "state"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRestartRestoresLatestCheckpoint(t *testing.T) {
	h := newHarness(t)
	h.start(newFakeBackend())
	h.submit(expYAML("ckpt", "max_trials: 1\nmax_restarts: 1"))
	s := h.nextStart()
	if got := s.Env["VIRGA_CHECKPOINT_DIR"]; got == "" {
		t.Fatal("no VIRGA_CHECKPOINT_DIR")
	}
	h.started(s)
	writeCkpt(t, s, "one")
	h.report(s.AttemptID, 1, 0.5)
	writeCkpt(t, s, "two")
	h.report(s.AttemptID, 2, 0.4)
	tr := h.trial(s.TrialID)
	if tr.Checkpoint == "" {
		t.Fatal("no checkpoint recorded after a report with a changed directory")
	}
	cks, _ := h.st.Checkpoints(context.Background(), s.TrialID)
	if len(cks) != 2 || cks[1].ID != tr.Checkpoint || cks[1].Step != 2 {
		t.Fatalf("checkpoints %+v, want 2 with the latest %s at step 2", cks, tr.Checkpoint)
	}
	// The trial writes more after its last report, then crashes.
	writeCkpt(t, s, "three (never reported)")
	h.exited(s.AttemptID, 1)
	s2 := h.nextStart()
	as := h.attempts(s.TrialID)
	if len(as) != 2 || as[1].Restored != tr.Checkpoint {
		t.Fatalf("second attempt restored %q, want the latest checkpoint %q", as[len(as)-1].Restored, tr.Checkpoint)
	}
	b, err := os.ReadFile(filepath.Join(s2.Env["VIRGA_CHECKPOINT_DIR"], "state"))
	if err != nil || string(b) != "two" {
		t.Fatalf("checkpoint directory holds %q (%v) at restart, want %q", b, err, "two")
	}
	// An unchanged directory makes no new checkpoint.
	h.started(s2)
	h.report(s2.AttemptID, 3, 0.3)
	if cks2, _ := h.st.Checkpoints(context.Background(), s.TrialID); len(cks2) != 2 {
		t.Errorf("%d checkpoints after a report with the restored directory unchanged, want 2", len(cks2))
	}
}

func TestCheckpointRetentionKeepsKeepLast(t *testing.T) {
	h := newHarness(t)
	h.start(newFakeBackend())
	h.submit(expYAML("keep", "max_trials: 1\ncheckpoints: {keep_last: 2}"))
	s := h.nextStart()
	h.started(s)
	var ids []string
	for i := range 5 {
		writeCkpt(t, s, fmt.Sprint("content ", i))
		h.report(s.AttemptID, int64(i), float64(5-i)) // each step the best so far
		ids = append(ids, h.trial(s.TrialID).Checkpoint)
	}
	cks, err := h.st.Checkpoints(context.Background(), s.TrialID)
	if err != nil {
		t.Fatal(err)
	}
	if len(cks) != 2 || cks[0].ID != ids[3] || cks[1].ID != ids[4] {
		t.Fatalf("retained %+v, want the last two %v", cks, ids[3:])
	}
	for i, id := range ids {
		if want := i >= 3; h.ck.Exists(id) != want {
			t.Errorf("checkpoint %d (%s) exists=%v, want %v", i, id[:8], !want, want)
		}
	}
}

// TestCheckpointRetentionKeepsBest: beyond keep_last, the checkpoint of the
// trial's best step is kept too.
func TestCheckpointRetentionKeepsBest(t *testing.T) {
	h := newHarness(t)
	h.start(newFakeBackend())
	h.submit(expYAML("keepbest", "max_trials: 1\ncheckpoints: {keep_last: 2}"))
	s := h.nextStart()
	h.started(s)
	var ids []string
	for i, loss := range []float64{3, 1, 2, 4, 5, 6} { // best at step 1
		writeCkpt(t, s, fmt.Sprint("content ", i))
		h.report(s.AttemptID, int64(i), loss)
		ids = append(ids, h.trial(s.TrialID).Checkpoint)
	}
	cks, err := h.st.Checkpoints(context.Background(), s.TrialID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ck := range cks {
		got = append(got, ck.ID)
	}
	want := []string{ids[1], ids[4], ids[5]}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("retained %v, want the best step's and the last two %v", got, want)
	}
	for i, id := range ids {
		if keep := i == 1 || i >= 4; h.ck.Exists(id) != keep {
			t.Errorf("checkpoint of step %d exists=%v, want %v", i, !keep, keep)
		}
	}
}

// TestTickerRunsOnTheClock: without Step, the loop's own ticker, on the
// injected clock, finds a timeout once the clock has passed it.
func TestTickerRunsOnTheClock(t *testing.T) {
	h := newHarness(t)
	h.ticks = true
	h.tick = time.Hour // a real ticker would not tick during the test
	h.start(newFakeBackend())
	h.submit(expYAML("ticker", "max_trials: 1\ntimeout: 50ms"))
	s := h.nextStart()
	h.started(s)
	h.step()
	h.clk.Advance(time.Hour) // one tick
	select {
	case id := <-h.be.stopCh:
		if id != s.AttemptID {
			t.Fatalf("attempt %d stopped, want %d", id, s.AttemptID)
		}
	case <-time.After(waitFor):
		t.Fatal("the tick did not stop the timed-out attempt")
	}
}

func TestTimeoutStopsAttempt(t *testing.T) {
	h := newHarness(t)
	h.start(newFakeBackend())
	e := h.submit(expYAML("timeout", "max_trials: 1\nmax_restarts: 0\ntimeout: 50ms"))
	s := h.nextStart()
	h.started(s)
	h.advance(50 * time.Millisecond)
	if h.be.stopped(s.AttemptID) {
		t.Fatal("attempt stopped before it ran past its timeout")
	}
	h.advance(time.Millisecond)
	h.eventually("the timed-out attempt to be stopped", func() bool { return h.be.stopped(s.AttemptID) })
	if d, err := h.ctl.Report(context.Background(), s.AttemptID, wire.Report{Step: 1, Metrics: map[string]float64{"loss": 1}}); err != nil || d.String() != "stop" {
		t.Errorf("report while timing out: %v, %v; want stop", d, err)
	}
	h.signalled(s.AttemptID, "terminated")
	tr := h.waitTrial(s.TrialID, virga.TrialFailed)
	if as := h.attempts(s.TrialID); as[0].Outcome != virga.OutcomeTimeout {
		t.Errorf("outcome %s, want TIMEOUT", as[0].Outcome)
	}
	t.Logf("trial message: %s", tr.Message)
	if got := h.waitExp(e.ID, virga.ExperimentFailed); got.Reason != virga.ReasonAllTrialsFailed {
		t.Errorf("experiment reason %q, want %q", got.Reason, virga.ReasonAllTrialsFailed)
	}
}

func TestStopWhileRunning(t *testing.T) {
	h := newHarness(t)
	h.start(newFakeBackend())
	e := h.submit(expYAML("stoprun", "max_trials: 3\nmax_concurrent: 1"))
	s := h.nextStart()
	h.started(s)
	got, err := h.ctl.Control(context.Background(), e.ID, wire.OpStop)
	if err != nil || got.State != virga.ExperimentStopping {
		t.Fatalf("stop: %v, %v; want STOPPING", got, err)
	}
	h.eventually("Stop of the running attempt", func() bool { return h.be.stopped(s.AttemptID) })
	if d := h.report(s.AttemptID, 1, 1); d != "stop" {
		t.Errorf("report while stopping: %s, want stop", d)
	}
	h.signalled(s.AttemptID, "terminated")
	tr := h.waitTrial(s.TrialID, virga.TrialStopped)
	if as := h.attempts(s.TrialID); as[0].Outcome != virga.OutcomeStopped {
		t.Errorf("outcome %s, want STOPPED", as[0].Outcome)
	}
	if tr.Attempts != 1 {
		t.Errorf("attempts %d, want 1", tr.Attempts)
	}
	h.waitExp(e.ID, virga.ExperimentStopped)
	h.noStart()
	if n := len(h.trials(e.ID)); n != 1 {
		t.Errorf("%d trials after stop, want 1", n)
	}
	if _, err := h.ctl.Control(context.Background(), e.ID, wire.OpStop); !errors.Is(err, virga.ErrConflict) {
		t.Errorf("stop of a stopped experiment: %v, want ErrConflict", err)
	}
}

func TestStopWhileQueued(t *testing.T) {
	h := newHarness(t)
	h.start(newFakeBackend())
	e := h.submit(expYAML("stopq", "max_trials: 3\nmax_concurrent: 1\nmax_restarts: 3"))
	s := h.nextStart()
	h.started(s)
	// No room any more: the failed trial waits queued for its restart.
	h.be.setFull(true)
	h.exited(s.AttemptID, 1)
	h.waitTrial(s.TrialID, virga.TrialQueued)
	h.noStart()
	if _, err := h.ctl.Control(context.Background(), e.ID, wire.OpStop); err != nil {
		t.Fatal(err)
	}
	tr := h.waitTrial(s.TrialID, virga.TrialStopped)
	if tr.Attempts != 1 {
		t.Errorf("attempts %d, want 1", tr.Attempts)
	}
	h.waitExp(e.ID, virga.ExperimentStopped)
}

func TestPauseResume(t *testing.T) {
	h := newHarness(t)
	h.start(newFakeBackend())
	e := h.submit(expYAML("pause", "max_trials: 1"))
	s := h.nextStart()
	h.started(s)
	writeCkpt(t, s, "before pause")
	h.report(s.AttemptID, 1, 0.9)
	got, err := h.ctl.Control(context.Background(), e.ID, wire.OpPause)
	if err != nil || got.State != virga.ExperimentPaused {
		t.Fatalf("pause: %v, %v", got, err)
	}
	h.eventually("Stop of the paused attempt", func() bool { return h.be.stopped(s.AttemptID) })
	if _, err := h.ctl.Control(context.Background(), e.ID, wire.OpPause); !errors.Is(err, virga.ErrConflict) {
		t.Errorf("second pause: %v, want ErrConflict", err)
	}
	h.signalled(s.AttemptID, "terminated")
	tr := h.waitTrial(s.TrialID, virga.TrialPaused)
	h.noStart()
	if e2 := h.exp(e.ID); e2.State != virga.ExperimentPaused {
		t.Errorf("experiment %s while its trial is paused, want PAUSED", e2.State)
	}
	if _, err := h.ctl.Control(context.Background(), e.ID, wire.OpResume); err != nil {
		t.Fatal(err)
	}
	s2 := h.nextStart()
	if s2.TrialID != s.TrialID {
		t.Fatalf("resumed trial %d, want %d", s2.TrialID, s.TrialID)
	}
	as := h.attempts(s.TrialID)
	if len(as) != 2 || as[1].Restored != tr.Checkpoint || tr.Checkpoint == "" {
		t.Errorf("resumed attempt restored %q, want %q", as[len(as)-1].Restored, tr.Checkpoint)
	}
	if h.trial(s.TrialID).Restarts != 0 {
		t.Error("a pause counted as a restart")
	}
	h.started(s2)
	h.exited(s2.AttemptID, 0)
	h.waitTrial(s.TrialID, virga.TrialCompleted)
	h.waitExp(e.ID, virga.ExperimentCompleted)
}

// TestResumeBeforePausedAttemptExits resumes an experiment while its paused
// attempt is still shutting down. The trial must run again and the experiment
// must be able to complete.
func TestResumeBeforePausedAttemptExits(t *testing.T) {
	h := newHarness(t)
	h.start(newFakeBackend())
	e := h.submit(expYAML("pauseresume", "max_trials: 1"))
	s := h.nextStart()
	h.started(s)
	if _, err := h.ctl.Control(context.Background(), e.ID, wire.OpPause); err != nil {
		t.Fatal(err)
	}
	if _, err := h.ctl.Control(context.Background(), e.ID, wire.OpResume); err != nil {
		t.Fatal(err)
	}
	h.signalled(s.AttemptID, "terminated") // the pause's SIGTERM lands now
	select {
	case s2 := <-h.be.starts:
		h.started(s2)
		h.succeeded(s2.AttemptID)
		h.waitExp(e.ID, virga.ExperimentCompleted)
	case <-time.After(time.Second):
		tr := h.trial(s.TrialID)
		t.Fatalf("after resume, the trial is %s (%q) with no attempt, and experiment %s can never finish",
			tr.State, tr.Message, h.exp(e.ID).State)
	}
}

func TestReportToSupersededAttempt(t *testing.T) {
	h := newHarness(t)
	h.start(newFakeBackend())
	h.submit(expYAML("superseded", "max_trials: 1\nmax_restarts: 1"))
	s := h.nextStart()
	h.started(s)
	h.report(s.AttemptID, 0, 1)
	h.exited(s.AttemptID, 1)
	s2 := h.nextStart()
	if _, err := h.ctl.Report(context.Background(), s.AttemptID, wire.Report{Step: 1, Metrics: map[string]float64{"loss": 1}}); !errors.Is(err, control.ErrSuperseded) {
		t.Errorf("report of the old attempt: %v, want ErrSuperseded", err)
	}
	// An attempt that never existed is not "superseded": the caller has the
	// wrong ID, and a trial must not take it for an order to exit.
	if _, err := h.ctl.Report(context.Background(), 999999, wire.Report{Step: 1}); !errors.Is(err, virga.ErrNotFound) || errors.Is(err, control.ErrSuperseded) {
		t.Errorf("report of an unknown attempt: %v, want virga.ErrNotFound", err)
	}
	h.started(s2)
	if d := h.report(s2.AttemptID, 1, 0.5); d != "continue" {
		t.Errorf("current attempt: %s, want continue", d)
	}
	if _, ok := h.ctl.AttemptTrial(s.AttemptID); ok {
		t.Error("AttemptTrial knows the superseded attempt")
	}
}

func TestGroupCommitConcurrentReports(t *testing.T) {
	h := newHarness(t)
	h.start(newFakeBackend())
	const trials, steps = 20, 10
	e := h.submit(`name: api-driven
hyperparameters:
  x: {type: float, min: 0, max: 1}
searcher: random
objective: {metric: loss, direction: minimize}
max_trials: 20
seed: 5
`)
	var asked []wire.Asked
	for range trials {
		a, err := h.ctl.Ask(context.Background(), e.ID)
		if err != nil {
			t.Fatal(err)
		}
		asked = append(asked, a)
	}
	before := h.st.applies.Load()
	var wg sync.WaitGroup
	errs := make(chan error, trials*steps)
	for i := range trials * steps {
		wg.Go(func() {
			a := asked[i%trials]
			d, err := h.ctl.Report(context.Background(), a.AttemptID, wire.Report{Step: int64(i / trials), Metrics: map[string]float64{"loss": float64(i)}})
			if err == nil && d.String() != "continue" {
				err = fmt.Errorf("decision %s", d)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	commits := h.st.applies.Load() - before
	t.Logf("%d reports in %d commits", trials*steps, commits)
	if commits >= trials*steps {
		t.Errorf("%d commits for %d concurrent reports: not group-committed", commits, trials*steps)
	}
	for _, a := range asked {
		ms, err := h.st.Metrics(context.Background(), storeMetricFilter(a.Trial.ID))
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != steps {
			t.Errorf("trial %d: %d metrics stored, want %d", a.Trial.ID, len(ms), steps)
		}
	}
}

// TestCrashRecovery stops a controller in the middle of an experiment with
// attempts live, starts a new one on the same store, and checks that the
// attempts are adopted, not restarted, and that the search goes on exactly as
// an uninterrupted one with the same seed.
func TestCrashRecovery(t *testing.T) {
	const y = "max_trials: 5\nmax_concurrent: 2"
	// The uninterrupted run.
	ref := newHarness(t)
	ref.start(newFakeBackend())
	re := ref.submit(expYAML("crash", y))
	for range 5 {
		s := ref.nextStart()
		ref.started(s)
		ref.succeeded(s.AttemptID)
	}
	ref.waitExp(re.ID, virga.ExperimentCompleted)
	want := map[int]map[string]any{}
	for _, tr := range ref.trials(re.ID) {
		want[tr.Seq] = tr.HParams
	}

	h := newHarness(t)
	h.start(&adoptingBackend{newFakeBackend()})
	e := h.submit(expYAML("crash", y))
	// Trial 1 completes; trials 2 and 3 are running when the server dies, and
	// trial 3 has reported and checkpointed.
	s1 := h.nextStart()
	h.started(s1)
	h.exited(s1.AttemptID, 0)
	s2, s3 := h.nextStart(), h.nextStart()
	h.started(s2)
	h.started(s3)
	writeCkpt(t, s3, "s3")
	h.report(s3.AttemptID, 4, 0.1)
	h.waitTrial(s1.TrialID, virga.TrialCompleted)
	h.eventually("both attempts to be seen running", func() bool {
		return h.attempts(s2.TrialID)[0].State == virga.AttemptRunning && h.attempts(s3.TrialID)[0].State == virga.AttemptRunning
	})
	h.crash()

	be2 := &adoptingBackend{newFakeBackend()}
	h.start(be2)
	h.noStart()
	be2.mu.Lock()
	adopted := map[int64]bool{}
	for _, a := range be2.adopted {
		adopted[a.ID] = true
	}
	reapedAfter := be2.reapedAfter
	be2.mu.Unlock()
	if len(adopted) != 2 || !adopted[s2.AttemptID] || !adopted[s3.AttemptID] {
		t.Fatalf("adopted %v, want attempts %d and %d", adopted, s2.AttemptID, s3.AttemptID)
	}
	if reapedAfter != 2 {
		t.Fatalf("the backend was told that all were adopted after %d adoption(s), want after both", reapedAfter)
	}
	// A report of an adopted attempt is accepted.
	if d := h.report(s3.AttemptID, 5, 0.05); d != "continue" {
		t.Errorf("report of an adopted attempt: %s", d)
	}
	h.exited(s2.AttemptID, 0)
	h.exited(s3.AttemptID, 0)
	for range 2 {
		s := h.nextStart()
		if s.TrialID == s2.TrialID || s.TrialID == s3.TrialID {
			t.Fatalf("trial %d got a second attempt after recovery", s.TrialID)
		}
		h.started(s)
		h.exited(s.AttemptID, 0)
	}
	h.waitExp(e.ID, virga.ExperimentCompleted)
	got := map[int]map[string]any{}
	for _, tr := range h.trials(e.ID) {
		got[tr.Seq] = tr.HParams
		if tr.Attempts != 1 || tr.State != virga.TrialCompleted {
			t.Errorf("trial %d: %s after %d attempts, want COMPLETED after 1", tr.Seq, tr.State, tr.Attempts)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d trials, want %d", len(got), len(want))
	}
	for seq, hp := range want {
		if !maps.EqualFunc(hp, got[seq], func(a, b any) bool { return a == b }) {
			t.Errorf("trial %d: hparams %v after a crash, want %v as uninterrupted", seq, got[seq], hp)
		}
	}
	if tr := h.trial(s3.TrialID); tr.Step != 5 || tr.Checkpoint == "" {
		t.Errorf("trial 3 step %d checkpoint %q, want step 5 and its checkpoint", tr.Step, tr.Checkpoint)
	}
}

// TestCrashRecoveryStartingAttemptLost recovers an attempt that was committed
// but never seen started: the backend reports it lost, and it restarts
// without counting a restart.
func TestCrashRecoveryStartingAttemptLost(t *testing.T) {
	h := newHarness(t)
	h.start(&adoptingBackend{newFakeBackend()})
	e := h.submit(expYAML("starting", "max_trials: 1\nmax_restarts: 0"))
	s := h.nextStart() // never reported started
	h.crash()
	be2 := &adoptingBackend{newFakeBackend()}
	h.start(be2)
	h.noStart()
	h.lost(s.AttemptID)
	s2 := h.nextStart()
	if s2.TrialID != s.TrialID || s2.AttemptID == s.AttemptID {
		t.Fatalf("restart %+v, want a new attempt of trial %d", s2, s.TrialID)
	}
	h.started(s2)
	h.succeeded(s2.AttemptID)
	tr := h.waitTrial(s.TrialID, virga.TrialCompleted)
	if tr.Restarts != 0 || tr.Attempts != 2 {
		t.Errorf("restarts %d attempts %d, want 0 and 2", tr.Restarts, tr.Attempts)
	}
	h.waitExp(e.ID, virga.ExperimentCompleted)
}
