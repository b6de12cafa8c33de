package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// simCLI runs `virga sim` in this process.
func simCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	t.Setenv("VIRGA_SERVER", "")
	var out, errOut bytes.Buffer
	code = run(context.Background(), append([]string{"sim"}, args...), strings.NewReader(""), &out, &errOut)
	return out.String(), errOut.String(), code
}

const (
	simExperiment = "../../bench/search/tables/digits-mlp.yaml"
	simTable      = "../../bench/search/tables/digits-mlp.json.gz"
	simCapacity   = "../../examples/capacity/aws-p3.yaml"
)

// TestSimAllPolicies simulates the digits-mlp search on the AWS p3 pools
// under every policy, as a table and as JSON.
func TestSimAllPolicies(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates four searches of 200 trials")
	}
	args := []string{simExperiment, "--capacity", simCapacity, "--table", simTable, "--epoch", "2m", "--offset", "100h", "--policy", "all", "--deadline", "14h"}
	out, errOut, code := simCLI(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"experiment digits-mlp-tpe-asha (tpe+asha, seed 1) on table digits-mlp, median epoch 2m0s; deadline 14h0m0s, budget none",
		"POLICY", "COST", "MAKESPAN", "DEADLINE", "PREEMPTIONS", "WORK LOST", "BEST",
		"on-demand ", "greedy ", "uniform-progress ", "virga ", "virga: pools", "p3-spot-us-east-1f", "NODE-HOURS",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	out, errOut, code = simCLI(t, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("--json: exit %d: %s", code, errOut)
	}
	var got simOutput
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if len(got.Runs) != 4 || got.Experiment != "digits-mlp-tpe-asha" || got.Seed != 1 {
		t.Fatalf("--json: %+v", got)
	}
	base := got.Runs[0]
	for _, r := range got.Runs {
		if !r.Finished || !r.Met || r.Trials != 200 || r.Best == nil || len(r.Pools) != 3 {
			t.Errorf("%s: %+v", r.Policy, r)
		}
		if r.Policy != "on-demand" && r.Cost >= base.Cost {
			t.Errorf("%s: cost %g, not below on-demand's %g", r.Policy, r.Cost, base.Cost)
		}
	}
}

// TestSimOnTheLoop runs the digits-mlp search on the control loop: the
// on-demand policy's figures are the legacy simulator's.
func TestSimOnTheLoop(t *testing.T) {
	args := []string{simExperiment, "--capacity", simCapacity, "--table", simTable, "--epoch", "2m", "--policy", "on-demand", "--deadline", "none", "--json"}
	var runs [2]simOutput
	for i, engine := range []string{"legacy", "loop"} {
		out, errOut, code := simCLI(t, append(args, "--engine", engine)...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", engine, code, errOut)
		}
		if err := json.Unmarshal([]byte(out), &runs[i]); err != nil {
			t.Fatalf("%s: %v\n%s", engine, err, out)
		}
	}
	old, loop := runs[0].Runs[0], runs[1].Runs[0]
	if !loop.Finished || loop.Trials != 200 || math.Abs(loop.Cost-old.Cost) > 1e-6 || loop.Makespan != old.Makespan || loop.Steps != old.Steps {
		t.Errorf("loop: finished %v, %d trials, cost %g, makespan %s, %d steps; legacy: %d trials, cost %g, makespan %s, %d steps",
			loop.Finished, loop.Trials, loop.Cost, loop.Makespan, loop.Steps, old.Trials, old.Cost, old.Makespan, old.Steps)
	}
}

func TestSimErrors(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile(simExperiment)
	if err != nil {
		t.Fatal(err)
	}
	wrongMetric := filepath.Join(dir, "acc.yaml")
	if err := os.WriteFile(wrongMetric, bytes.Replace(data, []byte("metric: val_loss"), []byte("metric: val_acc"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	badCapacity := filepath.Join(dir, "capacity.yaml")
	if err := os.WriteFile(badCapacity, []byte("pools:\n  - name: spot\n    market: spot\n    price: cheap\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string // in stderr; every case exits 2
	}{
		{"no capacity", []string{simExperiment, "--table", simTable}, "--capacity is required"},
		{"no table", []string{simExperiment, "--capacity", simCapacity}, "--table is required"},
		{"policy", []string{simExperiment, "--capacity", simCapacity, "--table", simTable, "--policy", "cheapest"},
			`--policy "cheapest": want one of on-demand, greedy, uniform-progress, virga, or all`},
		{"deadline", []string{simExperiment, "--capacity", simCapacity, "--table", simTable, "--deadline", "soon"},
			`--deadline "soon": want a positive duration like 12h or 2h30m, or none`},
		{"table file", []string{simExperiment, "--capacity", simCapacity, "--table", filepath.Join(dir, "none.json.gz")}, "--table: open"},
		{"metric", []string{wrongMetric, "--capacity", simCapacity, "--table", simTable},
			wrongMetric + ":30:13: objective.metric: the table digits-mlp records val_loss, not val_acc"},
		{"capacity file", []string{simExperiment, "--capacity", badCapacity, "--table", simTable}, badCapacity + ":4:12: pools[spot].price"},
		{"engine", []string{simExperiment, "--capacity", simCapacity, "--table", simTable, "--engine", "fast"}, `--engine "fast": want legacy or loop`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := simCLI(t, tc.args...)
			if code != exitUsage || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit 2 and %q", code, errOut, tc.want)
			}
		})
	}
}
