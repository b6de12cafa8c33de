package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/sim"
	"github.com/virga-ml/virga/internal/spec"
)

func capacityFile(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../../examples/capacity/aws-p3.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEstimateFromFlags(t *testing.T) {
	dir := t.TempDir()
	exp := stepExperiment(t, dir, "est", 8, 4, 20, 10, "deadline: 3h\nbudget: 50")
	out, errOut, code := runCLI(t, dir, "estimate", exp, "--capacity", capacityFile(t), "--steps", "20", "--step-time", "1m", "--samples", "40", "--unmodelled", "0", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	var rep estimateReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// 8 trials x 20 steps x 1m = 160 min of node time, 4 at a time.
	if rep.Work != 160*time.Minute || rep.Slots != 4 || len(rep.Plans) != 3 {
		t.Fatalf("report %+v", rep)
	}
	od, spot, v := rep.Plans[0], rep.Plans[1], rep.Plans[2]
	// On-demand: 4 nodes, each running 2 trials of 20m, each trial paying
	// the 3m restart overhead; 8 attempts of 23m billed at $3.06/h for an
	// eighth of a node each (1 of the p3.2xlarge's 8 cores).
	if od.Plan != "on-demand" || od.Wall != 46*time.Minute || od.PMeet != 1 || abs(od.Cost-8*3.06*23/60/8) > 1e-9 {
		t.Errorf("on-demand plan %+v", od)
	}
	if v.Plan != "virga" || v.PMeet != 1 || v.Cost >= od.Cost || spot.Cost >= v.Cost {
		t.Errorf("want virga to meet the deadline at a cost between spot-only and on-demand: %+v", rep.Plans)
	}
	// The table names each plan.
	out, _, code = runCLI(t, dir, "estimate", exp, "--capacity", capacityFile(t), "--steps", "20", "--step-time", "1m", "--samples", "40")
	if code != 0 || !strings.Contains(out, "virga") || !strings.Contains(out, "p3-spot-us-east-1f+p3-on-demand") || !strings.Contains(out, "budget $50.00") {
		t.Errorf("table (exit %d):\n%s", code, out)
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

func TestEstimateInfeasibleDeadline(t *testing.T) {
	dir := t.TempDir()
	exp := stepExperiment(t, dir, "late", 8, 2, 20, 10, "deadline: 1h")
	out, errOut, code := runCLI(t, dir, "estimate", exp, "--capacity", capacityFile(t), "--steps", "20", "--step-time", "1m", "--samples", "10")
	if code != 0 || !strings.Contains(out, "the deadline cannot be met even on on-demand capacity: the earliest finish is") || !strings.Contains(out, "(1h32m0s from now)") {
		t.Fatalf("exit %d:\n%s%s", code, out, errOut)
	}
}

func TestEstimateNeedsItsInputs(t *testing.T) {
	dir := t.TempDir()
	exp := stepExperiment(t, dir, "nohist", 2, 1, 3, 10, "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "estimate needs --capacity FILE"},
		{[]string{"--capacity", capacityFile(t)}, `no time per step for "nohist"`}, // steps: the hyperparameter steps
		{[]string{"--capacity", capacityFile(t), "--steps", "3"}, `no time per step for "nohist"`},
		{[]string{"--capacity", capacityFile(t), "--steps", "3", "--step-time", "1s", "--spot", "nope"}, `no pool named "nope"`},
		{[]string{"--capacity", capacityFile(t), "--steps", "3", "--step-time", "1s", "--spot", "p3-on-demand"}, `pool "p3-on-demand" is on-demand, not spot`},
	} {
		out, errOut, code := runCLI(t, dir, append([]string{"estimate", exp}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q (stdout %q), want 2 and %q", c.args, code, errOut, out, c.want)
		}
	}
	// Without a steps constant, and asked to profile: refused at once, not
	// after the profile.
	b, err := os.ReadFile(exp)
	if err != nil {
		t.Fatal(err)
	}
	nosteps := filepath.Join(dir, "nosteps.yaml")
	if err := os.WriteFile(nosteps, []byte(strings.Replace(strings.Replace(string(b), "  steps: 3\n", "  n: 3\n", 1), "name: nohist", "name: nosteps", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, dir, "estimate", nosteps, "--capacity", capacityFile(t), "--profile", "3")
	if code != 2 || !strings.Contains(errOut, `no steps per trial for "nosteps"`) || strings.Contains(errOut, "profiling") {
		t.Errorf("no steps, --profile: exit %d, stderr %q (stdout %q), want 2 and no steps per trial before any profile", code, errOut, out)
	}
}

// After a run, the estimate takes the steps and the time per step from it.
func TestEstimateFromHistory(t *testing.T) {
	dir := t.TempDir()
	exp := stepExperiment(t, dir, "hist", 3, 3, 6, 50, "")
	if out, errOut, code := runCLI(t, dir, "run", exp); code != 0 {
		t.Fatalf("run: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code := runCLI(t, dir, "estimate", exp, "--capacity", capacityFile(t), "--samples", "10", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	var rep estimateReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	// steptrial reports steps 0..5, sleeping 50 ms between them: its last
	// step is 5.
	// Each of the 3 trials' step times is a measurement of the learnt step
	// time, whose error bounds the work.
	if rep.Steps != 5 || rep.StepTime < 40*time.Millisecond || rep.StepTime > 2*time.Second || !strings.Contains(rep.Source, "history: 3 trials of experiment 1") ||
		rep.Measured != 3 || !(rep.WorkP10 < rep.Work && rep.Work < rep.WorkP90) {
		t.Fatalf("report %+v", rep)
	}
	if _, err := os.Stat(filepath.Join(dir, ".virga")); err != nil {
		t.Fatal(err)
	}
}

// TestEstimateProfile measures the time per step with short runs of a few
// configurations that span the space, one after another on this machine.
func TestEstimateProfile(t *testing.T) {
	dir := t.TempDir()
	exp := stepExperiment(t, dir, "prof", 10, 4, 200, 100, "deadline: 10h")
	out, errOut, code := runCLI(t, dir, "estimate", exp, "--capacity", capacityFile(t), "--steps", "200", "--profile", "5", "--samples", "10", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	var rep estimateReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	// steptrial sleeps 100 ms per step.
	if rep.StepTime < 90*time.Millisecond || rep.StepTime > time.Second || !strings.Contains(rep.Source, "profile of 4 configurations x 5 steps on this machine") ||
		rep.Measured != 4 || !(rep.WorkP10 < rep.Work && rep.Work < rep.WorkP90) || rep.Startup <= 0 || rep.Startup > 30*time.Second {
		t.Fatalf("report %+v", rep)
	}
	if !strings.Contains(errOut, "profiling configuration 1 of 4 (x=") || !strings.Contains(errOut, "profiling configuration 4 of 4 (x=") {
		t.Errorf("stderr %q", errOut)
	}
	// The profile ran in a directory of its own: nothing here.
	if _, err := os.Stat(filepath.Join(dir, ".virga")); !os.IsNotExist(err) {
		t.Errorf(".virga: %v", err)
	}
}

func TestProfileExperiment(t *testing.T) {
	in := []byte(`name: p
entrypoint: [sh, -c, "exit 0"]
hyperparameters:
  lr: {type: float, min: 0.001, max: 0.1}
searcher: {sampler: tpe, stopper: asha, max_resource: 9}
objective: {metric: loss, direction: minimize}
max_trials: 50
deadline: 2h
budget: 10
`)
	out, err := profileExperiment(in)
	if err != nil {
		t.Fatal(err)
	}
	e, err := spec.Parse("p.yaml", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if e.MaxTrials != 1 || e.MaxConcurrent != 1 || e.Searcher.Name != "random" || e.StopGrace.D() != 5*time.Second || !e.Deadline.IsZero() || e.Budget != 0 || e.Hyperparameters["lr"] == nil {
		t.Errorf("profile experiment %+v from\n%s", e, out)
	}
}

// TestRunKeepsEstimate: the forecast made before a run is kept with the
// experiment and shown beside what happened; with --capacity and earlier
// runs, virga run makes it itself.
func TestRunKeepsEstimate(t *testing.T) {
	dir := t.TempDir()
	exp := stepExperiment(t, dir, "est-run", 2, 2, 5, 20, "deadline: 1h")
	out, errOut, code := runCLI(t, dir, "estimate", exp, "--capacity", capacityFile(t), "--steps", "5", "--step-time", "1s", "--samples", "10", "--json")
	if code != 0 {
		t.Fatalf("estimate: exit %d %s", code, errOut)
	}
	est := filepath.Join(dir, "est.json")
	if err := os.WriteFile(est, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runCLI(t, dir, "run", exp, "--estimate", est); code != 0 {
		t.Fatalf("run: exit %d\n%s%s", code, out, errOut)
	}
	show, errOut, code := runCLI(t, dir, "show", "1")
	if code != 0 || !strings.Contains(show, "estimated:  on-demand $") || !strings.Contains(show, "virga $") ||
		!strings.Contains(show, "actual:     $0.00, took") || !strings.Contains(show, "deadline met") {
		t.Errorf("show (exit %d %s):\n%s", code, errOut, show)
	}
	// A second run with a capacity file: the first run tells the work.
	rc := rehearsalCapacity(t, dir)
	out, errOut, code = runCLI(t, dir, "run", exp, "--capacity", rc)
	if code != 0 || !strings.Contains(out, "of experiment 1") || !strings.Contains(out, "P(DEADLINE)") {
		t.Fatalf("run --capacity: exit %d\n%s%s", code, out, errOut)
	}
	show, _, _ = runCLI(t, dir, "show", "2")
	if !strings.Contains(show, "estimated:  on-demand $") || !strings.Contains(show, "actual:") {
		t.Errorf("show 2:\n%s", show)
	}
	// A file that is not an estimate.
	if _, errOut, code := runCLI(t, dir, "run", exp, "--estimate", exp); code != 2 || !strings.Contains(errOut, "not the output of virga estimate --json") {
		t.Errorf("bad --estimate: exit %d %q", code, errOut)
	}
}

// TestPinnedExperiment: a profiled configuration's file has every
// hyperparameter a constant of the configuration, and nothing else changed.
func TestPinnedExperiment(t *testing.T) {
	in := []byte(`name: p
entrypoint: [sh, -c, "exit 0"]
hyperparameters:
  lr: {type: float, min: 0.001, max: 0.1, log: true}
  hidden: {type: int, min: 8, max: 64}
  act: {type: categorical, values: [relu, tanh]}
  epochs: 5
searcher: random
objective: {metric: loss, direction: minimize}
max_trials: 50
`)
	out, err := pin(in, map[string]any{"lr": 0.0123, "hidden": int64(17), "act": "tanh", "epochs": int64(5)})
	if err != nil {
		t.Fatal(err)
	}
	e, err := spec.Parse("p.yaml", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for name, want := range map[string]any{"lr": 0.0123, "hidden": int64(17), "act": "tanh", "epochs": int64(5)} {
		hp := e.Hyperparameters[name]
		if hp == nil || hp.Type != spec.HPConst || hp.Value != want {
			t.Errorf("%s: %+v, want the constant %v\n%s", name, hp, want, out)
		}
	}
	if e.MaxTrials != 50 || e.Name != "p" {
		t.Errorf("pinned experiment %+v", e)
	}
}

// TestEstimatePrintsShortWalls: a forecast of seconds is printed in
// seconds, not rounded to whole minutes (0s beside a run that took 8s).
func TestEstimatePrintsShortWalls(t *testing.T) {
	var b strings.Builder
	printEstimate(&b, &estimateReport{Experiment: "x", Trials: 2, StepTime: 20 * time.Millisecond, Work: 8300 * time.Millisecond, Slots: 1,
		Plans: []sim.PlanEstimate{{Plan: "on-demand", Pools: []string{"od"}, Wall: 8300 * time.Millisecond, WallP90: 9 * time.Second}}})
	if !strings.Contains(b.String(), "on-demand  od     8s    9s") || !strings.Contains(b.String(), "x 20ms per step") {
		t.Errorf("printed:\n%s", b.String())
	}
}

// TestShowForecastWhileRunning: while an experiment runs, virga show and
// the API tell what is left: the share done, the time and money to the
// end, and the chance of meeting the deadline.
func TestShowForecastWhileRunning(t *testing.T) {
	dir := t.TempDir()
	exp := stepExperiment(t, dir, "fc", 4, 2, 30, 100, "deadline: 1h")
	run := exec.Command(virgaBin, "run", exp)
	run.Dir = dir
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _, _ = runCLI(t, dir, "stop", "1")
		_ = run.Wait()
	})
	var show string
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		out, _, code := runCLI(t, dir, "show", "1", "--json")
		if code != 0 {
			continue
		}
		var v struct {
			Experiment struct {
				Forecast *struct {
					Done      float64  `json:"done"`
					Left      int64    `json:"left"`
					PDeadline *float64 `json:"p_deadline"`
				} `json:"forecast"`
			} `json:"experiment"`
		}
		if json.Unmarshal([]byte(out), &v) != nil || v.Experiment.Forecast == nil || v.Experiment.Forecast.Done < 0.1 {
			continue
		}
		f := v.Experiment.Forecast
		// 120 steps of 100 ms, 2 at a time: about 6 s in all.
		if f.Done >= 1 || f.Left <= 0 || time.Duration(f.Left) > 5*time.Minute || f.PDeadline == nil || *f.PDeadline < 0.9 {
			t.Fatalf("forecast %+v (P(deadline) %v), want some of the run left, minutes at most, the deadline of an hour likely met", f, f.PDeadline)
		}
		show, _, _ = runCLI(t, dir, "show", "1")
		break
	}
	if !strings.Contains(show, "  forecast:   ") || !strings.Contains(show, "to the end") || !strings.Contains(show, "P(deadline)") {
		t.Fatalf("show while running:\n%s", show)
	}
	t.Logf("show while running:\n%s", show)
}
