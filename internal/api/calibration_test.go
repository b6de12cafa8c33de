package api

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/client"
	"github.com/virga-ml/virga/internal/clock"
	"github.com/virga-ml/virga/internal/forecast"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/sqlite"
)

// TestCalibrationPairs: every completed experiment submitted with an
// estimate is a pair of that estimate's plan (Virga's) and what the run
// took (submission to end, the sum of its attempts' costs); one without an
// estimate, a stopped one, one paused on the way and an active one are not;
// name= keeps one name's.
func TestCalibrationPairs(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "virga.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const est = `{"plans":[{"plan":"on-demand","wall":3600000000000,"wall_p50":3500000000000,"cost":9},` +
		`{"plan":"virga","wall":5400000000000,"wall_p10":3600000000000,"wall_p50":5000000000000,"wall_p90":7200000000000,"cost":4,"cost_p50":3.5}],` +
		`"calibration":{"median":1.25}}`
	add := func(name string, state virga.ExperimentState, took time.Duration, estimate string, costs ...float64) *virga.Experiment {
		t.Helper()
		spec := "name: " + name + "\nentrypoint: [python, train.py]\nobjective: {metric: loss, direction: minimize}\n"
		e := &virga.Experiment{Name: name, State: state, Spec: []byte(spec), SpecFile: name + ".yaml", CreatedAt: t0, UpdatedAt: t0}
		if state != virga.ExperimentActive {
			e.EndedAt = t0.Add(took)
		}
		b := &store.Batch{Experiments: []*virga.Experiment{e}}
		if estimate != "" {
			b.NewExperimentEvents = []store.NewExperimentEvent{{Experiment: e, Event: &virga.Event{Kind: virga.EventExperimentEstimate, Message: estimate, Time: t0}}}
		}
		if err := st.Apply(ctx, b); err != nil {
			t.Fatal(err)
		}
		tr := &virga.Trial{ExperimentID: e.ID, Seq: 1, State: virga.TrialCompleted, CreatedAt: t0}
		if err := st.Apply(ctx, &store.Batch{Trials: []*virga.Trial{tr}}); err != nil {
			t.Fatal(err)
		}
		for i, c := range costs {
			a := &virga.Attempt{TrialID: tr.ID, Number: i + 1, State: virga.AttemptExited, Backend: "local", Cost: c, CreatedAt: t0, EndedAt: t0.Add(took)}
			if err := st.Apply(ctx, &store.Batch{Attempts: []*virga.Attempt{a}}); err != nil {
				t.Fatal(err)
			}
		}
		return e
	}
	done := add("mnist", virga.ExperimentCompleted, 100*time.Minute, est, 1.5, 2)
	add("mnist", virga.ExperimentCompleted, time.Hour, "", 1)              // no estimate
	add("mnist", virga.ExperimentStopped, time.Hour, est, 1)               // stopped: not the whole run
	add("mnist", virga.ExperimentActive, 0, est)                           // still running
	paused := add("mnist", virga.ExperimentCompleted, 5*time.Hour, est, 1) // paused on the way
	if err := st.Apply(ctx, &store.Batch{Events: []*virga.Event{{ExperimentID: paused.ID, Kind: virga.EventExperimentPause, Message: "user request", Time: t0}}}); err != nil {
		t.Fatal(err)
	}
	other := add("cifar", virga.ExperimentCompleted, 2*time.Hour, est, 10) // another name

	// A read-only API (no controller) over the store, as the CLI runs it.
	srv := httptest.NewServer(New(Config{Store: st, Clock: clock.NewFake(t0.Add(3 * time.Hour))}))
	t.Cleanup(srv.Close)
	c := client.New(srv.URL, "")
	wantPair := func(e *virga.Experiment, wall time.Duration, cost float64) forecast.Pair {
		return forecast.Pair{ExperimentID: e.ID, Name: e.Name, Entrypoint: []string{"python", "train.py"}, EndedAt: e.EndedAt,
			Predicted: forecast.Kept{Plan: "virga", Wall: 90 * time.Minute, WallP10: time.Hour, WallP50: 5000 * time.Second, WallP90: 2 * time.Hour,
				Cost: 4, CostP50: 3.5, Shift: 1.25},
			Wall: wall, Cost: cost}
	}
	got, err := c.Calibration(ctx, "mnist")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]forecast.Pair{wantPair(done, 100*time.Minute, 3.5)}, got); d != "" {
		t.Errorf("pairs of mnist (-want +got):\n%s", d)
	}
	all, err := c.Calibration(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]forecast.Pair{wantPair(other, 2*time.Hour, 10), wantPair(done, 100*time.Minute, 3.5)}, all); d != "" {
		t.Errorf("all pairs (-want +got):\n%s", d)
	}
}
