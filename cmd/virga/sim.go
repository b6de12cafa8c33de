package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/schedule"
	"github.com/virga-ml/virga/internal/search/replay"
	"github.com/virga-ml/virga/internal/server"
	"github.com/virga-ml/virga/internal/sim"
	"github.com/virga-ml/virga/internal/spec"
)

// simFlags are virga sim's flags.
type simFlags struct {
	capacity, table, policy string
	deadline, start         string
	engine                  string
	budget                  float64
	seed                    uint64
	epoch, offset, tick     time.Duration
	saveOnStop              bool
}

func newSimCmd(g *globals) *cobra.Command {
	var f simFlags
	cmd := &cobra.Command{
		Use:   "sim EXPERIMENT.yaml --capacity CAPACITY.yaml --table TABLE",
		Short: "Simulate an experiment on a capacity file's pools: cost, makespan, deadline met, work lost, per pool",
		Long: `Sim runs an experiment in virtual time, in seconds: the searcher of the experiment
file (the server's code), trials whose step times and metric values come from a
learning-curve table (bench/search/FORMAT.md) mapped onto the file's
hyperparameters, and the pools of a capacity file with their prices, billing and
availability (spot reclaims preempt trials, whose work since their last
checkpoint is lost; each start pays the pool's restart_overhead). A placement
policy decides where each trial runs: on-demand, greedy, uniform-progress, virga
(the default), or all of them side by side.

It prints, per policy, the cost, the part of it lost to preemptions, the
makespan, whether the deadline was met, the preemptions and the work they threw
away, the best objective value found, and what each pool was used for.
See docs/sim.md.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSim(g, args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.capacity, "capacity", "", "capacity file: the pools to simulate (required; docs/capacity.md)")
	fl.StringVar(&f.table, "table", "", "learning-curve table, .json.gz (required; bench/search/FORMAT.md)")
	fl.StringVar(&f.policy, "policy", "virga", "placement policy: "+strings.Join(policyNames(), ", ")+", or all")
	fl.StringVar(&f.deadline, "deadline", "", "deadline from submission, e.g. 12h (default: the file's; none for no deadline)")
	fl.Float64Var(&f.budget, "budget", 0, "budget in USD (default: the file's)")
	fl.Uint64Var(&f.seed, "seed", 0, "searcher seed (default: the file's, else 1)")
	fl.DurationVar(&f.epoch, "epoch", 0, "time the table's median epoch takes on a node; every epoch is scaled alike (default: as the table recorded)")
	fl.DurationVar(&f.offset, "offset", 0, "start this far into every pool's availability trace")
	fl.StringVar(&f.start, "start", "", "virtual submission time, RFC 3339 (default: the start of the pools' price histories); prices are read there")
	fl.DurationVar(&f.tick, "tick", time.Minute, "decision interval: the policy is asked at every event and at least this often")
	fl.BoolVar(&f.saveOnStop, "save-on-stop", false, "trials checkpoint when stopped, and within a reclaim's warning, so that nothing is lost")
	fl.StringVar(&f.engine, "engine", "legacy", "what runs the experiment: legacy (the simulator's own trial lifecycle) or loop (Virga's control loop on a simulated backend)")
	return cmd
}

func policyNames() []string {
	var names []string
	for _, p := range schedule.ExperimentPolicies() {
		names = append(names, p.Name())
	}
	return names
}

// simOutput is virga sim's --json output.
type simOutput struct {
	Experiment string                  `json:"experiment"`
	Searcher   string                  `json:"searcher"`
	Table      string                  `json:"table"`
	Epoch      time.Duration           `json:"median_epoch"`
	Seed       uint64                  `json:"seed"`
	Runs       []*sim.ExperimentResult `json:"runs"`
}

func runSim(g *globals, file string, f simFlags) error {
	if f.capacity == "" {
		return usageError{errors.New("--capacity is required: the capacity file whose pools the experiment runs on (see examples/capacity)")}
	}
	if f.table == "" {
		return usageError{errors.New("--table is required: a learning-curve table (.json.gz), e.g. bench/search/tables/digits-mlp.json.gz")}
	}
	var policies []schedule.ExperimentPolicy
	if f.policy == "all" {
		policies = schedule.ExperimentPolicies()
	} else if p := schedule.ExperimentPolicyNamed(f.policy); p != nil {
		policies = []schedule.ExperimentPolicy{p}
	} else {
		return usageError{fmt.Errorf("--policy %q: want one of %s, or all", f.policy, strings.Join(policyNames(), ", "))}
	}
	var deadline time.Duration
	switch f.deadline {
	case "":
	case "none":
		deadline = -1
	default:
		d, err := time.ParseDuration(f.deadline)
		if err != nil || d <= 0 {
			return usageError{fmt.Errorf("--deadline %q: want a positive duration like 12h or 2h30m, or none", f.deadline)}
		}
		deadline = d
	}
	if f.budget < 0 {
		return usageError{fmt.Errorf("--budget %g: must be >= 0", f.budget)}
	}
	if f.tick <= 0 {
		return usageError{fmt.Errorf("--tick %s: must be positive", f.tick)}
	}
	runExperiment := sim.RunExperiment
	switch f.engine {
	case "legacy":
	case "loop":
		runExperiment = sim.RunLoop
	default:
		return usageError{fmt.Errorf("--engine %q: want legacy or loop", f.engine)}
	}
	if f.epoch < 0 || f.offset < 0 {
		return usageError{errors.New("--epoch and --offset must not be negative")}
	}

	e, data, err := spec.Load(file)
	if err != nil {
		return err
	}
	_, set, err := server.LoadCapacity(context.Background(), f.capacity, false)
	if err != nil {
		return err
	}
	tb, err := replay.Load(f.table)
	if err != nil {
		return usageError{fmt.Errorf("--table: %w", err)}
	}
	curves, err := sim.NewCurves(tb, e, file, data)
	if err != nil {
		return err
	}
	if f.epoch > 0 {
		curves.ScaleTo(f.epoch)
	}
	start, err := simStart(f.start, set)
	if err != nil {
		return err
	}
	seed := f.seed
	if seed == 0 {
		seed = e.Seed
	}
	if seed == 0 {
		seed = 1
	}

	out := simOutput{Experiment: e.Name, Searcher: e.Searcher.Name, Table: tb.Name, Epoch: curves.MedianEpoch(), Seed: seed}
	progress := !g.json && isTerminal(g.stderr) && len(policies) > 1
	for _, p := range policies {
		if progress {
			fmt.Fprintf(g.stderr, "simulating %s...\r", p.Name())
		}
		r, err := runExperiment(sim.ExperimentConfig{Spec: e, File: file, Data: data, Seed: seed, Curves: curves, Pools: set.Pools, Policy: p,
			Start: start, TraceOffset: f.offset, Deadline: deadline, Budget: f.budget, Tick: f.tick, SaveOnStop: f.saveOnStop})
		if err != nil {
			return fmt.Errorf("simulating %s with %s: %w", file, p.Name(), err)
		}
		out.Runs = append(out.Runs, r)
	}
	if progress {
		fmt.Fprintf(g.stderr, "%*s\r", 40, "")
	}
	if g.json {
		return g.printJSON(out)
	}
	printSim(g.stdout, &out)
	return nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// simStart returns the virtual submission time: --start, else the first
// price step of the pools' price histories (prices before it are the first
// one's), else the Unix epoch.
func simStart(flag string, set *capacity.Set) (time.Time, error) {
	if flag != "" {
		t, err := time.Parse(time.RFC3339, flag)
		if err != nil {
			return time.Time{}, usageError{fmt.Errorf("--start %q: want an RFC 3339 time like 2025-03-01T00:00:00Z", flag)}
		}
		return t, nil
	}
	var first time.Time
	for _, p := range set.Pools {
		if p.PriceSeries == nil || len(p.PriceSeries.Steps) < 2 {
			continue
		}
		if t := p.PriceSeries.Steps[1].Time; first.IsZero() || t.Before(first) {
			first = t
		}
	}
	if first.IsZero() {
		return time.Unix(0, 0).UTC(), nil
	}
	return first, nil
}

// printSim prints the runs as tables: one row per policy, then each run's
// pools.
func printSim(w io.Writer, out *simOutput) {
	r0 := out.Runs[0]
	deadline, budget := "none", "none"
	if r0.Deadline > 0 {
		deadline = fmtDuration(r0.Deadline)
	}
	if r0.Budget > 0 {
		budget = fmtCost(r0.Budget)
	}
	fmt.Fprintf(w, "experiment %s (%s, seed %d) on table %s, median epoch %s; deadline %s, budget %s\n\n",
		out.Experiment, out.Searcher, out.Seed, out.Table, fmtDuration(out.Epoch), deadline, budget)
	header := []string{"POLICY", "COST", "LOST", "MAKESPAN", "DEADLINE", "END", "PREEMPTIONS", "WORK LOST", "TRIALS", "BEST"}
	var rows [][]string
	for _, r := range out.Runs {
		met := "-"
		switch {
		case r.Deadline > 0 && r.Met:
			met = "met"
		case r.Deadline > 0:
			met = "missed"
		}
		best := "-"
		if r.Best != nil {
			best = fmt.Sprintf("%s (trial %d, step %d)", strconv.FormatFloat(r.Best.Value, 'g', 5, 64), r.Best.Trial, r.Best.Step)
		}
		rows = append(rows, []string{r.Policy, fmtCost(r.Cost), fmtCost(r.LostCost), fmtDuration(r.Makespan), met, r.End,
			strconv.Itoa(r.Preemptions), fmtDuration(r.Lost), strconv.Itoa(r.Trials), best})
	}
	table(w, header, rows)
	for _, r := range out.Runs {
		fmt.Fprintf(w, "\n%s: pools\n", r.Policy)
		var rows [][]string
		for _, p := range r.Pools {
			market := "on-demand"
			if p.Spot {
				market = "spot"
			}
			rows = append(rows, []string{p.Pool, market, strconv.FormatFloat(p.NodeHours, 'f', 1, 64), fmtCost(p.Cost), fmtCost(p.LostCost),
				strconv.Itoa(p.Attempts), strconv.Itoa(p.Preemptions)})
		}
		table(w, []string{"POOL", "MARKET", "NODE-HOURS", "COST", "LOST", "ATTEMPTS", "PREEMPTIONS"}, rows)
	}
}
