package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/client"
	"github.com/virga-ml/virga/internal/server"
)

// rehearsalCapacity writes a capacity file with an emulated spot pool of two
// slots reclaimed by a trace of 1 s ticks (up 3 s, down 1 s, repeating) and
// an on-demand pool of one slot.
func rehearsalCapacity(t *testing.T, dir string) string {
	t.Helper()
	ticks := make([]string, 0, 400)
	for i := range 400 {
		up := "1"
		if i%4 == 3 {
			up = "0"
		}
		ticks = append(ticks, up)
	}
	tr := fmt.Sprintf(`{"metadata": {"gap_seconds": 1}, "data": [%s]}`, strings.Join(ticks, ", "))
	if err := os.WriteFile(filepath.Join(dir, "flappy.json"), []byte(tr), 0o644); err != nil {
		t.Fatal(err)
	}
	capFile := filepath.Join(dir, "capacity.yaml")
	if err := os.WriteFile(capFile, []byte(`pools:
  - name: spot
    node: {cpu: 1, memory: 256MiB}
    nodes: 2
    market: spot
    price: 1.8
    preemption: {trace: flappy.json}
    warning: 400ms
  - name: on-demand
    node: {cpu: 1, memory: 256MiB}
    market: on-demand
    price: 3.6
`), 0o644); err != nil {
		t.Fatal(err)
	}
	return capFile
}

// TestRehearsalOnEmulatedSpot runs an experiment on an emulated spot pool
// that is reclaimed every 4 s: its trials get SIGTERM at the warning, are
// resumed from their checkpoints (no restart counted), and the experiment
// completes with every step done, each repeated at most once per reclaim,
// and its cost known.
func TestRehearsalOnEmulatedSpot(t *testing.T) {
	dir := t.TempDir()
	capFile := rehearsalCapacity(t, dir)
	exp := stepExperiment(t, dir, "rehearse", 4, 3, 24, 150, "resources: {cpu: 1, memory: 256MiB}")
	out, errOut, code := runCLI(t, dir, "run", exp, "--capacity", capFile)
	if code != 0 || !strings.Contains(out, "COMPLETED") {
		t.Fatalf("virga run: exit %d\n%s\n%s", code, out, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "violations")); err == nil {
		t.Fatalf("two live processes of a trial:\n%s", b)
	}
	st := startServer(t, filepath.Join(dir, ".virga"), 0, "")
	defer st.stop()
	info, ok := server.Running(filepath.Join(dir, ".virga"))
	if !ok {
		t.Fatal("no server")
	}
	c := client.New(info.URL, "")
	ctx := context.Background()
	trials, err := c.Trials(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	preempted, pools := 0, map[string]int{}
	for _, tr := range trials {
		if tr.State != virga.TrialCompleted || tr.Restarts != 0 {
			t.Errorf("trial %d: %s with %d restarts (%s), want COMPLETED with none", tr.ID, tr.State, tr.Restarts, tr.Message)
		}
		v, err := c.Trial(ctx, tr.ID)
		if err != nil {
			t.Fatal(err)
		}
		trialPreempted := 0
		for _, a := range v.AttemptList {
			pools[a.Pool]++
			if a.Outcome == virga.OutcomePreempted {
				trialPreempted++
				if a.Pool != "spot" {
					t.Errorf("attempt %d preempted on pool %q", a.ID, a.Pool)
				}
			}
		}
		preempted += trialPreempted
		// Every step done; a step is computed again only after a reclaim
		// (the one in progress when SIGTERM came).
		l := readLedger(t, dir, tr.ID)
		repeats := 0
		for s := range 24 {
			if len(l.steps[s]) == 0 {
				t.Errorf("trial %d: step %d never done", tr.ID, s)
			}
			repeats += max(len(l.steps[s])-1, 0)
		}
		if repeats > trialPreempted {
			t.Errorf("trial %d: %d steps repeated after %d reclaims", tr.ID, repeats, trialPreempted)
		}
	}
	if preempted == 0 || pools["spot"] == 0 {
		t.Errorf("%d preempted attempts, attempts per pool %v: want reclaims on the spot pool", preempted, pools)
	}
	v, err := c.Experiment(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if v.Cost <= 0 {
		t.Errorf("experiment cost %v, want > 0", v.Cost)
	}
	show, _, _ := runCLI(t, dir, "show", "1", "--data-dir", filepath.Join(dir, ".virga"))
	if !strings.Contains(show, "cost:") || !strings.Contains(show, "spot") {
		t.Errorf("show:\n%s", show)
	}
}

func TestRunCapacityErrors(t *testing.T) {
	dir := t.TempDir()
	exp := stepExperiment(t, dir, "bad-capacity", 1, 1, 1, 1, "")
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("pools:\n  - name: x\n    node: {cpu: 1}\n    price: 1\n    market: spott\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := runCLI(t, dir, "run", exp, "--capacity", bad)
	if code != 2 || !strings.Contains(errOut, "bad.yaml:5:13: pools[x].market") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	simOnly := filepath.Join(dir, "sim.yaml")
	if err := os.WriteFile(simOnly, []byte("pools:\n  - name: s\n    backend: sim\n    node: {cpu: 1}\n    price: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = runCLI(t, dir, "run", exp, "--capacity", simOnly)
	if code == 0 || !strings.Contains(errOut, `pool "s" is for backend sim`) {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}
