package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/forecast"
	"github.com/virga-ml/virga/internal/spec"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/sqlite"
)

// TestEstimateCalibratedByEarlierRuns: three completed runs of the same
// experiment that took about 1.5 times their estimate's median calibrate
// the next estimate: its median moves by their geometric mean ratio, it
// says so, and the calibration is kept in its JSON; an explicit
// --unmodelled wins over it.
func TestEstimateCalibratedByEarlierRuns(t *testing.T) {
	dir := t.TempDir()
	exp := stepExperiment(t, dir, "calib", 8, 4, 20, 10, "")
	estimate := func(args ...string) estimateReport {
		t.Helper()
		out, errOut, code := runCLI(t, dir, append([]string{"estimate", exp, "--capacity", capacityFile(t), "--steps", "20", "--step-time", "1m",
			"--samples", "400", "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s%s", code, out, errOut)
		}
		var rep estimateReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return rep
	}
	// The model alone: the on-demand plan takes 46m (TestEstimateFromFlags).
	model := estimate("--unmodelled", "0").Plans[0]
	if model.Plan != "on-demand" || model.WallP50 != 46*time.Minute {
		t.Fatalf("uncalibrated on-demand plan %+v; want a median of 46m", model)
	}

	ratios := []float64{1.4, 1.5, 1.6}
	storeRuns(t, filepath.Join(dir, ".virga", "virga.db"), "calib", ratios)
	rep := estimate()
	want := math.Cbrt(1.4 * 1.5 * 1.6)
	c := rep.Calibration
	if c == nil || c.Pairs != 3 || c.Of != "experiment calib" || math.Abs(c.Median-want) > 1e-9 || !(c.P10 < c.Median && c.Median < c.P90) {
		t.Fatalf("calibration %+v; want one of 3 runs of experiment calib with median %.4f", c, want)
	}
	od := rep.Plans[0]
	if r := od.WallP50.Hours() / model.WallP50.Hours(); math.Abs(r/want-1) > 0.03 {
		t.Errorf("calibrated on-demand median %s: %.3f times the model's; want %.3f", od.WallP50, r, want)
	}
	if lo, hi := od.WallP10.Hours()/model.WallP50.Hours(), od.WallP90.Hours()/model.WallP50.Hours(); math.Abs(lo/c.P10-1) > 0.05 || math.Abs(hi/c.P90-1) > 0.05 {
		t.Errorf("calibrated on-demand p10 %s, p90 %s: %.3f and %.3f times the model's median; want %.3f and %.3f", od.WallP10, od.WallP90, lo, hi, c.P10, c.P90)
	}
	out, errOut, code := runCLI(t, dir, "estimate", exp, "--capacity", capacityFile(t), "--steps", "20", "--step-time", "1m", "--samples", "40")
	if line := fmt.Sprintf("calibrated on 3 earlier runs (experiment calib): actual/predicted median %.2f", want); code != 0 || !strings.Contains(out, line) {
		t.Errorf("table (exit %d) lacks %q:\n%s%s", code, line, out, errOut)
	}
	// --unmodelled wins: no calibration, the model's median again.
	if rep := estimate("--unmodelled", "0"); rep.Calibration != nil || rep.Plans[0].WallP50 != 46*time.Minute {
		t.Errorf("with --unmodelled 0: calibration %+v, on-demand median %s; want none and 46m", rep.Calibration, rep.Plans[0].WallP50)
	}
}

// storeRuns stores, in the database at db, one completed experiment named
// name per ratio, each submitted with an estimate whose on-demand plan's
// median was an hour and that took ratio hours.
func storeRuns(t *testing.T, db, name string, ratios []float64) {
	t.Helper()
	ctx := context.Background()
	if err := os.MkdirAll(filepath.Dir(db), 0o755); err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	est := fmt.Sprintf(`{"plans":[{"plan":"on-demand","wall":%d,"wall_p50":%d,"cost":1}]}`, time.Hour, time.Hour)
	for _, r := range ratios {
		e := &virga.Experiment{Name: name, State: virga.ExperimentCompleted, Reason: virga.ReasonSearchFinished,
			Spec: []byte("name: " + name + "\n"), SpecFile: name + ".yaml", CreatedAt: t0, UpdatedAt: t0, EndedAt: t0.Add(time.Duration(r * float64(time.Hour)))}
		if err := st.Apply(ctx, &store.Batch{Experiments: []*virga.Experiment{e}, NewExperimentEvents: []store.NewExperimentEvent{
			{Experiment: e, Event: &virga.Event{Kind: virga.EventExperimentEstimate, Message: est, Time: t0}}}}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCalibrationScope: an estimate is calibrated on the runs of its own
// experiment name when there are enough, else on those of its entrypoint,
// else on all; the newest maxPairs at most.
func TestCalibrationScope(t *testing.T) {
	e := &spec.Experiment{Name: "mnist", Entrypoint: spec.Entrypoint{Argv: []string{"python", "train.py"}}}
	pair := func(name string, argv []string, ratio float64) forecast.Pair {
		return forecast.Pair{Name: name, Entrypoint: argv, Predicted: forecast.Kept{WallP50: time.Hour, Shift: 1},
			Wall: time.Duration(ratio * float64(time.Hour))}
	}
	train, other := []string{"python", "train.py"}, []string{"python", "other.py"}
	for _, c := range []struct {
		name     string
		pairs    []forecast.Pair
		wantOf   string // "" for none
		wantMean float64
	}{
		{"own name", []forecast.Pair{pair("mnist", train, 2), pair("mnist", train, 2), pair("mnist", train, 2), pair("cifar", train, 1)},
			"experiment mnist", 2},
		{"same entrypoint", []forecast.Pair{pair("mnist", train, 2), pair("cifar", train, 1), pair("cifar", train, 1), pair("x", other, 4)},
			"entrypoint python train.py", math.Cbrt(2)},
		{"all", []forecast.Pair{pair("mnist", train, 2), pair("x", other, 4), pair("y", other, 4)}, "all experiments", math.Cbrt(32)},
		{"too few", []forecast.Pair{pair("mnist", train, 2), pair("x", other, 4)}, "", 0},
	} {
		got := calibrationFor(e, c.pairs)
		switch {
		case c.wantOf == "" && got != nil:
			t.Errorf("%s: calibration %+v; want none", c.name, got)
		case c.wantOf != "" && (got == nil || got.Of != c.wantOf || math.Abs(got.Median-c.wantMean) > 1e-9):
			t.Errorf("%s: calibration %+v; want one of %s with median %.4f", c.name, got, c.wantOf, c.wantMean)
		}
	}
	var many []forecast.Pair
	for i := range maxPairs + 10 {
		r := 1.0
		if i >= maxPairs {
			r = 3 // older runs, left out
		}
		many = append(many, pair("mnist", train, r*(1+0.01*float64(i%2))))
	}
	if got := calibrationFor(e, many); got == nil || got.Pairs != maxPairs || got.Median > 1.01 {
		t.Errorf("of %d pairs: %+v; want the newest %d, median about 1", len(many), got, maxPairs)
	}
}
