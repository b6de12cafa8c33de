// Package storetest is the one conformance suite every store.Store
// implementation must pass, so that SQLite and PostgreSQL behave alike. It
// uses real stores only, never mocks, and must never depend on a particular
// implementation: what it cannot express through store.Store it takes as an
// option.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store"
)

// Option changes what Run tests.
type Option func(*config)

type config struct {
	reopen    func(t *testing.T, s store.Store) store.Store
	oldSchema OldSchema
}

// WithReopen enables the durability subtest: reopen must close s and open
// the same database again, returning the new store (and arrange its Close).
func WithReopen(reopen func(t *testing.T, s store.Store) store.Store) Option {
	return func(c *config) { c.reopen = reopen }
}

// Run runs the conformance suite as parallel subtests. open must return a
// new, empty, isolated store for each call (it is called from several
// goroutines at once) and close it when t ends.
func Run(t *testing.T, open func(t *testing.T) store.Store, opts ...Option) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"SchemaVersion", testSchemaVersion},
		{"EmptyBatch", testEmptyBatch},
		{"ExperimentRoundTrip", testExperimentRoundTrip},
		{"TrialRoundTrip", testTrialRoundTrip},
		{"TrialLineageAndPrediction", testTrialLineageAndPrediction},
		{"AttemptRoundTrip", testAttemptRoundTrip},
		{"NewAttempts", testNewAttempts},
		{"NewExperimentEvents", testNewExperimentEvents},
		{"AttemptCost", testAttemptCost},
		{"UpdateKeepsFixedFields", testUpdateKeepsFixedFields},
		{"NotFound", testNotFound},
		{"UpdateMissingRollsBack", testUpdateMissingRollsBack},
		{"MissingParent", testMissingParent},
		{"DuplicateKeys", testDuplicateKeys},
		{"BatchAtomicity", testBatchAtomicity},
		{"MetricUpsert", testMetricUpsert},
		{"MetricUpsertMany", testMetricUpsertMany},
		{"MetricValues", testMetricValues},
		{"Checkpoints", testCheckpoints},
		{"ExperimentList", testExperimentList},
		{"TrialAndAttemptLists", testTrialAndAttemptLists},
		{"Events", testEvents},
		{"EventReplace", testEventReplace},
		{"FailedBatchRestoresRows", testFailedBatchRestoresRows},
		{"ValuesAreNotShared", testValuesAreNotShared},
		{"Tokens", testTokens},
		{"ModelVersions", testModelVersions},
		{"ModelAliases", testModelAliases},
		{"ModelFilesShared", testModelFilesShared},
		{"ModelConcurrentRegister", testModelConcurrentRegister},
		{"Concurrent", testConcurrent},
		{"LargeBatch", testLargeBatch},
	}
	// Each subtest has a store of its own, so they run in parallel: most of
	// their time is spent waiting for commits to reach the disk.
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open(t))
		})
	}
	t.Run("Reopen", func(t *testing.T) {
		t.Parallel()
		if c.reopen == nil {
			t.Skip("the store gave no WithReopen option")
		}
		testReopen(t, open(t), c.reopen)
	})
	t.Run("ReasonsBackfilled", func(t *testing.T) {
		t.Parallel()
		if c.oldSchema == nil {
			t.Skip("the store gave no WithOldSchema option")
		}
		testReasonsBackfilled(t, c.oldSchema)
	})
}

// base is a time with nanoseconds, to check they survive.
var base = time.Date(2026, 3, 1, 12, 30, 15, 123456789, time.UTC)

func at(d time.Duration) time.Time { return base.Add(d) }

func ptr[T any](v T) *T { return &v }

// cmpOpts compares stored rows: nil and empty slices and maps are equal, and
// NaN equals NaN.
var cmpOpts = cmp.Options{cmpopts.EquateEmpty(), cmpopts.EquateNaNs()}

func diff(t *testing.T, what string, want, got any) {
	t.Helper()
	if d := cmp.Diff(want, got, cmpOpts); d != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", what, d)
	}
}

func apply(t *testing.T, s store.Store, b *store.Batch) {
	t.Helper()
	if err := s.Apply(context.Background(), b); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

// wantErr checks that err wraps target.
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v, want one wrapping %v", what, err, target)
	}
}

func newExperiment(name string) *virga.Experiment {
	return &virga.Experiment{
		Name: name, State: virga.ExperimentActive, Spec: []byte("name: " + name + "\n"), SpecFile: name + ".yaml",
		CreatedAt: at(0), UpdatedAt: at(time.Second),
	}
}

func newTrial(expID int64, seq int) *virga.Trial {
	return &virga.Trial{
		ExperimentID: expID, Seq: seq, Request: fmt.Sprintf("req-%d", seq), State: virga.TrialQueued,
		HParams: map[string]any{"lr": 0.01, "layers": 3.0}, CreatedAt: at(time.Duration(seq) * time.Millisecond),
	}
}

func newAttempt(trialID int64, number int) *virga.Attempt {
	return &virga.Attempt{
		TrialID: trialID, Number: number, State: virga.AttemptStarting, Backend: "local",
		CreatedAt: at(time.Duration(number) * time.Second),
	}
}

// seed inserts one experiment with n trials and returns them.
func seed(t *testing.T, s store.Store, n int) (*virga.Experiment, []*virga.Trial) {
	t.Helper()
	e := newExperiment("seed")
	apply(t, s, &store.Batch{Experiments: []*virga.Experiment{e}})
	var ts []*virga.Trial
	for i := 1; i <= n; i++ {
		ts = append(ts, newTrial(e.ID, i))
	}
	apply(t, s, &store.Batch{Trials: ts})
	return e, ts
}

func metricsOf(t *testing.T, s store.Store, trialID int64) []virga.Metric {
	t.Helper()
	ms, err := s.Metrics(context.Background(), store.MetricFilter{TrialID: trialID, AfterStep: -1})
	if err != nil {
		t.Fatalf("Metrics: %v", err)
	}
	return ms
}

func testSchemaVersion(t *testing.T, s store.Store) {
	v, err := s.SchemaVersion(context.Background())
	if err != nil {
		t.Fatalf("SchemaVersion: %v", err)
	}
	if v < 1 {
		t.Errorf("SchemaVersion = %d, want >= 1", v)
	}
}

func testEmptyBatch(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.Apply(ctx, &store.Batch{}); err != nil {
		t.Errorf("Apply(empty): %v", err)
	}
	if err := s.Apply(ctx, nil); err != nil {
		t.Errorf("Apply(nil): %v", err)
	}
}

func testExperimentRoundTrip(t *testing.T, s store.Store) {
	ctx := context.Background()
	e := &virga.Experiment{
		Name: "mnist", State: virga.ExperimentActive, Spec: []byte("name: mnist\nsearcher: grid\n"),
		SpecFile: "exp/mnist.yaml", SearcherState: []byte{0, 1, 2, 0xff}, Message: "waiting for capacity",
		CreatedAt: at(0), UpdatedAt: at(time.Nanosecond),
	}
	apply(t, s, &store.Batch{Experiments: []*virga.Experiment{e}})
	if e.ID == 0 {
		t.Fatal("insert left Experiment.ID at 0")
	}
	got, err := s.Experiment(ctx, e.ID)
	if err != nil {
		t.Fatalf("Experiment: %v", err)
	}
	diff(t, "inserted experiment", e, got)
	if !got.EndedAt.IsZero() {
		t.Errorf("EndedAt = %v, want the zero time", got.EndedAt)
	}
	if got.CreatedAt.Location() != time.UTC {
		t.Errorf("CreatedAt location = %v, want UTC", got.CreatedAt.Location())
	}

	// A full-row update, from a time in another zone; nil searcher state.
	upd := *e
	upd.Name, upd.State, upd.Message = "mnist-2", virga.ExperimentFailed, "no trial reported the objective metric loss"
	upd.Reason = virga.ReasonNoObjective
	upd.Spec, upd.SpecFile, upd.SearcherState = []byte("x"), "other.yaml", nil
	upd.UpdatedAt = at(time.Hour).In(time.FixedZone("X", 5*3600))
	upd.EndedAt = at(time.Hour + 1)
	apply(t, s, &store.Batch{Experiments: []*virga.Experiment{&upd}})
	if upd.ID != e.ID {
		t.Errorf("update changed ID %d to %d", e.ID, upd.ID)
	}
	got, err = s.Experiment(ctx, e.ID)
	if err != nil {
		t.Fatalf("Experiment: %v", err)
	}
	// Name, Spec, SpecFile and CreatedAt are fixed at insertion (see testUpdateKeepsFixedFields).
	want := upd
	want.Name, want.Spec, want.SpecFile, want.CreatedAt = e.Name, e.Spec, e.SpecFile, e.CreatedAt
	diff(t, "updated experiment", &want, got)
	if got.SearcherState != nil {
		t.Errorf("SearcherState = %v, want nil", got.SearcherState)
	}
}

func testTrialRoundTrip(t *testing.T, s store.Store) {
	ctx := context.Background()
	e, _ := seed(t, s, 0)
	tr := &virga.Trial{
		ExperimentID: e.ID, Seq: 1, Request: "p-1", State: virga.TrialRunning,
		HParams: map[string]any{
			"lr": 0.001, "batch": 64, "big": int64(1) << 40, "opt": "adam", "nesterov": true,
			"layers": []any{128, 64.5, "relu"}, "sched": map[string]any{"kind": "cos", "warmup": 100},
			"none": nil,
		},
		Attempts: 2, Restarts: 1, Step: 1200, Latest: ptr(0.25), Best: ptr(-0.125), BestStep: 1100,
		Checkpoint: "ab12", Reason: virga.ReasonMoving, Message: "moving to pool b", CreatedAt: at(0), UpdatedAt: at(2 * time.Second),
	}
	apply(t, s, &store.Batch{Trials: []*virga.Trial{tr}})
	got, err := s.Trial(ctx, tr.ID)
	if err != nil {
		t.Fatalf("Trial: %v", err)
	}
	// JSON numbers, integers included, come back as float64.
	want := *tr
	want.HParams = map[string]any{
		"lr": 0.001, "batch": 64.0, "big": float64(1 << 40), "opt": "adam", "nesterov": true,
		"layers": []any{128.0, 64.5, "relu"}, "sched": map[string]any{"kind": "cos", "warmup": 100.0},
		"none": nil,
	}
	diff(t, "inserted trial", &want, got)

	// Update: nil floats, zero values, an infinite best. The fields fixed at
	// insertion (Request, HParams, CreatedAt here) keep their stored values.
	upd := &virga.Trial{ID: tr.ID, ExperimentID: e.ID, Seq: 1, State: virga.TrialFailed,
		Reason: virga.ReasonRestartsExhausted, Best: ptr(math.Inf(-1)), EndedAt: at(time.Minute)}
	apply(t, s, &store.Batch{Trials: []*virga.Trial{upd}})
	got, err = s.Trial(ctx, tr.ID)
	if err != nil {
		t.Fatalf("Trial: %v", err)
	}
	wantUpd := *upd
	wantUpd.Request, wantUpd.HParams, wantUpd.CreatedAt = want.Request, want.HParams, want.CreatedAt
	diff(t, "updated trial", &wantUpd, got)
	if got.Latest != nil {
		t.Errorf("Latest = %v, want nil", *got.Latest)
	}

	// Nil hparams come back nil; empty hparams stay an empty, non-nil map;
	// a zero float stays non-nil.
	for i, hp := range []map[string]any{nil, {}} {
		tr := &virga.Trial{ExperimentID: e.ID, Seq: 2 + i, State: virga.TrialQueued, HParams: hp, Latest: ptr(0.0)}
		apply(t, s, &store.Batch{Trials: []*virga.Trial{tr}})
		got, err = s.Trial(ctx, tr.ID)
		if err != nil {
			t.Fatalf("Trial: %v", err)
		}
		if hp == nil && got.HParams != nil {
			t.Errorf("HParams = %v, want nil", got.HParams)
		}
		if hp != nil && (got.HParams == nil || len(got.HParams) != 0) {
			t.Errorf("HParams = %#v, want an empty map", got.HParams)
		}
		if got.Latest == nil || *got.Latest != 0 {
			t.Errorf("Latest = %v, want a pointer to 0", got.Latest)
		}
	}
}

// testTrialLineageAndPrediction checks a trial's lineage (fixed at insertion)
// and prediction (updatable) through every read of trials: a nil prediction
// stays nil, a set one round-trips with infinite and NaN numbers, and an
// update can set it, change it and clear it.
func testTrialLineageAndPrediction(t *testing.T, s store.Store) {
	ctx := context.Background()
	e, _ := seed(t, s, 0)
	parent := newTrial(e.ID, 1)
	apply(t, s, &store.Batch{Trials: []*virga.Trial{parent}})
	child := newTrial(e.ID, 2)
	child.Parent, child.ParentCheckpoint, child.ParentStep = parent.ID, "ck-0700", 700
	child.Prediction = &virga.Prediction{Step: 800, Horizon: 2000, Mean: 0.123, Std: 0.01, ProbBetter: 0.04}
	apply(t, s, &store.Batch{Trials: []*virga.Trial{child}})

	// check reads both trials through Trial and Trials and compares them.
	check := func(when string, want ...*virga.Trial) {
		t.Helper()
		for _, w := range want {
			got, err := s.Trial(ctx, w.ID)
			if err != nil {
				t.Fatalf("Trial: %v", err)
			}
			diff(t, fmt.Sprintf("Trial(%d) %s", w.Seq, when), w, got)
			if w.Prediction == nil && got.Prediction != nil {
				t.Errorf("Trial(%d) %s: Prediction = %+v, want nil", w.Seq, when, *got.Prediction)
			}
		}
		got, err := s.Trials(ctx, e.ID)
		if err != nil {
			t.Fatalf("Trials: %v", err)
		}
		diff(t, "Trials "+when, want, got)
		for i, g := range got {
			if i < len(want) && want[i].Prediction == nil && g.Prediction != nil {
				t.Errorf("Trials[%d] %s: Prediction = %+v, want nil", i, when, *g.Prediction)
			}
		}
	}
	check("after insert", parent, child)

	// An update writes the prediction, infinities and NaN included, and
	// leaves the lineage as inserted whatever it says.
	parent.Prediction = &virga.Prediction{Step: 10, Horizon: 100, Mean: math.NaN(), Std: math.Inf(1), ProbBetter: 0}
	uc := *child
	uc.Parent, uc.ParentCheckpoint, uc.ParentStep = 0, "", 0
	uc.Step, uc.Prediction = 900, &virga.Prediction{Step: 900, Horizon: 2000, Mean: -1.5, Std: 0.25, ProbBetter: 1}
	apply(t, s, &store.Batch{Trials: []*virga.Trial{parent, &uc}})
	child.Step, child.Prediction = uc.Step, uc.Prediction
	check("after updating the predictions", parent, child)

	// An update with a nil prediction clears it.
	parent.Prediction, child.Prediction = nil, nil
	apply(t, s, &store.Batch{Trials: []*virga.Trial{parent, child}})
	check("after clearing the predictions", parent, child)
}

// testUpdateKeepsFixedFields checks that an update leaves the fields fixed at
// insertion as stored, whatever values it gives for them (see store.Batch),
// while writing all the others.
func testUpdateKeepsFixedFields(t *testing.T, s store.Store) {
	ctx := context.Background()
	e, ts := seed(t, s, 2)
	a := newAttempt(ts[0].ID, 1)
	apply(t, s, &store.Batch{Attempts: []*virga.Attempt{a}})
	wantE, wantT, wantA := *e, *ts[0], *a

	// Every field changes, the fixed ones to values that would break
	// constraints or point elsewhere if they were written.
	ue := *e
	ue.Name, ue.Spec, ue.SpecFile, ue.CreatedAt = "renamed", []byte("other spec"), "other.yaml", at(time.Hour)
	ue.State, ue.SearcherState, ue.Reason, ue.Message = virga.ExperimentPaused, []byte{7}, virga.ReasonPausedByUser, "paused"
	ue.UpdatedAt, ue.EndedAt = at(2*time.Hour), at(3*time.Hour)
	wantE.State, wantE.SearcherState, wantE.Reason, wantE.Message = ue.State, ue.SearcherState, ue.Reason, ue.Message
	wantE.UpdatedAt, wantE.EndedAt = ue.UpdatedAt, ue.EndedAt

	ut := *ts[0]
	ut.ExperimentID, ut.Seq, ut.Request, ut.CreatedAt = e.ID+1000, ts[1].Seq, "other-req", at(time.Hour)
	ut.HParams = map[string]any{"lr": 0.5, "extra": "x"}
	ut.State, ut.Attempts, ut.Restarts, ut.Step = virga.TrialRunning, 3, 2, 77
	ut.Parent, ut.ParentCheckpoint, ut.ParentStep = ts[1].ID, "parent-ck", 40
	ut.Latest, ut.Best, ut.BestStep, ut.Checkpoint, ut.Message = ptr(0.5), ptr(0.25), 70, "ck", "pausing"
	ut.Reason = virga.ReasonPausingBySearcher
	ut.Prediction = &virga.Prediction{Step: 77, Horizon: 100, Mean: 0.2, Std: 0.05, ProbBetter: 0.5}
	ut.UpdatedAt, ut.EndedAt = at(2*time.Hour), at(3*time.Hour)
	wantT.State, wantT.Attempts, wantT.Restarts, wantT.Step = ut.State, ut.Attempts, ut.Restarts, ut.Step
	wantT.Latest, wantT.Best, wantT.BestStep, wantT.Checkpoint, wantT.Message = ut.Latest, ut.Best, ut.BestStep, ut.Checkpoint, ut.Message
	wantT.Prediction, wantT.UpdatedAt, wantT.EndedAt, wantT.Reason = ut.Prediction, ut.UpdatedAt, ut.EndedAt, ut.Reason

	ua := *a
	ua.TrialID, ua.Number, ua.Backend, ua.CreatedAt = ts[1].ID+1000, 9, "other", at(time.Hour)
	ua.State, ua.Outcome, ua.PID, ua.ExitCode, ua.Signal = virga.AttemptExited, virga.OutcomeFailed, 99, ptr(3), "killed"
	ua.Restored, ua.Dir, ua.Message = "ck0", "/d", "gone"
	ua.StartedAt, ua.EndedAt = at(2*time.Hour), at(3*time.Hour)
	ua.Pool, ua.Cost, ua.LostCost = "spot", 1.5, 0.25
	wantA.Pool, wantA.Cost, wantA.LostCost = ua.Pool, ua.Cost, ua.LostCost
	wantA.State, wantA.Outcome, wantA.PID, wantA.ExitCode, wantA.Signal = ua.State, ua.Outcome, ua.PID, ua.ExitCode, ua.Signal
	wantA.Restored, wantA.Dir, wantA.Message = ua.Restored, ua.Dir, ua.Message
	wantA.StartedAt, wantA.EndedAt = ua.StartedAt, ua.EndedAt

	apply(t, s, &store.Batch{Experiments: []*virga.Experiment{&ue}, Trials: []*virga.Trial{&ut}, Attempts: []*virga.Attempt{&ua}})

	gotE, err := s.Experiment(ctx, e.ID)
	if err != nil {
		t.Fatalf("Experiment: %v", err)
	}
	diff(t, "updated experiment", &wantE, gotE)
	gotT, err := s.Trial(ctx, ts[0].ID)
	if err != nil {
		t.Fatalf("Trial: %v", err)
	}
	diff(t, "updated trial", &wantT, gotT)
	gotA, err := s.Attempts(ctx, ts[0].ID)
	if err != nil {
		t.Fatalf("Attempts: %v", err)
	}
	diff(t, "updated attempts", []*virga.Attempt{&wantA}, gotA)
	// Nothing moved to the other trial or experiment.
	if as, err := s.Attempts(ctx, ts[1].ID); err != nil || len(as) != 0 {
		t.Errorf("Attempts(other trial) = %v, %v; want nothing", as, err)
	}
	if trs, err := s.Trials(ctx, e.ID); err != nil || len(trs) != 2 {
		t.Errorf("Trials = %d, %v; want 2", len(trs), err)
	}
}

func testAttemptRoundTrip(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, ts := seed(t, s, 1)
	a := &virga.Attempt{
		TrialID: ts[0].ID, Number: 1, State: virga.AttemptExited, Outcome: virga.OutcomeFailed, Backend: "local",
		PID: 4242, ExitCode: ptr(0), Signal: "killed", Restored: "ck1", Dir: "/data/trials/1/attempts/1",
		Message: "boom", CreatedAt: at(0), StartedAt: at(time.Millisecond), EndedAt: at(time.Hour),
		Pool: "p3-spot", Cost: 3.0625, LostCost: 0.125,
	}
	b := newAttempt(ts[0].ID, 2) // ExitCode nil, zero times
	apply(t, s, &store.Batch{Attempts: []*virga.Attempt{a, b}})
	got, err := s.Attempts(ctx, ts[0].ID)
	if err != nil {
		t.Fatalf("Attempts: %v", err)
	}
	diff(t, "attempts", []*virga.Attempt{a, b}, got)
	if len(got) == 2 && (got[0].ExitCode == nil || got[1].ExitCode != nil) {
		t.Errorf("ExitCode: got %v and %v, want a pointer to 0 and nil", got[0].ExitCode, got[1].ExitCode)
	}

	a.ExitCode, a.State, a.Signal = ptr(-137), virga.AttemptRunning, ""
	apply(t, s, &store.Batch{Attempts: []*virga.Attempt{a}})
	got, err = s.Attempts(ctx, ts[0].ID)
	if err != nil {
		t.Fatalf("Attempts: %v", err)
	}
	diff(t, "updated attempts", []*virga.Attempt{a, b}, got)
	one, err := s.Attempt(ctx, a.ID)
	if err != nil {
		t.Fatalf("Attempt(%d): %v", a.ID, err)
	}
	diff(t, "attempt by ID", a, one)
	if _, err := s.Attempt(ctx, max(a.ID, b.ID)+1000); !errors.Is(err, virga.ErrNotFound) {
		t.Errorf("Attempt of an ID never used: %v, want virga.ErrNotFound", err)
	}
}

// testNewAttempts inserts trials and their first attempts in one batch: each
// attempt gets its trial's new ID; a failing batch leaves both IDs at 0.
func testNewAttempts(t *testing.T, s store.Store) {
	e, _ := seed(t, s, 1)
	t2, t3 := newTrial(e.ID, 2), newTrial(e.ID, 3)
	a2, a3 := newAttempt(0, 1), newAttempt(0, 1)
	apply(t, s, &store.Batch{Trials: []*virga.Trial{t2, t3},
		NewAttempts: []store.NewAttempt{{Trial: t2, Attempt: a2}, {Trial: t3, Attempt: a3}}})
	if a2.TrialID != t2.ID || a3.TrialID != t3.ID || a2.ID == 0 || a3.ID == 0 || a2.ID == a3.ID {
		t.Fatalf("attempts got trial IDs %d, %d and IDs %d, %d; want trial IDs %d, %d and two new IDs",
			a2.TrialID, a3.TrialID, a2.ID, a3.ID, t2.ID, t3.ID)
	}
	for _, tr := range []*virga.Trial{t2, t3} {
		as, err := s.Attempts(context.Background(), tr.ID)
		if err != nil || len(as) != 1 || as[0].TrialID != tr.ID {
			t.Fatalf("attempts of trial %d: %v, %v; want the one inserted", tr.ID, as, err)
		}
	}
	// A batch that fails later leaves the new rows' IDs at 0.
	t4, a4 := newTrial(e.ID, 4), newAttempt(0, 1)
	err := s.Apply(context.Background(), &store.Batch{Trials: []*virga.Trial{t4},
		NewAttempts: []store.NewAttempt{{Trial: t4, Attempt: a4}},
		Attempts:    []*virga.Attempt{{ID: 99999, TrialID: t2.ID}}})
	wantErr(t, "batch with a missing attempt", err, virga.ErrNotFound)
	if t4.ID != 0 || a4.ID != 0 || a4.TrialID != 0 {
		t.Errorf("after a failed batch: trial ID %d, attempt ID %d, attempt trial ID %d; want all 0", t4.ID, a4.ID, a4.TrialID)
	}
}

// testNewExperimentEvents inserts experiments and their first events in one
// batch: each event gets its own experiment's new ID (two new experiments
// in one batch, and one already stored); a failing batch stores none of
// them and leaves their IDs at 0.
func testNewExperimentEvents(t *testing.T, s store.Store) {
	ctx := context.Background()
	old := newExperiment("old")
	apply(t, s, &store.Batch{Experiments: []*virga.Experiment{old}})
	e1, e2 := newExperiment("one"), newExperiment("two")
	ev := func(kind virga.EventKind, msg string) *virga.Event {
		return &virga.Event{Kind: kind, Message: msg, Time: at(time.Second)}
	}
	c1, est1 := ev(virga.EventExperimentCreated, "one.yaml"), ev(virga.EventExperimentEstimate, `{"work":1}`)
	c2, est2 := ev(virga.EventExperimentCreated, "two.yaml"), ev(virga.EventExperimentEstimate, `{"work":2}`)
	note := ev(virga.EventExperimentStop, "of the old one")
	apply(t, s, &store.Batch{Experiments: []*virga.Experiment{e1, e2},
		NewExperimentEvents: []store.NewExperimentEvent{{Experiment: e1, Event: c1}, {Experiment: e2, Event: c2},
			{Experiment: e1, Event: est1}, {Experiment: e2, Event: est2}, {Experiment: old, Event: note}}})
	for _, c := range []struct {
		exp  *virga.Experiment
		want []*virga.Event
	}{{e1, []*virga.Event{c1, est1}}, {e2, []*virga.Event{c2, est2}}, {old, []*virga.Event{note}}} {
		if c.exp.ID == 0 {
			t.Fatalf("experiment %q has no ID after the batch", c.exp.Name)
		}
		var want []virga.Event
		for _, e := range c.want {
			if e.ExperimentID != c.exp.ID || e.ID == 0 {
				t.Errorf("event %s %q: experiment ID %d, ID %d; want experiment %d and a new ID", e.Kind, e.Message, e.ExperimentID, e.ID, c.exp.ID)
			}
			want = append(want, *e)
		}
		got, err := s.Events(ctx, store.EventFilter{ExperimentID: c.exp.ID})
		if err != nil {
			t.Fatalf("Events of experiment %d: %v", c.exp.ID, err)
		}
		diff(t, fmt.Sprintf("events of experiment %q", c.exp.Name), want, got)
	}
	// A batch that fails later stores neither and leaves the IDs at 0.
	e3, c3 := newExperiment("three"), ev(virga.EventExperimentCreated, "three.yaml")
	err := s.Apply(ctx, &store.Batch{Experiments: []*virga.Experiment{e3},
		NewExperimentEvents: []store.NewExperimentEvent{{Experiment: e3, Event: c3}},
		Attempts:            []*virga.Attempt{{ID: 99999, TrialID: 99999}}})
	wantErr(t, "batch with a missing attempt", err, virga.ErrNotFound)
	if e3.ID != 0 || c3.ID != 0 || c3.ExperimentID != 0 {
		t.Errorf("after a failed batch: experiment ID %d, event ID %d, event experiment ID %d; want all 0", e3.ID, c3.ID, c3.ExperimentID)
	}
	if exps, err := s.Experiments(ctx, store.ExperimentFilter{}); err != nil || len(exps) != 3 {
		t.Errorf("experiments after the failed batch: %d, %v; want the 3 stored before", len(exps), err)
	}
}

// testAttemptCost checks an attempt's pool, cost and lost cost: written on
// insert (both ways) and update, listed per experiment by
// ExperimentAttempts, and a cost that is not a finite number refused with
// the whole batch.
func testAttemptCost(t *testing.T, s store.Store) {
	ctx := context.Background()
	e, ts := seed(t, s, 2)
	other, ots := seed(t, s, 1)
	// 1. Inserted with a pool and a cost; the new trial's attempt too.
	a1 := newAttempt(ts[0].ID, 1)
	a1.State, a1.Outcome, a1.Pool, a1.Cost, a1.LostCost = virga.AttemptExited, virga.OutcomePreempted, "spot-a", 0.1+0.2, 1.0/3
	a2 := newAttempt(ts[0].ID, 2)
	a2.Pool = "ondemand"
	b1 := newAttempt(ts[1].ID, 1)
	b1.Cost = 1e-9 // a second of a cheap share: small amounts stay exact
	o1 := newAttempt(ots[0].ID, 1)
	o1.Pool, o1.Cost = "spot-a", 99
	t3, c1 := newTrial(e.ID, 3), newAttempt(0, 1)
	c1.Pool, c1.Cost = "spot-b", 12345.678
	apply(t, s, &store.Batch{Trials: []*virga.Trial{t3}, NewAttempts: []store.NewAttempt{{Trial: t3, Attempt: c1}},
		Attempts: []*virga.Attempt{b1, a2, o1, a1}})
	got, err := s.ExperimentAttempts(ctx, e.ID)
	if err != nil {
		t.Fatalf("ExperimentAttempts: %v", err)
	}
	diff(t, "attempts of the experiment", []*virga.Attempt{a1, a2, b1, c1}, got)
	if got, err := s.ExperimentAttempts(ctx, other.ID); err != nil {
		t.Fatalf("ExperimentAttempts(other): %v", err)
	} else {
		diff(t, "attempts of the other experiment", []*virga.Attempt{o1}, got)
	}
	if got, err := s.ExperimentAttempts(ctx, other.ID+1000); err != nil || len(got) != 0 {
		t.Errorf("ExperimentAttempts(no such experiment) = %v, %v; want none", got, err)
	}

	// 2. An update writes the final cost, and a pool decided late.
	a2.State, a2.Cost, a2.LostCost, a2.Pool = virga.AttemptExited, 2.5, 0.75, "ondemand-b"
	apply(t, s, &store.Batch{Attempts: []*virga.Attempt{a2}})
	got, err = s.Attempts(ctx, ts[0].ID)
	if err != nil {
		t.Fatalf("Attempts: %v", err)
	}
	diff(t, "attempts after the cost update", []*virga.Attempt{a1, a2}, got)

	// 3. A cost that is not a finite number is refused with its batch.
	for _, bad := range []float64{math.NaN(), math.Inf(1)} {
		a3 := newAttempt(ts[0].ID, 3)
		a3.Cost = bad
		b1.LostCost = 7
		err := s.Apply(ctx, &store.Batch{Attempts: []*virga.Attempt{b1, a3}})
		if err == nil {
			t.Errorf("an attempt costing %g was stored", bad)
		}
		b1.LostCost = 0
		up := *a2
		up.LostCost = bad
		if err := s.Apply(ctx, &store.Batch{Attempts: []*virga.Attempt{&up}}); err == nil {
			t.Errorf("an update to a lost cost of %g was stored", bad)
		}
	}
	got, err = s.ExperimentAttempts(ctx, e.ID)
	if err != nil {
		t.Fatalf("ExperimentAttempts: %v", err)
	}
	diff(t, "attempts after refused costs", []*virga.Attempt{a1, a2, b1, c1}, got)
}

func testNotFound(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, err := s.Experiment(ctx, 12345)
	wantErr(t, "Experiment(missing)", err, virga.ErrNotFound)
	_, err = s.Trial(ctx, 12345)
	wantErr(t, "Trial(missing)", err, virga.ErrNotFound)
	_, err = s.TokenByHash(ctx, []byte("nope"))
	wantErr(t, "TokenByHash(missing)", err, virga.ErrNotFound)

	// Lists of nothing are empty, not errors.
	if ts, err := s.Trials(ctx, 12345); err != nil || len(ts) != 0 {
		t.Errorf("Trials(missing) = %v, %v; want nothing", ts, err)
	}
	if ms, err := s.Metrics(ctx, store.MetricFilter{TrialID: 12345, AfterStep: -1}); err != nil || len(ms) != 0 {
		t.Errorf("Metrics(missing) = %v, %v; want nothing", ms, err)
	}
}

func testUpdateMissingRollsBack(t *testing.T, s store.Store) {
	ctx := context.Background()
	e, ts := seed(t, s, 1)
	cases := []struct {
		name string
		b    func() *store.Batch
	}{
		{"experiment", func() *store.Batch {
			return &store.Batch{Experiments: []*virga.Experiment{{ID: 999, Name: "ghost"}}}
		}},
		{"trial", func() *store.Batch { return &store.Batch{Trials: []*virga.Trial{{ID: 999, ExperimentID: e.ID}}} }},
		{"attempt", func() *store.Batch { return &store.Batch{Attempts: []*virga.Attempt{{ID: 999, TrialID: ts[0].ID}}} }},
		{"event", func() *store.Batch { return &store.Batch{Events: []*virga.Event{{ID: 999, Kind: "x"}}} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Inserts of every kind ahead of the failing update.
			ne, nt, na := newExperiment("doomed"), newTrial(e.ID, 99), newAttempt(ts[0].ID, 99)
			ev := &virga.Event{ExperimentID: e.ID, Kind: "doomed"}
			b := tc.b()
			b.Experiments = append([]*virga.Experiment{ne}, b.Experiments...)
			b.Trials = append([]*virga.Trial{nt}, b.Trials...)
			b.Attempts = append([]*virga.Attempt{na}, b.Attempts...)
			b.Events = append([]*virga.Event{ev}, b.Events...)
			b.Metrics = []virga.Metric{{TrialID: ts[0].ID, Step: 7, Values: map[string]float64{"x": 1}}}
			err := s.Apply(ctx, b)
			wantErr(t, "Apply(update missing "+tc.name+")", err, virga.ErrNotFound)
			if ne.ID != 0 || nt.ID != 0 || na.ID != 0 || ev.ID != 0 {
				t.Errorf("failed batch left IDs set: experiment %d trial %d attempt %d event %d", ne.ID, nt.ID, na.ID, ev.ID)
			}
			assertOnlySeed(t, s, e.ID, ts[0].ID)
		})
	}
}

// assertOnlySeed checks that nothing but seed(t, s, 1)'s rows is stored.
func assertOnlySeed(t *testing.T, s store.Store, expID, trialID int64) {
	t.Helper()
	ctx := context.Background()
	es, err := s.Experiments(ctx, store.ExperimentFilter{})
	if err != nil || len(es) != 1 || es[0].ID != expID {
		t.Errorf("Experiments = %d rows, %v; want only the seed", len(es), err)
	}
	ts, err := s.Trials(ctx, expID)
	if err != nil || len(ts) != 1 {
		t.Errorf("Trials = %d rows, %v; want only the seed", len(ts), err)
	}
	as, err := s.Attempts(ctx, trialID)
	if err != nil || len(as) != 0 {
		t.Errorf("Attempts = %d rows, %v; want none", len(as), err)
	}
	if ms := metricsOf(t, s, trialID); len(ms) != 0 {
		t.Errorf("Metrics = %d rows; want none", len(ms))
	}
	evs, err := s.Events(ctx, store.EventFilter{})
	if err != nil || len(evs) != 0 {
		t.Errorf("Events = %d rows, %v; want none", len(evs), err)
	}
	cks, err := s.Checkpoints(ctx, trialID)
	if err != nil || len(cks) != 0 {
		t.Errorf("Checkpoints = %d rows, %v; want none", len(cks), err)
	}
}

func testMissingParent(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, ts := seed(t, s, 1)
	err := s.Apply(ctx, &store.Batch{Trials: []*virga.Trial{newTrial(424242, 1)}})
	wantErr(t, "trial of a missing experiment", err, virga.ErrNotFound)
	err = s.Apply(ctx, &store.Batch{Attempts: []*virga.Attempt{newAttempt(424242, 1)}})
	wantErr(t, "attempt of a missing trial", err, virga.ErrNotFound)
	err = s.Apply(ctx, &store.Batch{Metrics: []virga.Metric{{TrialID: 424242, Step: 1}}})
	wantErr(t, "metric of a missing trial", err, virga.ErrNotFound)
	err = s.Apply(ctx, &store.Batch{Checkpoints: []virga.Checkpoint{{TrialID: 424242, ID: "c"}}})
	wantErr(t, "checkpoint of a missing trial", err, virga.ErrNotFound)
	if as, _ := s.Attempts(ctx, ts[0].ID); len(as) != 0 {
		t.Errorf("attempts stored after failures: %v", as)
	}
}

func testDuplicateKeys(t *testing.T, s store.Store) {
	ctx := context.Background()
	e, ts := seed(t, s, 1)
	err := s.Apply(ctx, &store.Batch{Trials: []*virga.Trial{newTrial(e.ID, 1)}})
	wantErr(t, "a second trial with the same seq", err, virga.ErrConflict)
	apply(t, s, &store.Batch{Attempts: []*virga.Attempt{newAttempt(ts[0].ID, 1)}})
	err = s.Apply(ctx, &store.Batch{Attempts: []*virga.Attempt{newAttempt(ts[0].ID, 1)}})
	wantErr(t, "a second attempt with the same number", err, virga.ErrConflict)
}

func testBatchAtomicity(t *testing.T, s store.Store) {
	ctx := context.Background()
	e, ts := seed(t, s, 1)
	// Many good rows of every kind, then a bad metric (its trial is missing).
	b := &store.Batch{
		Experiments: []*virga.Experiment{newExperiment("a"), newExperiment("b")},
		Trials:      []*virga.Trial{newTrial(e.ID, 2), newTrial(e.ID, 3)},
		Attempts:    []*virga.Attempt{newAttempt(ts[0].ID, 1)},
		Checkpoints: []virga.Checkpoint{{TrialID: ts[0].ID, ID: "ck", Time: at(0)}},
		Events:      []*virga.Event{{ExperimentID: e.ID, Kind: "k"}},
	}
	for i := range 100 {
		b.Metrics = append(b.Metrics, virga.Metric{TrialID: ts[0].ID, Step: int64(i), Values: map[string]float64{"l": 1}})
	}
	b.Metrics = append(b.Metrics, virga.Metric{TrialID: 999999, Step: 1})
	if err := s.Apply(ctx, b); err == nil {
		t.Fatal("Apply of a batch with a metric of a missing trial succeeded")
	}
	assertOnlySeed(t, s, e.ID, ts[0].ID)
	// The same batch without the bad row then goes in whole.
	b.Metrics = b.Metrics[:100]
	apply(t, s, b)
	if ms := metricsOf(t, s, ts[0].ID); len(ms) != 100 {
		t.Errorf("Metrics = %d rows after the good batch, want 100", len(ms))
	}
}

func testMetricUpsert(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, ts := seed(t, s, 2)
	tid := ts[0].ID
	var want []virga.Metric
	for step := int64(0); step < 5; step++ {
		want = append(want, virga.Metric{TrialID: tid, AttemptID: 1, Step: step,
			Values: map[string]float64{"loss": 1 / float64(step+1), "acc": float64(step) / 10}, Time: at(time.Duration(step))})
	}
	apply(t, s, &store.Batch{Metrics: want})
	// Another trial's metric at the same step is separate.
	apply(t, s, &store.Batch{Metrics: []virga.Metric{{TrialID: ts[1].ID, Step: 2, Values: map[string]float64{"loss": 9}}}})
	// A later report of step 2 replaces it; within one batch the last one wins.
	re := virga.Metric{TrialID: tid, AttemptID: 2, Step: 2, Values: map[string]float64{"loss": 0.5}, Time: at(time.Hour)}
	apply(t, s, &store.Batch{Metrics: []virga.Metric{
		{TrialID: tid, AttemptID: 2, Step: 2, Values: map[string]float64{"loss": 123}}, re,
	}})
	want[2] = re
	diff(t, "metrics after upsert", want, metricsOf(t, s, tid))
	if ms := metricsOf(t, s, ts[1].ID); len(ms) != 1 || ms[0].Values["loss"] != 9 {
		t.Errorf("other trial's metrics = %v, want its one step-2 row", ms)
	}

	for _, tc := range []struct {
		f    store.MetricFilter
		want []virga.Metric
	}{
		{store.MetricFilter{TrialID: tid, AfterStep: 0}, want[1:]},
		{store.MetricFilter{TrialID: tid, AfterStep: 2}, want[3:]},
		{store.MetricFilter{TrialID: tid, AfterStep: -1, Limit: 2}, want[:2]},
		{store.MetricFilter{TrialID: tid, AfterStep: 1, Limit: 2}, want[2:4]},
		{store.MetricFilter{TrialID: tid, AfterStep: 4}, nil},
	} {
		got, err := s.Metrics(ctx, tc.f)
		if err != nil {
			t.Fatalf("Metrics(%+v): %v", tc.f, err)
		}
		diff(t, fmt.Sprintf("Metrics(%+v)", tc.f), tc.want, got)
	}
}

// testMetricUpsertMany stores many metrics of several trials in many small
// batches, as reports arrive, then reports again steps stored long before
// and just before, and checks every window of reads: enough rows that a
// store which keeps recent metrics apart from older ones (SQLite's
// metric_log) has moved some but not all of them, so reads and replacements
// straddle that boundary.
func testMetricUpsertMany(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, ts := seed(t, s, 4)
	const steps = 2512 // per trial, a multiple of 16: 10,048 metrics in all
	want := make(map[int64][]virga.Metric)
	metric := func(tid, step int64, v float64) virga.Metric {
		return virga.Metric{TrialID: tid, AttemptID: 1, Step: step, Values: map[string]float64{"loss": v},
			Time: at(time.Duration(step) * time.Millisecond)}
	}
	// One metric per trial per batch, steps in order, 16 steps a batch.
	for step := int64(0); step < steps; step += 16 {
		var b store.Batch
		for i := range int64(16) {
			for _, tr := range ts {
				m := metric(tr.ID, step+i, float64(step+i))
				b.Metrics = append(b.Metrics, m)
				want[tr.ID] = append(want[tr.ID], m)
			}
		}
		apply(t, s, &b)
	}
	// Replace steps of the first trial: the oldest, some in the middle, the
	// newest; one of them twice in a batch (the last wins), and one again
	// in a later batch.
	tid := ts[0].ID
	for i, steps := range [][]int64{{0, 1, 1000, steps - 1}, {1, 2, steps - 2, 0}, {1}} {
		var b store.Batch
		for _, step := range steps {
			m := metric(tid, step, -float64(100*i)-float64(step))
			m.AttemptID = int64(2 + i)
			b.Metrics = append(b.Metrics, m)
			want[tid][step] = m
		}
		apply(t, s, &b)
	}
	for _, tr := range ts {
		diff(t, fmt.Sprintf("metrics of trial %d", tr.ID), want[tr.ID], metricsOf(t, s, tr.ID))
	}
	w := want[tid]
	for _, tc := range []struct {
		f    store.MetricFilter
		want []virga.Metric
	}{
		{store.MetricFilter{TrialID: tid, AfterStep: -1, Limit: 3}, w[:3]},
		{store.MetricFilter{TrialID: tid, AfterStep: 0, Limit: 2}, w[1:3]},
		{store.MetricFilter{TrialID: tid, AfterStep: 998, Limit: 3}, w[999:1002]},
		{store.MetricFilter{TrialID: tid, AfterStep: steps - 4}, w[steps-3:]},
		{store.MetricFilter{TrialID: tid, AfterStep: 1500, Limit: 2000}, w[1501:]},
		{store.MetricFilter{TrialID: tid, AfterStep: steps - 1}, nil},
	} {
		got, err := s.Metrics(ctx, tc.f)
		if err != nil {
			t.Fatalf("Metrics(%+v): %v", tc.f, err)
		}
		diff(t, fmt.Sprintf("Metrics(%+v)", tc.f), tc.want, got)
	}
}

func testMetricValues(t *testing.T, s store.Store) {
	_, ts := seed(t, s, 1)
	want := []virga.Metric{
		{TrialID: ts[0].ID, Step: 1, Values: map[string]float64{
			"nan": math.NaN(), "inf": math.Inf(1), "-inf": math.Inf(-1), "tiny": 5e-324, "max": math.MaxFloat64,
			"neg": -0.1, "int": 3, "unicode ✓": 1,
		}, Time: at(0)},
		{TrialID: ts[0].ID, Step: 2, Values: map[string]float64{}},
		{TrialID: ts[0].ID, Step: 3},
	}
	apply(t, s, &store.Batch{Metrics: want})
	got := metricsOf(t, s, ts[0].ID)
	diff(t, "metric values", want, got)
	if len(got) == 3 && (got[1].Values == nil || got[2].Values != nil) {
		t.Errorf("Values: got %#v and %#v, want an empty map and nil", got[1].Values, got[2].Values)
	}
}

func testCheckpoints(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, ts := seed(t, s, 2)
	tid := ts[0].ID
	c1 := virga.Checkpoint{TrialID: tid, ID: "c1", AttemptID: 1, Step: 100, Size: 1 << 33, Files: 3, Time: at(time.Second)}
	c2 := virga.Checkpoint{TrialID: tid, ID: "c2", AttemptID: 1, Step: 200, Size: 10, Files: 1, Time: at(2 * time.Second)}
	c0 := virga.Checkpoint{TrialID: tid, ID: "c0", AttemptID: 1, Step: 50, Size: 5, Files: 1, Time: at(0)}
	other := virga.Checkpoint{TrialID: ts[1].ID, ID: "c1", Step: 7, Time: at(0)} // same ID, other trial
	apply(t, s, &store.Batch{Checkpoints: []virga.Checkpoint{c1, c2, other}})
	apply(t, s, &store.Batch{Checkpoints: []virga.Checkpoint{c0}})
	// A repeat is ignored: the first record stays.
	dup := c1
	dup.Step, dup.Time = 999, at(time.Hour)
	apply(t, s, &store.Batch{Checkpoints: []virga.Checkpoint{dup}})

	got, err := s.Checkpoints(ctx, tid)
	if err != nil {
		t.Fatalf("Checkpoints: %v", err)
	}
	diff(t, "checkpoints, oldest first", []virga.Checkpoint{c0, c1, c2}, got)

	// Delete one (and a missing one, which is no error).
	apply(t, s, &store.Batch{DeleteCheckpoints: []store.CheckpointRef{{TrialID: tid, ID: "c1"}, {TrialID: tid, ID: "nope"}}})
	got, err = s.Checkpoints(ctx, tid)
	if err != nil {
		t.Fatalf("Checkpoints: %v", err)
	}
	diff(t, "checkpoints after delete", []virga.Checkpoint{c0, c2}, got)
	got, err = s.Checkpoints(ctx, ts[1].ID)
	if err != nil {
		t.Fatalf("Checkpoints: %v", err)
	}
	diff(t, "other trial's checkpoints", []virga.Checkpoint{other}, got)

	// Deleted, a checkpoint ID may be recorded again.
	c1.Step = 300
	apply(t, s, &store.Batch{Checkpoints: []virga.Checkpoint{c1}})
	got, err = s.Checkpoints(ctx, tid)
	if err != nil {
		t.Fatalf("Checkpoints: %v", err)
	}
	diff(t, "checkpoints after re-insert", []virga.Checkpoint{c0, c1, c2}, got)
}

func testExperimentList(t *testing.T, s store.Store) {
	ctx := context.Background()
	states := []virga.ExperimentState{virga.ExperimentActive, virga.ExperimentCompleted, virga.ExperimentPaused,
		virga.ExperimentActive, virga.ExperimentFailed}
	var es []*virga.Experiment
	for i, st := range states {
		e := newExperiment(fmt.Sprintf("e%d", i))
		e.State = st
		es = append(es, e)
	}
	apply(t, s, &store.Batch{Experiments: es})
	ids := func(xs []*virga.Experiment) []int64 {
		var out []int64
		for _, x := range xs {
			out = append(out, x.ID)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		f    store.ExperimentFilter
		want []*virga.Experiment
	}{
		{"all", store.ExperimentFilter{}, []*virga.Experiment{es[4], es[3], es[2], es[1], es[0]}},
		{"limit", store.ExperimentFilter{Limit: 2}, []*virga.Experiment{es[4], es[3]}},
		{"one state", store.ExperimentFilter{States: []virga.ExperimentState{virga.ExperimentActive}},
			[]*virga.Experiment{es[3], es[0]}},
		{"states and limit", store.ExperimentFilter{
			States: []virga.ExperimentState{virga.ExperimentPaused, virga.ExperimentCompleted, virga.ExperimentActive},
			Limit:  3}, []*virga.Experiment{es[3], es[2], es[1]}},
		{"no match", store.ExperimentFilter{States: []virga.ExperimentState{virga.ExperimentStopping}}, nil},
	} {
		got, err := s.Experiments(ctx, tc.f)
		if err != nil {
			t.Fatalf("Experiments(%s): %v", tc.name, err)
		}
		diff(t, "Experiments("+tc.name+") IDs", ids(tc.want), ids(got))
		diff(t, "Experiments("+tc.name+")", tc.want, got)
	}
}

func testTrialAndAttemptLists(t *testing.T, s store.Store) {
	ctx := context.Background()
	e, _ := seed(t, s, 0)
	e2, _ := seed(t, s, 0)
	// Inserted out of order: listed by Seq.
	ts := []*virga.Trial{newTrial(e.ID, 3), newTrial(e.ID, 1), newTrial(e.ID, 2), newTrial(e2.ID, 1)}
	apply(t, s, &store.Batch{Trials: ts})
	got, err := s.Trials(ctx, e.ID)
	if err != nil {
		t.Fatalf("Trials: %v", err)
	}
	diff(t, "trials by seq", []*virga.Trial{ts[1], ts[2], ts[0]}, got)

	// Attempts: inserted out of order, listed by Number; live ones by ID.
	a3, a1, a2 := newAttempt(ts[0].ID, 3), newAttempt(ts[0].ID, 1), newAttempt(ts[0].ID, 2)
	b1 := newAttempt(ts[1].ID, 1)
	a1.State, a2.State, a3.State, b1.State = virga.AttemptExited, virga.AttemptExited, virga.AttemptRunning, virga.AttemptStarting
	apply(t, s, &store.Batch{Attempts: []*virga.Attempt{a3, a1, b1, a2}})
	as, err := s.Attempts(ctx, ts[0].ID)
	if err != nil {
		t.Fatalf("Attempts: %v", err)
	}
	diff(t, "attempts by number", []*virga.Attempt{a1, a2, a3}, as)
	live, err := s.LiveAttempts(ctx)
	if err != nil {
		t.Fatalf("LiveAttempts: %v", err)
	}
	diff(t, "live attempts", []*virga.Attempt{a3, b1}, live)

	// An attempt that exits leaves the live list.
	a3.State, a3.Outcome, a3.ExitCode, a3.EndedAt = virga.AttemptExited, virga.OutcomeSucceeded, ptr(0), at(time.Hour)
	apply(t, s, &store.Batch{Attempts: []*virga.Attempt{a3}})
	live, err = s.LiveAttempts(ctx)
	if err != nil {
		t.Fatalf("LiveAttempts: %v", err)
	}
	diff(t, "live attempts after exit", []*virga.Attempt{b1}, live)
}

func testEvents(t *testing.T, s store.Store) {
	ctx := context.Background()
	var evs []*virga.Event
	for i := range 10 {
		evs = append(evs, &virga.Event{ExperimentID: int64(1 + i%2), TrialID: int64(i % 3), AttemptID: int64(i),
			Kind: virga.EventKind(fmt.Sprintf("k%d", i)), Message: "m", Time: at(time.Duration(i) * time.Microsecond)})
	}
	apply(t, s, &store.Batch{Events: evs[:5]})
	apply(t, s, &store.Batch{Events: evs[5:]})
	for i := 1; i < len(evs); i++ {
		if evs[i].ID <= evs[i-1].ID {
			t.Fatalf("event IDs not increasing: %d then %d", evs[i-1].ID, evs[i].ID)
		}
	}
	pick := func(idx ...int) []virga.Event {
		var out []virga.Event
		for _, i := range idx {
			out = append(out, *evs[i])
		}
		return out
	}
	for _, tc := range []struct {
		name string
		f    store.EventFilter
		want []virga.Event
	}{
		{"all", store.EventFilter{}, pick(0, 1, 2, 3, 4, 5, 6, 7, 8, 9)},
		{"experiment", store.EventFilter{ExperimentID: 2}, pick(1, 3, 5, 7, 9)},
		{"trial", store.EventFilter{TrialID: 1}, pick(1, 4, 7)},
		{"experiment and trial", store.EventFilter{ExperimentID: 1, TrialID: 2}, pick(2, 8)},
		{"after", store.EventFilter{AfterID: evs[6].ID}, pick(7, 8, 9)},
		{"after and limit", store.EventFilter{ExperimentID: 1, AfterID: evs[2].ID, Limit: 2}, pick(4, 6)},
		{"limit", store.EventFilter{Limit: 1}, pick(0)},
	} {
		got, err := s.Events(ctx, tc.f)
		if err != nil {
			t.Fatalf("Events(%s): %v", tc.name, err)
		}
		diff(t, "Events("+tc.name+")", tc.want, got)
	}
}

// testEventReplace replaces an event with one of another experiment and
// trial: it is listed under the new ones, in ID order, and no longer under
// the old.
func testEventReplace(t *testing.T, s store.Store) {
	ctx := context.Background()
	var evs []*virga.Event
	for i := range 4 {
		evs = append(evs, &virga.Event{ExperimentID: 1, TrialID: 10, Kind: virga.EventKind(fmt.Sprintf("k%d", i)), Time: at(0)})
	}
	evs = append(evs, &virga.Event{ExperimentID: 2, TrialID: 20, Kind: "k4", Time: at(0)})
	apply(t, s, &store.Batch{Events: evs})
	moved := *evs[1]
	moved.ExperimentID, moved.TrialID, moved.Message = 2, 20, "moved"
	apply(t, s, &store.Batch{Events: []*virga.Event{&moved}})
	pick := func(es ...*virga.Event) []virga.Event {
		var out []virga.Event
		for _, e := range es {
			out = append(out, *e)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		f    store.EventFilter
		want []virga.Event
	}{
		{"old experiment", store.EventFilter{ExperimentID: 1}, pick(evs[0], evs[2], evs[3])},
		{"old trial", store.EventFilter{TrialID: 10}, pick(evs[0], evs[2], evs[3])},
		{"new experiment", store.EventFilter{ExperimentID: 2}, pick(&moved, evs[4])},
		{"new trial after", store.EventFilter{TrialID: 20, AfterID: evs[0].ID}, pick(&moved, evs[4])},
		{"new experiment and trial, limit", store.EventFilter{ExperimentID: 2, TrialID: 20, Limit: 1}, pick(&moved)},
		{"all", store.EventFilter{}, pick(evs[0], &moved, evs[2], evs[3], evs[4])},
	} {
		got, err := s.Events(ctx, tc.f)
		if err != nil {
			t.Fatalf("Events(%s): %v", tc.name, err)
		}
		diff(t, "Events("+tc.name+")", tc.want, got)
	}
}

// testFailedBatchRestoresRows fails a batch that changes rows of every kind
// in place (replaces, deletes, inserts between stored rows, an attempt
// leaving the live list, an event moving to another experiment) and checks
// that every read is as before it.
func testFailedBatchRestoresRows(t *testing.T, s store.Store) {
	ctx := context.Background()
	e, ts := seed(t, s, 1)
	tr := ts[0]
	a := newAttempt(tr.ID, 1)
	a.State = virga.AttemptRunning
	var ms []virga.Metric
	for _, step := range []int64{0, 2, 4} {
		ms = append(ms, virga.Metric{TrialID: tr.ID, AttemptID: 1, Step: step, Values: map[string]float64{"loss": float64(step)}, Time: at(0)})
	}
	ck := virga.Checkpoint{TrialID: tr.ID, ID: "c1", Step: 2, Time: at(time.Second)}
	ev := &virga.Event{ExperimentID: e.ID, TrialID: tr.ID, Kind: "k", Time: at(0)}
	apply(t, s, &store.Batch{Attempts: []*virga.Attempt{a}, Metrics: ms, Checkpoints: []virga.Checkpoint{ck},
		Events: []*virga.Event{ev}})
	read := func() []any {
		t.Helper()
		var out []any
		for _, r := range []func() (any, error){
			func() (any, error) { return s.Trials(ctx, e.ID) },
			func() (any, error) { return s.Attempts(ctx, tr.ID) },
			func() (any, error) { return s.LiveAttempts(ctx) },
			func() (any, error) { return s.ExperimentAttempts(ctx, e.ID) },
			func() (any, error) { return s.Metrics(ctx, store.MetricFilter{TrialID: tr.ID, AfterStep: -1}) },
			func() (any, error) { return s.Checkpoints(ctx, tr.ID) },
			func() (any, error) { return s.Events(ctx, store.EventFilter{ExperimentID: e.ID}) },
			func() (any, error) { return s.Events(ctx, store.EventFilter{ExperimentID: e.ID + 1}) },
			func() (any, error) { return s.Events(ctx, store.EventFilter{TrialID: tr.ID}) },
		} {
			v, err := r()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, v)
		}
		return out
	}
	before := read()

	upd, exited, moved := *tr, *a, *ev
	upd.Step, upd.State = 99, virga.TrialRunning
	exited.State, exited.Outcome = virga.AttemptExited, virga.OutcomeFailed
	moved.ExperimentID, moved.TrialID = e.ID+1, tr.ID+1
	err := s.Apply(ctx, &store.Batch{
		Trials:   []*virga.Trial{&upd, newTrial(e.ID, 2)},
		Attempts: []*virga.Attempt{&exited, newAttempt(tr.ID, 2)},
		Checkpoints: []virga.Checkpoint{{TrialID: tr.ID, ID: "c0", Time: at(0)},
			{TrialID: tr.ID, ID: "c2", Time: at(time.Hour)}},
		DeleteCheckpoints: []store.CheckpointRef{{TrialID: tr.ID, ID: "c1"}},
		Metrics: []virga.Metric{
			{TrialID: tr.ID, Step: 2, Values: map[string]float64{"loss": -1}}, // replaces
			{TrialID: tr.ID, Step: 1, Values: map[string]float64{"loss": -1}}, // between
			{TrialID: tr.ID, Step: 9, Values: map[string]float64{"loss": -1}}, // after
			{TrialID: 424242, Step: 1},                                        // fails the batch
		},
		Events: []*virga.Event{&moved},
	})
	wantErr(t, "Apply(metric of a missing trial)", err, virga.ErrNotFound)
	diff(t, "reads after a failed batch", before, read())
}

// testValuesAreNotShared changes the values given to Apply after it returns
// and the values read back: neither changes what is stored.
func testValuesAreNotShared(t *testing.T, s store.Store) {
	ctx := context.Background()
	e := newExperiment("mine")
	apply(t, s, &store.Batch{Experiments: []*virga.Experiment{e}})
	tr := newTrial(e.ID, 1)
	tr.HParams = map[string]any{"lr": 0.1, "layers": []any{64.0, 32.0}, "opt": map[string]any{"name": "adam"}}
	tr.Latest, tr.Prediction = ptr(0.5), &virga.Prediction{Step: 1, Horizon: 10, Mean: 0.4}
	apply(t, s, &store.Batch{Trials: []*virga.Trial{tr}})
	a := newAttempt(tr.ID, 1)
	a.ExitCode = ptr(3)
	m := virga.Metric{TrialID: tr.ID, Step: 1, Values: map[string]float64{"loss": 1}, Time: at(0)}
	apply(t, s, &store.Batch{Attempts: []*virga.Attempt{a}, Metrics: []virga.Metric{m}})
	wantE, wantT, wantA := *e, *tr, *a
	wantT.HParams = map[string]any{"lr": 0.1, "layers": []any{64.0, 32.0}, "opt": map[string]any{"name": "adam"}}
	wantT.Latest, wantT.Prediction, wantA.ExitCode = ptr(0.5), &virga.Prediction{Step: 1, Horizon: 10, Mean: 0.4}, ptr(3)
	wantE.Spec = []byte(string(e.Spec))
	wantM := []virga.Metric{{TrialID: tr.ID, Step: 1, Values: map[string]float64{"loss": 1}, Time: at(0)}}

	scribble := func(e *virga.Experiment, tr *virga.Trial, a *virga.Attempt, ms []virga.Metric) {
		e.Spec[0] = 'X'
		tr.HParams["lr"], tr.HParams["layers"].([]any)[0] = 9.0, 9.0
		tr.HParams["opt"].(map[string]any)["name"] = "sgd"
		*tr.Latest, tr.Prediction.Mean, *a.ExitCode = 9, 9, 9
		for _, m := range ms {
			m.Values["loss"] = 9
		}
	}
	scribble(e, tr, a, []virga.Metric{m})
	for round := range 2 {
		ge, err := s.Experiment(ctx, e.ID)
		if err != nil {
			t.Fatal(err)
		}
		gt, err := s.Trial(ctx, tr.ID)
		if err != nil {
			t.Fatal(err)
		}
		gts, err := s.Trials(ctx, e.ID)
		if err != nil {
			t.Fatal(err)
		}
		ga, err := s.Attempt(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		gm := metricsOf(t, s, tr.ID)
		diff(t, fmt.Sprintf("round %d: experiment", round), &wantE, ge)
		diff(t, fmt.Sprintf("round %d: trial", round), &wantT, gt)
		diff(t, fmt.Sprintf("round %d: trials", round), []*virga.Trial{&wantT}, gts)
		diff(t, fmt.Sprintf("round %d: attempt", round), &wantA, ga)
		diff(t, fmt.Sprintf("round %d: metrics", round), wantM, gm)
		// Then scribble on what was read, and read again.
		scribble(ge, gt, ga, gm)
		scribble(ge, gts[0], ga, gm)
	}
}

func testTokens(t *testing.T, s store.Store) {
	ctx := context.Background()
	tok := &store.Token{Name: "admin", Hash: []byte("0123456789abcdef0123456789abcdef"), CreatedAt: at(0)}
	if err := s.PutToken(ctx, tok); err != nil {
		t.Fatalf("PutToken: %v", err)
	}
	if tok.ID == 0 {
		t.Fatal("PutToken left ID at 0")
	}
	other := &store.Token{Name: "trial-1", Hash: []byte("other"), CreatedAt: at(time.Second)}
	if err := s.PutToken(ctx, other); err != nil {
		t.Fatalf("PutToken: %v", err)
	}
	got, err := s.TokenByHash(ctx, tok.Hash)
	if err != nil {
		t.Fatalf("TokenByHash: %v", err)
	}
	diff(t, "token", tok, got)

	dup := &store.Token{Name: "dup", Hash: tok.Hash}
	wantErr(t, "PutToken(duplicate hash)", s.PutToken(ctx, dup), virga.ErrConflict)
	if dup.ID != 0 {
		t.Errorf("failed PutToken set ID %d", dup.ID)
	}
	wantErr(t, "PutToken(missing ID)", s.PutToken(ctx, &store.Token{ID: 9999, Name: "x", Hash: []byte("x")}), virga.ErrNotFound)

	// Update: rename and rotate the hash; the old hash no longer finds it.
	tok.Name, tok.Hash = "admin-2", []byte("rotated")
	if err := s.PutToken(ctx, tok); err != nil {
		t.Fatalf("PutToken(update): %v", err)
	}
	got, err = s.TokenByHash(ctx, []byte("rotated"))
	if err != nil {
		t.Fatalf("TokenByHash: %v", err)
	}
	diff(t, "updated token", tok, got)
	_, err = s.TokenByHash(ctx, []byte("0123456789abcdef0123456789abcdef"))
	wantErr(t, "TokenByHash(old hash)", err, virga.ErrNotFound)
}

func testConcurrent(t *testing.T, s store.Store) {
	ctx := context.Background()
	e, ts := seed(t, s, 4)
	const batches = 15
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	stop := make(chan struct{})
	// One writer per trial: metrics, an event and a trial update per batch.
	for w, tr := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range batches {
				upd := *tr
				upd.Step = int64(i)
				b := &store.Batch{Trials: []*virga.Trial{&upd}, Events: []*virga.Event{{ExperimentID: e.ID, TrialID: tr.ID, Kind: "k"}}}
				for j := range 4 {
					b.Metrics = append(b.Metrics, virga.Metric{TrialID: tr.ID, Step: int64(i*4 + j), AttemptID: int64(w),
						Values: map[string]float64{"loss": float64(i)}})
				}
				if err := s.Apply(ctx, b); err != nil {
					errs <- fmt.Errorf("writer %d batch %d: %w", w, i, err)
					return
				}
			}
		}()
	}
	// Readers, while the writers run.
	var rwg sync.WaitGroup
	for r := range 2 {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Trials(ctx, e.ID); err != nil {
					errs <- fmt.Errorf("reader %d: %w", r, err)
					return
				}
				if _, err := s.Metrics(ctx, store.MetricFilter{TrialID: ts[r].ID, AfterStep: -1}); err != nil {
					errs <- fmt.Errorf("reader %d: %w", r, err)
					return
				}
				if _, err := s.Events(ctx, store.EventFilter{ExperimentID: e.ID}); err != nil {
					errs <- fmt.Errorf("reader %d: %w", r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	rwg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, tr := range ts {
		if ms := metricsOf(t, s, tr.ID); len(ms) != batches*4 {
			t.Errorf("trial %d: %d metrics, want %d", tr.ID, len(ms), batches*4)
		}
		got, err := s.Trial(ctx, tr.ID)
		if err != nil || got.Step != batches-1 {
			t.Errorf("trial %d: step %v, %v; want %d", tr.ID, got, err, batches-1)
		}
	}
	evs, err := s.Events(ctx, store.EventFilter{ExperimentID: e.ID})
	if err != nil || len(evs) != len(ts)*batches {
		t.Errorf("events: %d, %v; want %d", len(evs), err, len(ts)*batches)
	}
}

func testLargeBatch(t *testing.T, s store.Store) {
	_, ts := seed(t, s, 1)
	const n = 5000
	ms := make([]virga.Metric, n)
	for i := range ms {
		ms[i] = virga.Metric{TrialID: ts[0].ID, AttemptID: 1, Step: int64(i),
			Values: map[string]float64{"loss": 1 / float64(i+1), "acc": float64(i) / n}, Time: at(time.Duration(i))}
	}
	evs := make([]*virga.Event, 500)
	for i := range evs {
		evs[i] = &virga.Event{ExperimentID: ts[0].ExperimentID, TrialID: ts[0].ID, Kind: "report"}
	}
	apply(t, s, &store.Batch{Metrics: ms, Events: evs})
	diff(t, "5000 metrics", ms, metricsOf(t, s, ts[0].ID))
	for i, e := range evs {
		if e.ID == 0 {
			t.Fatalf("event %d: ID not set", i)
		}
	}
}

func testReopen(t *testing.T, s store.Store, reopen func(t *testing.T, s store.Store) store.Store) {
	ctx := context.Background()
	e, ts := seed(t, s, 2)
	a := newAttempt(ts[0].ID, 1)
	a.State, a.Outcome, a.Pool, a.Cost, a.LostCost = virga.AttemptExited, virga.OutcomePreempted, "spot", 4.25, 1.5
	// A third trial continues from the first; the second gets a prediction.
	t3 := newTrial(e.ID, 3)
	t3.Parent, t3.ParentCheckpoint, t3.ParentStep = ts[0].ID, "ck", 3
	ts[1].Prediction = &virga.Prediction{Step: 5, Horizon: 50, Mean: 0.5, Std: 0.125, ProbBetter: 0.25}
	apply(t, s, &store.Batch{Trials: []*virga.Trial{ts[1], t3}})
	ts = append(ts, t3)
	ck := virga.Checkpoint{TrialID: ts[0].ID, ID: "ck", Step: 3, Time: at(0)}
	m := virga.Metric{TrialID: ts[0].ID, Step: 3, Values: map[string]float64{"loss": 0.5}, Time: at(1)}
	ev := &virga.Event{ExperimentID: e.ID, Kind: "k", Time: at(2)}
	tok := &store.Token{Name: "t", Hash: []byte("h"), CreatedAt: at(3)}
	apply(t, s, &store.Batch{Attempts: []*virga.Attempt{a}, Checkpoints: []virga.Checkpoint{ck},
		Metrics: []virga.Metric{m}, Events: []*virga.Event{ev}})
	if err := s.PutToken(ctx, tok); err != nil {
		t.Fatalf("PutToken: %v", err)
	}
	v1, err := s.SchemaVersion(ctx)
	if err != nil {
		t.Fatalf("SchemaVersion: %v", err)
	}

	s = reopen(t, s)
	if v2, err := s.SchemaVersion(ctx); err != nil || v2 != v1 {
		t.Errorf("SchemaVersion after reopen = %d, %v; want %d", v2, err, v1)
	}
	gotE, err := s.Experiment(ctx, e.ID)
	if err != nil {
		t.Fatalf("Experiment: %v", err)
	}
	diff(t, "experiment after reopen", e, gotE)
	gotTs, err := s.Trials(ctx, e.ID)
	if err != nil {
		t.Fatalf("Trials: %v", err)
	}
	diff(t, "trials after reopen", ts, gotTs)
	gotAs, err := s.Attempts(ctx, ts[0].ID)
	if err != nil {
		t.Fatalf("Attempts: %v", err)
	}
	diff(t, "attempts after reopen", []*virga.Attempt{a}, gotAs)
	gotAs, err = s.ExperimentAttempts(ctx, e.ID)
	if err != nil {
		t.Fatalf("ExperimentAttempts: %v", err)
	}
	diff(t, "attempts of the experiment after reopen", []*virga.Attempt{a}, gotAs)
	gotCk, err := s.Checkpoints(ctx, ts[0].ID)
	if err != nil {
		t.Fatalf("Checkpoints: %v", err)
	}
	diff(t, "checkpoints after reopen", []virga.Checkpoint{ck}, gotCk)
	diff(t, "metrics after reopen", []virga.Metric{m}, metricsOf(t, s, ts[0].ID))
	gotEv, err := s.Events(ctx, store.EventFilter{})
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	diff(t, "events after reopen", []virga.Event{*ev}, gotEv)
	gotTok, err := s.TokenByHash(ctx, []byte("h"))
	if err != nil {
		t.Fatalf("TokenByHash: %v", err)
	}
	diff(t, "token after reopen", tok, gotTok)

	// New rows after reopen get fresh IDs.
	e2 := newExperiment("after")
	apply(t, s, &store.Batch{Experiments: []*virga.Experiment{e2}})
	if e2.ID <= e.ID {
		t.Errorf("experiment inserted after reopen got ID %d, want > %d", e2.ID, e.ID)
	}
}
