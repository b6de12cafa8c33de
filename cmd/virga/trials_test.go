package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/sqlite"
)

// TestTrialsLineageAndPrediction runs `virga trials` in this process on a
// data directory whose store holds a trial continued from another, with a
// prediction, and a preempted attempt of the first, and checks the table's
// extra columns (COST, PREDICTED, PARENT) and the JSON.
func TestTrialsLineageAndPrediction(t *testing.T) {
	ctx := context.Background()
	t.Setenv("VIRGA_SERVER", "")
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "virga.db"))
	if err != nil {
		t.Fatal(err)
	}
	e := &virga.Experiment{Name: "pbt", State: virga.ExperimentActive, SpecFile: "pbt.yaml"}
	if err := st.Apply(ctx, &store.Batch{Experiments: []*virga.Experiment{e}}); err != nil {
		t.Fatal(err)
	}
	parent := &virga.Trial{ExperimentID: e.ID, Seq: 1, State: virga.TrialRunning, HParams: map[string]any{"lr": 0.1}, Step: 12}
	if err := st.Apply(ctx, &store.Batch{Trials: []*virga.Trial{parent}}); err != nil {
		t.Fatal(err)
	}
	child := &virga.Trial{ExperimentID: e.ID, Seq: 2, State: virga.TrialQueued, HParams: map[string]any{"lr": 0.2},
		Parent: parent.ID, ParentCheckpoint: "ck-12", ParentStep: 12,
		Prediction: &virga.Prediction{Step: 12, Horizon: 100, Mean: 0.123, Std: 0.0104, ProbBetter: 0.04}}
	if err := st.Apply(ctx, &store.Batch{Trials: []*virga.Trial{child}}); err != nil {
		t.Fatal(err)
	}
	a := &virga.Attempt{TrialID: parent.ID, Number: 1, State: virga.AttemptExited, Outcome: virga.OutcomePreempted,
		Backend: "local", Pool: "spot", Cost: 1.5, LostCost: 0.25}
	if err := st.Apply(ctx, &store.Batch{Attempts: []*virga.Attempt{a}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	trials := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		args = append([]string{"trials", "1", "--data-dir", dir}, args...)
		if code := run(ctx, args, strings.NewReader(""), &out, &errOut); code != 0 {
			t.Fatalf("virga %s: exit %d: %s", strings.Join(args, " "), code, errOut.String())
		}
		return out.String()
	}

	// Compared with the padding between columns squeezed to one space.
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(trials(), "\n"), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	want := []string{
		"TRIAL STATE HYPERPARAMETERS STEP LATEST BEST COST PREDICTED PARENT",
		"1 RUNNING lr=0.1 12 - - $1.50 ($0.25 lost) - -",
		"2 QUEUED lr=0.2 0 - - $0.00 0.123 ± 0.010 (p=0.04) #1@12",
	}
	if d := cmp.Diff(want, lines); d != "" {
		t.Errorf("virga trials (-want +got):\n%s", d)
	}

	var got []wire.TrialSummary
	if err := json.Unmarshal([]byte(trials("--json")), &got); err != nil {
		t.Fatalf("virga trials --json: %v", err)
	}
	if len(got) != 2 {
		t.Fatalf("virga trials --json: %d trials, want 2", len(got))
	}
	wantLineage := []any{child.Parent, child.ParentCheckpoint, child.ParentStep, child.Prediction}
	gotLineage := []any{got[1].Parent, got[1].ParentCheckpoint, got[1].ParentStep, got[1].Prediction}
	if d := cmp.Diff(wantLineage, gotLineage); d != "" {
		t.Errorf("virga trials --json: the child's lineage and prediction (-want +got):\n%s", d)
	}
	if got[0].Parent != 0 || got[0].Prediction != nil {
		t.Errorf("virga trials --json: the parent has parent %d, prediction %+v; want none", got[0].Parent, got[0].Prediction)
	}
	if d := cmp.Diff([]wire.Spend{{Cost: 1.5, LostCost: 0.25}, {}}, []wire.Spend{got[0].Spend, got[1].Spend}); d != "" {
		t.Errorf("virga trials --json: costs (-want +got):\n%s", d)
	}
}
