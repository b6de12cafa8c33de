package control_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/sqlite"
)

// The tests of this file crash the server while a trial or an experiment is
// in the middle of something (a searcher's pause, a move, a budget stop),
// then reword the human messages in the store, as a newer Virga that
// phrases them differently would find them, and check that recovery still
// carries on what was in flight: it decides from the typed reasons, never
// from the text.

// reworded is what the messages are replaced with.
const reworded = "reworded by a later release"

// rewordTrial replaces the stored message of trial id.
func (h *harness) rewordTrial(id int64) {
	h.t.Helper()
	tr := h.trial(id)
	tr.Message = reworded
	if err := h.st.Apply(context.Background(), &store.Batch{Trials: []*virga.Trial{tr}}); err != nil {
		h.t.Fatalf("rewording trial %d: %v", id, err)
	}
}

// rewordExp replaces the stored message of experiment id.
func (h *harness) rewordExp(id int64) {
	h.t.Helper()
	e := h.exp(id)
	e.Message = reworded
	if err := h.st.Apply(context.Background(), &store.Batch{Experiments: []*virga.Experiment{e}}); err != nil {
		h.t.Fatalf("rewording experiment %d: %v", id, err)
	}
}

// TestRecoverSearcherPauseReworded: a trial the searcher paused, whose
// process had not exited when the server stopped, ends its attempt paused
// by the searcher after recovery (not completed, not restarted), whatever
// its message says.
func TestRecoverSearcherPauseReworded(t *testing.T) {
	h := newHarness(t)
	h.start(&adoptingBackend{newFakeBackend()})
	h.submit(strings.Replace(ashaPromoteYAML, "max_concurrent: 3", "max_concurrent: 1", 1))
	s1 := h.nextStart()
	h.started(s1)
	writeCkpt(t, s1, "t1")
	if d := h.report(s1.AttemptID, 1, 0.1); d != "stop" {
		t.Fatalf("decision %s, want stop (pause)", d)
	}
	h.crash()
	h.rewordTrial(s1.TrialID)
	be := &adoptingBackend{newFakeBackend()}
	h.start(be)
	h.eventually("the adopted attempt to be stopped again", func() bool { return be.stopped(s1.AttemptID) })
	h.exited(s1.AttemptID, 0)
	h.eventually("the attempt to end", func() bool { return h.attempts(s1.TrialID)[0].State == virga.AttemptExited })
	tr := h.trial(s1.TrialID)
	if tr.State != virga.TrialPaused || tr.Restarts != 0 || tr.Attempts != 1 {
		t.Fatalf("after recovery the searcher's pause became %s with %d restarts and %d attempts (%q); want PAUSED, 0, 1",
			tr.State, tr.Restarts, tr.Attempts, tr.Message)
	}
	if tr.Reason != virga.ReasonPausedBySearcher {
		t.Errorf("paused trial's reason %q, want %s", tr.Reason, virga.ReasonPausedBySearcher)
	}
}

// TestRecoverMoveReworded: a move in flight when the server stops goes on
// after recovery even if the trial's message was reworded: the adopted
// attempt is stopped again, and its exit is a move, not a failure.
func TestRecoverMoveReworded(t *testing.T) {
	be := onePerPool(true)
	h, clk := policyHarness(t, be)
	_, s2, ckpt := movingTrial(t, h, be, clk)
	h.crash()
	h.rewordTrial(s2.TrialID)

	be2 := onePerPool(true)
	h.startPolicy(be2)
	h.eventually("the adopted attempt to be stopped again", func() bool { return be2.stopped(s2.AttemptID) })
	be2.exit(backend.Event{AttemptID: s2.AttemptID, Signal: "terminated"})
	s3 := h.nextStart()
	if s3.TrialID != s2.TrialID || s3.Pool != "ondemand" {
		t.Fatalf("next attempt: trial %d on %q, want trial %d on ondemand", s3.TrialID, s3.Pool, s2.TrialID)
	}
	as := h.attempts(s2.TrialID)
	if len(as) != 2 || as[0].Outcome != virga.OutcomeStopped || as[1].Restored != ckpt {
		t.Fatalf("attempts %+v, want a stopped one, then one from checkpoint %s", as, ckpt)
	}
	if tr := h.trial(s2.TrialID); tr.Restarts != 0 {
		t.Errorf("trial with %d restarts, want none (a move is not a failure)", tr.Restarts)
	}
	// Recovery knew the attempt was being moved: the policy did not decide
	// the move again.
	evs, err := h.st.Events(context.Background(), store.EventFilter{TrialID: s2.TrialID})
	if err != nil {
		t.Fatal(err)
	}
	moves := 0
	for _, ev := range evs {
		if ev.Kind == virga.EventTrialMoving {
			moves++
		}
	}
	if moves != 1 {
		t.Errorf("%d trial.moving events, want 1", moves)
	}
}

// TestRecoverBudgetStopReworded: an experiment its budget was stopping when
// the server stopped ends STOPPED for its budget after recovery, its
// trials stopped for the budget, even if its message was reworded.
func TestRecoverBudgetStopReworded(t *testing.T) {
	h, clk := costHarness(t)
	e := h.submit(expYAML("budget", "max_trials: 4\nmax_concurrent: 2\nbudget: 1\nstop_grace: 10s\nresources: {cpu: 1, memory: 512MiB}"))
	s1, s2 := h.nextStart(), h.nextStart()
	for _, s := range []*backend.StartSpec{s1, s2} {
		h.be.emit(backend.Event{AttemptID: s.AttemptID, Kind: backend.Started, Time: clk.Now(), PID: int(s.AttemptID)})
	}
	h.eventually("both attempts to run", func() bool {
		return h.attempts(s1.TrialID)[0].State == virga.AttemptRunning && h.attempts(s2.TrialID)[0].State == virga.AttemptRunning
	})
	clk.Advance(95 * time.Second)
	h.eventually("the budget to stop the experiment", func() bool { return h.exp(e.ID).State == virga.ExperimentStopping })
	h.crash()
	h.rewordExp(e.ID)

	h.start(&adoptingBackend{newFakeBackend()})
	end := clk.Advance(5 * time.Second)
	for _, s := range []*backend.StartSpec{s1, s2} {
		h.be.emit(backend.Event{AttemptID: s.AttemptID, Kind: backend.Exited, Time: end, Signal: "terminated"})
	}
	got := h.waitExp(e.ID, virga.ExperimentStopped)
	if got.Reason != virga.ReasonBudgetSpent {
		t.Errorf("experiment ended %s (%q), want reason %s", got.Reason, got.Message, virga.ReasonBudgetSpent)
	}
	for _, tr := range h.trials(e.ID) {
		if tr.State != virga.TrialStopped || tr.Reason != virga.ReasonBudgetSpent {
			t.Errorf("trial %d ended %s %q, want STOPPED %s", tr.ID, tr.State, tr.Reason, virga.ReasonBudgetSpent)
		}
	}
}

// downgrade turns the harness's database, its controller stopped, into what
// Virga wrote before trials had a reason (schema version 6): no reason
// column on trials, and none on live experiments. The next start of the
// controller opens it anew, which migrates it.
func (h *harness) downgrade() {
	h.t.Helper()
	path := filepath.Join(h.dir, "virga.db")
	if err := h.st.Store.Close(); err != nil {
		h.t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, q := range []string{
		`ALTER TABLE trials DROP COLUMN reason`,
		`UPDATE experiments SET reason = '' WHERE state IN ('ACTIVE', 'PAUSED', 'STOPPING')`,
		`DELETE FROM schema_version WHERE version > 6`,
	} {
		if _, err := db.Exec(q); err != nil {
			db.Close()
			h.t.Fatalf("downgrading: %s: %v", q, err)
		}
	}
	if err := db.Close(); err != nil {
		h.t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		h.t.Fatalf("opening the downgraded database: %v", err)
	}
	h.t.Cleanup(func() { st.Close() })
	if v, err := st.SchemaVersion(context.Background()); err != nil || v <= 6 {
		h.t.Fatalf("schema version %d, %v after opening a version-6 database; want it migrated", v, err)
	}
	h.st.Store = st
}

// TestUpgradeRecoversSearcherPauses: a server of the previous schema stops
// with one trial paused by the searcher and another being paused; the new
// server migrates the database and carries on as the old one would have:
// the pause in flight ends paused (not completed, not restarted), and the
// searcher promotes the paused trial.
func TestUpgradeRecoversSearcherPauses(t *testing.T) {
	h := newHarness(t)
	h.start(&adoptingBackend{newFakeBackend()})
	e := h.submit(strings.Replace(ashaPromoteYAML, "max_concurrent: 3", "max_concurrent: 1", 1))
	s1 := h.nextStart()
	h.started(s1)
	writeCkpt(t, s1, "t1")
	if d := h.report(s1.AttemptID, 1, 0.1); d != "stop" {
		t.Fatalf("decision %s for trial 1, want stop (pause)", d)
	}
	h.exited(s1.AttemptID, 0)
	h.waitTrial(s1.TrialID, virga.TrialPaused)
	s2 := h.nextStart()
	h.started(s2)
	if d := h.report(s2.AttemptID, 1, 0.5); d != "stop" {
		t.Fatalf("decision %s for trial 2, want stop (pause)", d)
	}
	h.crash()
	h.downgrade()

	be := &adoptingBackend{newFakeBackend()}
	h.start(be)
	if tr := h.trial(s1.TrialID); tr.Reason != virga.ReasonPausedBySearcher {
		t.Errorf("trial 1 after the upgrade: reason %q, want %s", tr.Reason, virga.ReasonPausedBySearcher)
	}
	h.eventually("the adopted attempt to be stopped again", func() bool { return be.stopped(s2.AttemptID) })
	h.exited(s2.AttemptID, 0)
	tr := h.waitTrial(s2.TrialID, virga.TrialPaused)
	if tr.Reason != virga.ReasonPausedBySearcher || tr.Restarts != 0 || tr.Attempts != 1 {
		t.Errorf("trial 2 after the upgrade: %s %q with %d restarts and %d attempts; want PAUSED PausedBySearcher, 0, 1",
			tr.State, tr.Reason, tr.Restarts, tr.Attempts)
	}
	if s3 := h.nextStart(); s3.TrialID != s1.TrialID {
		t.Fatalf("started trial %d, want trial %d promoted", s3.TrialID, s1.TrialID)
	}
	if got := h.exp(e.ID); got.State != virga.ExperimentActive {
		t.Errorf("experiment %s, want ACTIVE", got.State)
	}
}

// TestUpgradeRecoversBudgetStop: a server of the previous schema stops
// while its budget stops an experiment; the new server migrates the
// database and ends the experiment and its trials for the budget.
func TestUpgradeRecoversBudgetStop(t *testing.T) {
	h, clk := costHarness(t)
	e := h.submit(expYAML("budget", "max_trials: 4\nmax_concurrent: 2\nbudget: 1\nstop_grace: 10s\nresources: {cpu: 1, memory: 512MiB}"))
	s1, s2 := h.nextStart(), h.nextStart()
	for _, s := range []*backend.StartSpec{s1, s2} {
		h.be.emit(backend.Event{AttemptID: s.AttemptID, Kind: backend.Started, Time: clk.Now(), PID: int(s.AttemptID)})
	}
	h.eventually("both attempts to run", func() bool {
		return h.attempts(s1.TrialID)[0].State == virga.AttemptRunning && h.attempts(s2.TrialID)[0].State == virga.AttemptRunning
	})
	clk.Advance(95 * time.Second)
	h.eventually("the budget to stop the experiment", func() bool { return h.exp(e.ID).State == virga.ExperimentStopping })
	h.crash()
	h.downgrade()

	h.start(&adoptingBackend{newFakeBackend()})
	end := clk.Advance(5 * time.Second)
	for _, s := range []*backend.StartSpec{s1, s2} {
		h.be.emit(backend.Event{AttemptID: s.AttemptID, Kind: backend.Exited, Time: end, Signal: "terminated"})
	}
	got := h.waitExp(e.ID, virga.ExperimentStopped)
	if got.Reason != virga.ReasonBudgetSpent || !strings.HasPrefix(got.Message, "budget of $1.00 reached") {
		t.Errorf("experiment ended %s %q, want %s with the budget's message", got.Reason, got.Message, virga.ReasonBudgetSpent)
	}
	for _, tr := range h.trials(e.ID) {
		if tr.State != virga.TrialStopped || tr.Reason != virga.ReasonBudgetSpent {
			t.Errorf("trial %d ended %s %q (%q), want STOPPED %s", tr.ID, tr.State, tr.Reason, tr.Message, virga.ReasonBudgetSpent)
		}
	}
}

// runRefusingIllegalTransitions runs the tests and fails them if the loop
// refused a state change anywhere (a transition virga's table does not
// allow, which the loop only logs).
func runRefusingIllegalTransitions(m *testing.M) int {
	h := &refusalCounter{Handler: slog.NewTextHandler(os.Stderr, nil), n: new(atomic.Int64)}
	slog.SetDefault(slog.New(h))
	code := m.Run()
	if n := h.n.Load(); n > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: the control loop refused %d state changes (see the log)\n", n)
		return 1
	}
	return code
}

// refusalCounter counts the loop's logged refusals of a state change.
type refusalCounter struct {
	slog.Handler
	n *atomic.Int64
}

func (r *refusalCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return &refusalCounter{Handler: r.Handler.WithAttrs(as), n: r.n}
}

func (r *refusalCounter) WithGroup(name string) slog.Handler {
	return &refusalCounter{Handler: r.Handler.WithGroup(name), n: r.n}
}

func (r *refusalCounter) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Message == "control: refused a state change" {
		r.n.Add(1)
	}
	return r.Handler.Handle(ctx, rec)
}
