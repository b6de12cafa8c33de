package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/forecast"
	"github.com/virga-ml/virga/internal/sim"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/sqlite"
)

// TestShowCost runs `virga show` in this process on a data directory whose
// experiment ran attempts on two pools, one of them preempted, and checks
// the cost lines and the JSON.
func TestShowCost(t *testing.T) {
	ctx := context.Background()
	t.Setenv("VIRGA_SERVER", "")
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "virga.db"))
	if err != nil {
		t.Fatal(err)
	}
	e := &virga.Experiment{Name: "spot", State: virga.ExperimentCompleted, SpecFile: "spot.yaml",
		Spec: []byte("name: spot\nentrypoint: [sh, -c, 'exit 0']\nobjective: {metric: loss, direction: minimize}\n")}
	if err := st.Apply(ctx, &store.Batch{Experiments: []*virga.Experiment{e}}); err != nil {
		t.Fatal(err)
	}
	tr := &virga.Trial{ExperimentID: e.ID, Seq: 1, State: virga.TrialCompleted, HParams: map[string]any{}}
	if err := st.Apply(ctx, &store.Batch{Trials: []*virga.Trial{tr}}); err != nil {
		t.Fatal(err)
	}
	as := []*virga.Attempt{
		{TrialID: tr.ID, Number: 1, State: virga.AttemptExited, Outcome: virga.OutcomePreempted, Backend: "local",
			Pool: "spot", Cost: 1.5, LostCost: 0.25},
		{TrialID: tr.ID, Number: 2, State: virga.AttemptExited, Outcome: virga.OutcomeSucceeded, Backend: "local",
			Pool: "ondemand", Cost: 4},
	}
	if err := st.Apply(ctx, &store.Batch{Attempts: as}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	show := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		args = append([]string{"show", "1", "--data-dir", dir}, args...)
		if code := run(ctx, args, strings.NewReader(""), &out, &errOut); code != 0 {
			t.Fatalf("virga %s: exit %d: %s", strings.Join(args, " "), code, errOut.String())
		}
		return out.String()
	}
	var got []string
	for _, l := range strings.Split(show(), "\n") {
		if l = strings.Join(strings.Fields(l), " "); strings.HasPrefix(l, "cost:") || strings.HasPrefix(l, "pools:") {
			got = append(got, l)
		}
	}
	want := []string{
		"cost: $5.50, of which $0.25 lost to preemptions",
		"pools: ondemand $4.00 (1 attempt), spot $1.50 (1 attempt, $0.25 lost)",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("virga show: cost lines (-want +got):\n%s", d)
	}

	var j struct {
		Experiment wire.ExperimentView `json:"experiment"`
	}
	if err := json.Unmarshal([]byte(show("--json")), &j); err != nil {
		t.Fatalf("virga show --json: %v", err)
	}
	wantJ := []any{wire.Spend{Cost: 5.5, LostCost: 0.25}, []wire.PoolSpend{
		{Pool: "ondemand", Attempts: 1, Spend: wire.Spend{Cost: 4}},
		{Pool: "spot", Attempts: 1, Spend: wire.Spend{Cost: 1.5, LostCost: 0.25}},
	}}
	if d := cmp.Diff(wantJ, []any{j.Experiment.Spend, j.Experiment.Pools}); d != "" {
		t.Errorf("virga show --json: cost and pools (-want +got):\n%s", d)
	}
}

// TestShowEstimateSaysItsCalibration: the estimate kept with an experiment
// is shown with its wall time to the second (a run of seconds is not "0s")
// and, when earlier runs calibrated it, with how many and the correction.
func TestShowEstimateSaysItsCalibration(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC)
	rep := estimateReport{Work: 40 * time.Second, Plans: []sim.PlanEstimate{{Plan: "on-demand", Wall: 8400 * time.Millisecond, Cost: 0.12}}}
	for _, c := range []struct {
		cal  *calibrationUsed
		want string
	}{
		{nil, "  estimated:  on-demand $0.12 in 8s (before the run: 40s of node time)\n"},
		{&calibrationUsed{Calibration: forecast.Calibration{Pairs: 4, Median: 1.17}, Of: "experiment digits"},
			"  estimated:  on-demand $0.12 in 8s (before the run: 40s of node time; calibrated on 4 earlier runs of experiment digits, actual/predicted median 1.17)\n"},
	} {
		rep.Calibration = c.cal
		msg, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		v := &wire.ExperimentView{Experiment: &virga.Experiment{CreatedAt: t0, EndedAt: t0.Add(9 * time.Second)}}
		printEstimateBeside(&b, v, []virga.Event{{Kind: virga.EventExperimentEstimate, Message: string(msg), Time: t0}})
		if got, _, _ := strings.Cut(b.String(), "  actual:"); got != c.want {
			t.Errorf("show printed\n%q\nwant\n%q", got, c.want)
		}
	}
}
