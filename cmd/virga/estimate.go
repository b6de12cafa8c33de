package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/client"
	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/forecast"
	"github.com/virga-ml/virga/internal/search"
	"github.com/virga-ml/virga/internal/server"
	"github.com/virga-ml/virga/internal/sim"
	"github.com/virga-ml/virga/internal/spec"
	"github.com/virga-ml/virga/internal/steptime"
)

// estimateOpts are virga estimate's flags.
type estimateOpts struct {
	capacity   string
	spot, od   string
	steps      int64
	stepTime   time.Duration
	samples    int
	seed       uint64
	checkpoint time.Duration
	profile    int
	configs    int
	profileFor time.Duration
	unmodelled float64
	// unmodelledSet is whether --unmodelled was given: it then wins over a
	// calibration from earlier runs.
	unmodelledSet bool
}

func newEstimateCmd(g *globals) *cobra.Command {
	var o estimateOpts
	cmd := &cobra.Command{
		Use:   "estimate FILE --capacity CAPACITY",
		Short: "Forecast an experiment's wall time, cost and chance of meeting its deadline on each plan, before running it",
		Long: `Forecast, for each plan (on-demand only, spot only, Virga's policy), the expected wall time, the expected cost
and the probability of meeting the experiment's deadline, by Monte-Carlo over the spot pool's availability (its
trace from random offsets, or its rate model).

The work comes from the steps per trial (--steps, else the searcher's max_resource, else earlier runs of an
experiment of the same name) and the time per step on one node (--step-time, else earlier runs). Early
stopping by asha or hyperband is counted with its expected share of the steps.

What the model leaves out (contention, the control loop's gaps, other load) is learnt from earlier runs: every
completed experiment submitted with an estimate (virga run --capacity or --estimate) is a pair of that estimate and
what the run took. With at least 3 pairs of experiments of the same name (else of the same entrypoint, else of all),
the log of actual over predicted wall time shifts and widens the forecast (a Student's t prediction interval);
with fewer, --unmodelled's spread is used. An explicit --unmodelled wins over a calibration.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.unmodelledSet = cmd.Flags().Changed("unmodelled")
			return g.estimate(cmd.Context(), args[0], o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.capacity, "capacity", "", "capacity file with the pools (required)")
	f.StringVar(&o.spot, "spot", "", "spot pool to plan with (default: the file's first spot pool)")
	f.StringVar(&o.od, "on-demand", "", "on-demand pool to plan with (default: the file's first on-demand pool)")
	f.Int64Var(&o.steps, "steps", 0, "steps (reports) per trial that runs to the end")
	f.DurationVar(&o.stepTime, "step-time", 0, "time per step on one node, e.g. 40s")
	f.IntVar(&o.samples, "samples", 200, "Monte-Carlo samples")
	f.Uint64Var(&o.seed, "seed", 1, "seed of the samples")
	f.IntVar(&o.profile, "profile", 0, "run a few configurations that span the space on this machine, this many steps each, to learn the time per step")
	f.IntVar(&o.configs, "profile-configs", 4, "configurations --profile runs")
	f.DurationVar(&o.profileFor, "profile-timeout", 10*time.Minute, "longest the --profile run of one group of configurations (max_concurrent at once) may take")
	f.Float64Var(&o.unmodelled, "unmodelled", forecast.DefaultUnmodelled, "log standard deviation of the time the model leaves out (contention, the loop's gaps, other load), when fewer than 3 earlier runs calibrate it; given, it is used even then; 0: none")
	f.DurationVar(&o.checkpoint, "checkpoint-interval", 0, "work between checkpoints; 0: the trial saves at the reclaim warning")
	return cmd
}

// estimateReport is virga estimate's --json output.
type estimateReport struct {
	Experiment string             `json:"experiment"`
	Trials     int                `json:"trials"`
	Steps      int64              `json:"steps_per_trial"`
	StepTime   time.Duration      `json:"step_time"`
	Source     string             `json:"source"` // where steps and step time came from
	Work       time.Duration      `json:"work"`   // node time
	Slots      int                `json:"slots"`
	Deadline   time.Time          `json:"deadline,omitzero"`
	Plans      []sim.PlanEstimate `json:"plans"`
	Infeasible string             `json:"infeasible,omitempty"`
	Earliest   time.Time          `json:"earliest,omitzero"`
	EarliestIn time.Duration      `json:"earliest_in,omitempty"` // from now
	Budget     float64            `json:"budget,omitempty"`
	// PerTrial is the steps a trial is expected to run (fewer than Steps
	// with early stopping).
	PerTrial float64 `json:"expected_steps_per_trial"`
	// WorkP10 and WorkP90 bound the node time when the step time was learnt
	// (from Measured step times: profiled configurations, earlier trials).
	WorkP10  time.Duration `json:"work_p10,omitempty"`
	WorkP90  time.Duration `json:"work_p90,omitempty"`
	Measured int           `json:"measured,omitempty"`
	// Startup is what each attempt takes before its first step, measured
	// by the profile: billed, no progress, like a pool's restart overhead.
	Startup time.Duration `json:"startup,omitempty"`
	// Calibration, when set, is what earlier runs say of the model's error:
	// it stretched and spread the plans in place of Unmodelled.
	Calibration *calibrationUsed `json:"calibration,omitempty"`
	// Unmodelled is the spread used for what the model leaves out when no
	// calibration was (0: none).
	Unmodelled float64 `json:"unmodelled,omitempty"`
	// unmodelledGiven is whether Unmodelled came from --unmodelled.
	unmodelledGiven bool
	// calibrationErr is why earlier runs could not be read, if they could
	// not.
	calibrationErr error
}

// calibrationUsed is a calibration and the earlier runs it was made from.
type calibrationUsed struct {
	forecast.Calibration
	// Of says whose runs: "experiment NAME", "entrypoint ARGV" or "all
	// experiments".
	Of string `json:"of"`
}

func (g *globals) estimate(ctx context.Context, file string, o estimateOpts) error {
	rep, err := g.computeEstimate(ctx, file, o, nil)
	if err != nil {
		return err
	}
	if g.json {
		return g.printJSON(rep)
	}
	printEstimate(g.stdout, rep)
	return nil
}

// computeEstimate forecasts the run of the experiment in file on the pools
// of o.capacity; history, if not nil, is the server whose earlier runs give
// the work when the flags do not.
func (g *globals) computeEstimate(ctx context.Context, file string, o estimateOpts, history *client.Client) (*estimateReport, error) {
	if o.capacity == "" {
		return nil, usageError{errors.New("estimate needs --capacity FILE (the pools to plan with; see docs/capacity.md)")}
	}
	e, data, err := spec.Load(file)
	if err != nil {
		return nil, usageError{err}
	}
	_, set, err := server.LoadCapacity(ctx, o.capacity, false)
	if err != nil {
		return nil, usageError{err}
	}
	spot, od, err := planPools(set, o)
	if err != nil {
		return nil, usageError{err}
	}
	wm, err := g.workModel(ctx, file, data, e, o, history)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	total := forecast.ExpectedSteps(e, wm.steps)
	work := time.Duration(total * float64(wm.stepTime))
	rep := estimateReport{Experiment: e.Name, Trials: e.MaxTrials, Steps: wm.steps, StepTime: wm.stepTime, Source: wm.source, Work: work, Slots: e.MaxConcurrent}
	in := sim.EstimateInput{Work: work, Slots: e.MaxConcurrent, Spot: spot, OnDemand: od, Checkpoint: o.checkpoint, Samples: o.samples, Seed: o.seed, Start: now,
		Attempts: forecast.AttemptShares(e, wm.steps, o.seed), Startup: wm.startup, Unmodelled: o.unmodelled}
	rep.Startup = wm.startup
	if !o.unmodelledSet {
		// Without earlier runs to read (no state yet, a server older than
		// the calibration API), the estimate is not calibrated.
		pairs, err := g.calibrationPairs(ctx, history)
		switch {
		case err == nil:
			rep.Calibration = calibrationFor(e, pairs)
		case !errors.Is(err, fs.ErrNotExist):
			rep.calibrationErr = err
		}
	}
	if rep.Calibration != nil {
		in.Factor, in.Unmodelled = rep.Calibration.Factor, 0
	} else {
		rep.Unmodelled, rep.unmodelledGiven = max(o.unmodelled, 0), o.unmodelledSet
	}
	if wm.model != nil {
		if in.WorkDraws, err = workDraws(e, wm.model, total, max(o.samples, 1), o.seed); err != nil {
			return nil, err
		}
		rep.Work = meanDuration(in.WorkDraws)
		in.Work = rep.Work
		rep.WorkP10, rep.WorkP90 = quantileDuration(in.WorkDraws, 0.1), quantileDuration(in.WorkDraws, 0.9)
		rep.Measured = wm.model.Measurements()
	}
	res := virga.Resources{CPU: e.Resources.CPU, MemoryMB: e.Resources.MemoryMB, GPU: e.Resources.GPU}
	for _, p := range []struct {
		pool  *capacity.Pool
		share *float64
	}{{spot, &in.SpotShare}, {od, &in.OnDemandShare}} {
		if p.pool == nil {
			continue
		}
		if *p.share, err = capacity.Share(res, p.pool.Node); err != nil {
			return nil, usageError{fmt.Errorf("%s: pool %q: %w", o.capacity, p.pool.Name, err)}
		}
	}
	if !e.Deadline.IsZero() {
		rep.Deadline = e.Deadline.Time(now)
		in.Deadline = rep.Deadline.Sub(now)
		if in.Deadline <= 0 {
			return nil, usageError{fmt.Errorf("%s: deadline %s has passed", file, rep.Deadline.Format(time.RFC3339))}
		}
	}
	rep.Plans, err = sim.Estimate(in)
	var late *sim.InfeasibleError
	if errors.As(err, &late) {
		rep.Infeasible = err.Error()
		rep.Earliest, rep.EarliestIn = now.Add(late.Earliest), late.Earliest
	} else if err != nil {
		return nil, err
	}
	rep.Budget = e.Budget
	rep.PerTrial = total / float64(max(e.MaxTrials, 1))
	return &rep, nil
}

// maxPairs is how many of the newest pairs a calibration is made from:
// the code, data and machines of older runs are less like the next one's.
const maxPairs = 50

// calibrationFor makes the calibration of an estimate of e from the newest
// pairs (newest first) of experiments of its name, else of its entrypoint,
// else of all: the first with at least forecast.MinPairs; nil if none has.
func calibrationFor(e *spec.Experiment, pairs []forecast.Pair) *calibrationUsed {
	for _, scope := range []struct {
		of   string
		keep func(forecast.Pair) bool
	}{
		{"experiment " + e.Name, func(p forecast.Pair) bool { return p.Name == e.Name }},
		{"entrypoint " + strings.Join(e.Entrypoint.Argv, " "), func(p forecast.Pair) bool {
			return len(e.Entrypoint.Argv) > 0 && slices.Equal(p.Entrypoint, e.Entrypoint.Argv)
		}},
		{"all experiments", func(forecast.Pair) bool { return true }},
	} {
		var kept []forecast.Pair
		for _, p := range pairs {
			if _, ok := p.Ratio(); ok && scope.keep(p) && len(kept) < maxPairs {
				kept = append(kept, p)
			}
		}
		if c, ok := forecast.Calibrate(kept); ok {
			return &calibrationUsed{Calibration: c, Of: scope.of}
		}
	}
	return nil
}

// calibrationPairs reads the calibration pairs of c's server, or of the
// one of the data directory (none if it has no state yet).
func (g *globals) calibrationPairs(ctx context.Context, c *client.Client) ([]forecast.Pair, error) {
	if c != nil {
		return c.Calibration(ctx, "")
	}
	if g.server == "" {
		if _, ok := server.Running(g.dataDir); !ok {
			if _, err := os.Stat(filepath.Join(g.dataDir, "virga.db")); err != nil {
				return nil, err
			}
		}
	}
	c, done, err := g.client(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	return c.Calibration(ctx, "")
}

// roundWall rounds a forecast time to what is worth printing: seconds
// under an hour (fmtDuration shows milliseconds under one), minutes beyond.
func roundWall(d time.Duration) time.Duration {
	switch {
	case d < time.Second:
		return d
	case d < time.Hour:
		return d.Round(time.Second)
	}
	return d.Round(time.Minute)
}

// designPoints is how many configurations spread over the space stand for
// the search's trials when a learnt step time is averaged over them.
const designPoints = 256

// workDraws draws the whole experiment's node time from a learnt step-time
// model: each draw is one possible truth of the model (its weights and
// noise), averaged over configurations that span the space, times the
// steps all trials are expected to run.
func workDraws(e *spec.Experiment, m *steptime.Model, steps float64, n int, seed uint64) ([]time.Duration, error) {
	r := rand.New(rand.NewPCG(seed, 0x776f726b))
	pts, err := search.Design(e, designPoints, r)
	if err != nil {
		return nil, err
	}
	res := virga.Resources{CPU: e.Resources.CPU, MemoryMB: e.Resources.MemoryMB, GPU: e.Resources.GPU}
	draws := make([]time.Duration, n)
	for i := range draws {
		s := m.Sample(r)
		sum := 0.0
		for _, p := range pts {
			st, err := s.StepTime(p, res)
			if err != nil {
				return nil, err
			}
			sum += st.Seconds()
		}
		draws[i] = time.Duration(steps * sum / float64(len(pts)) * float64(time.Second))
	}
	return draws, nil
}

// meanStepTime is a model's median step time averaged over configurations
// that span the space.
func meanStepTime(e *spec.Experiment, m *steptime.Model, seed uint64) (time.Duration, error) {
	pts, err := search.Design(e, designPoints, rand.New(rand.NewPCG(seed, 0x776f726b)))
	if err != nil {
		return 0, err
	}
	res := virga.Resources{CPU: e.Resources.CPU, MemoryMB: e.Resources.MemoryMB, GPU: e.Resources.GPU}
	sum := 0.0
	for _, p := range pts {
		pr, err := m.Predict(p, res)
		if err != nil {
			return 0, err
		}
		sum += pr.Median().Seconds()
	}
	return time.Duration(sum / float64(len(pts)) * float64(time.Second)), nil
}

func meanDuration(xs []time.Duration) time.Duration {
	s := 0.0
	for _, x := range xs {
		s += float64(x)
	}
	return time.Duration(s / float64(len(xs)))
}

func quantileDuration(xs []time.Duration, q float64) time.Duration {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

// printEstimate prints an estimate as a table.
func printEstimate(w io.Writer, rep *estimateReport) {
	fmt.Fprintf(w, "%s: %d trials x %s steps x %s per step (%s) = %s of node time",
		rep.Experiment, rep.Trials, fmtSteps(rep.PerTrial), fmtDuration(rep.StepTime), rep.Source, fmtDuration(roundWall(rep.Work)))
	if rep.WorkP90 > 0 {
		fmt.Fprintf(w, " (p10 %s, p90 %s: the step time learnt from %d measurements, with its error)", fmtDuration(roundWall(rep.WorkP10)), fmtDuration(roundWall(rep.WorkP90)), rep.Measured)
	}
	fmt.Fprintf(w, ", %d at a time", rep.Slots)
	if rep.Startup > 0 {
		fmt.Fprintf(w, "; each attempt %s to start", fmtDuration(rep.Startup))
	}
	fmt.Fprintln(w)
	if c := rep.Calibration; c != nil {
		fmt.Fprintf(w, "calibrated on %d earlier runs (%s): actual/predicted median %.2f, p10 %.2f, p90 %.2f\n", c.Pairs, c.Of, c.Median, c.P10, c.P90)
	} else if rep.unmodelledGiven {
		fmt.Fprintf(w, "unmodelled spread %.2g (--unmodelled)\n", rep.Unmodelled)
	} else if rep.calibrationErr != nil {
		fmt.Fprintf(w, "not calibrated (earlier runs could not be read: %v): unmodelled spread %.2g\n", rep.calibrationErr, rep.Unmodelled)
	} else {
		fmt.Fprintf(w, "not calibrated (fewer than %d earlier runs with an estimate): unmodelled spread %.2g\n", forecast.MinPairs, rep.Unmodelled)
	}
	if !rep.Deadline.IsZero() {
		fmt.Fprintf(w, "deadline %s (in %s)", fmtTime(rep.Deadline), fmtDuration(time.Until(rep.Deadline).Round(time.Minute)))
	} else {
		fmt.Fprint(w, "no deadline")
	}
	if rep.Budget > 0 {
		fmt.Fprintf(w, ", budget %s", fmtCost(rep.Budget))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PLAN\tPOOLS\tWALL\tWALL p90\tCOST\tCOST p90\tP(DEADLINE)\tBUDGET")
	for _, p := range rep.Plans {
		meet := fmt.Sprintf("%.0f%%", 100*p.PMeet)
		if rep.Deadline.IsZero() {
			meet = "-"
		}
		budget := "-"
		if rep.Budget > 0 {
			budget = "fits"
			if p.Cost > rep.Budget {
				budget = "over"
			} else if p.CostP90 > rep.Budget {
				budget = "p90 over"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Plan, strings.Join(p.Pools, "+"), fmtDuration(roundWall(p.Wall)), fmtDuration(roundWall(p.WallP90)),
			fmtCost(p.Cost), fmtCost(p.CostP90), meet, budget)
	}
	_ = tw.Flush()
	for _, p := range rep.Plans {
		if p.Unfinished > 0 {
			fmt.Fprintf(w, "%s: %.0f%% of the samples had not finished after %s (counted as that)\n", p.Plan, 100*p.Unfinished, fmtDuration(p.WallP90.Round(time.Hour)))
		}
	}
	if rep.Infeasible != "" {
		fmt.Fprintf(w, "the deadline cannot be met even on on-demand capacity: the earliest finish is %s (%s from now); move the deadline or raise max_concurrent\n",
			fmtTime(rep.Earliest), fmtDuration(roundWall(rep.EarliestIn)))
	}
}

func fmtSteps(f float64) string {
	if f == math.Trunc(f) {
		return fmt.Sprintf("%.0f", f)
	}
	return fmt.Sprintf("%.1f", f)
}

// planPools picks the spot and on-demand pools to plan with.
func planPools(set *capacity.Set, o estimateOpts) (spot, od *capacity.Pool, err error) {
	pick := func(name string, wantSpot bool) (*capacity.Pool, error) {
		if name != "" {
			p := set.Pool(name)
			if p == nil {
				var names []string
				for _, p := range set.Pools {
					names = append(names, p.Name)
				}
				return nil, fmt.Errorf("%s: no pool named %q (pools: %s)", o.capacity, name, strings.Join(names, ", "))
			}
			if p.Spot() != wantSpot {
				return nil, fmt.Errorf("%s: pool %q is %s, not %s", o.capacity, name, p.Market, map[bool]string{true: "spot", false: "on-demand"}[wantSpot])
			}
			return p, nil
		}
		for _, p := range set.Pools {
			if p.Spot() == wantSpot {
				return p, nil
			}
		}
		return nil, nil
	}
	if spot, err = pick(o.spot, true); err != nil {
		return nil, nil, err
	}
	if od, err = pick(o.od, false); err != nil {
		return nil, nil, err
	}
	if spot == nil && od == nil {
		return nil, nil, fmt.Errorf("%s: no pools", o.capacity)
	}
	return spot, od, nil
}

// work is what an estimate knows of the work: the steps of a trial that
// runs to the end, and the time per step: given (--step-time), or learnt
// (model) from profiled configurations and earlier trials, stepTime then
// being its average over the space.
type work struct {
	steps    int64
	stepTime time.Duration
	model    *steptime.Model
	source   string
	// startup is what every attempt takes before its first step (measured
	// by a profile; 0 when unknown).
	startup time.Duration
}

// workModel finds the steps per trial and the time per step, from the
// flags, the searcher's settings, the experiment's constants, earlier runs
// of an experiment of the same name and a profile of configurations that
// span the space (--profile). The steps are found first, so that a profile
// is not run for an estimate that would lack them.
func (g *globals) workModel(ctx context.Context, file string, data []byte, e *spec.Experiment, o estimateOpts, history *client.Client) (work, error) {
	var from []string
	w := work{steps: o.steps, stepTime: o.stepTime}
	if w.steps > 0 {
		from = append(from, "--steps")
	} else if r := e.Searcher.Int("max_resource", 0); r > 0 {
		w.steps = r
		from = append(from, "max_resource")
	}
	if w.stepTime > 0 {
		from = append(from, "--step-time")
	}
	var hobs []steptime.Obs
	if w.steps <= 0 || w.stepTime <= 0 {
		h, herr := g.history(ctx, e.Name, history)
		if herr == nil && h.id != 0 {
			if w.steps <= 0 && h.steps > 0 {
				w.steps = h.steps
			}
			// The past run's trials are taken to have had this file's
			// resources.
			for _, ob := range h.obs {
				ob.Resources = virga.Resources{CPU: e.Resources.CPU, MemoryMB: e.Resources.MemoryMB, GPU: e.Resources.GPU}
				hobs = append(hobs, ob)
			}
			if w.stepTime <= 0 && len(hobs) == 0 && h.stepTime > 0 {
				w.stepTime = h.stepTime
			}
			w.startup = h.startup
			from = append(from, fmt.Sprintf("history: %d trials of experiment %d", len(hobs), h.id))
		}
	}
	if w.steps <= 0 {
		if name, n := forecast.StepsConstant(e); n > 0 {
			w.steps = n
			from = append(from, "hyperparameter "+name)
		}
	}
	if w.steps <= 0 {
		return work{}, usageError{fmt.Errorf("no steps per trial for %q: pass --steps N (the steps a trial runs to the end), or set the searcher's max_resource, or run it once", e.Name)}
	}
	if w.stepTime > 0 {
		w.source = strings.Join(from, ", ")
		return w, nil
	}
	obs := hobs
	if o.profile > 0 {
		pobs, startup, err := profileDesign(ctx, file, data, e, max(o.configs, 1), o.profile, o.profileFor, o.seed, g.stderr)
		if err != nil {
			return work{}, err
		}
		w.startup = startup
		obs = append(obs, pobs...)
		from = append(from, fmt.Sprintf("profile of %d configurations x %d steps on this machine", len(pobs), o.profile))
	}
	if len(obs) == 0 {
		return work{}, usageError{fmt.Errorf("no time per step for %q: pass --profile N (run a few configurations for N steps each here), --step-time, or run it once so that Virga can measure it", e.Name)}
	}
	m, err := steptime.Fit(e, obs)
	if err != nil {
		return work{}, err
	}
	if w.stepTime, err = meanStepTime(e, m, o.seed); err != nil {
		return work{}, err
	}
	w.model, w.source = m, strings.Join(from, ", ")
	return w, nil
}

// pastRun is what the latest ended experiment of a name tells of the work:
// the median steps of its completed trials, the median time per step of
// all its trials, and each trial's own median step time with its
// hyperparameters.
type pastRun struct {
	id       int64
	steps    int64
	stepTime time.Duration
	obs      []steptime.Obs
	startup  time.Duration // the median of its trials' start-up
}

// history measures the latest ended experiment named name.
func (g *globals) history(ctx context.Context, name string, c *client.Client) (pastRun, error) {
	if c != nil {
		return historyOf(ctx, c, name)
	}
	if g.server == "" {
		if _, ok := server.Running(g.dataDir); !ok {
			if _, err := os.Stat(filepath.Join(g.dataDir, "virga.db")); err != nil {
				return pastRun{}, err
			}
		}
	}
	c, done, err := g.client(ctx)
	if err != nil {
		return pastRun{}, err
	}
	defer done()
	return historyOf(ctx, c, name)
}

// historyOf measures the latest ended experiment named name on c's server.
func historyOf(ctx context.Context, c *client.Client, name string) (pastRun, error) {
	var out pastRun
	exps, err := c.Experiments(ctx, nil, 0)
	if err != nil {
		return pastRun{}, err
	}
	for _, x := range exps {
		if x.Name != name || x.State == virga.ExperimentActive {
			continue
		}
		if out.id != 0 && x.ID < out.id {
			continue
		}
		trials, err := c.Trials(ctx, x.ID)
		if err != nil {
			return pastRun{}, err
		}
		var stepsSeen []int64
		var per []float64
		var obs []steptime.Obs
		var ups []time.Duration
		for _, t := range trials {
			if t.State == virga.TrialCompleted {
				stepsSeen = append(stepsSeen, t.Step)
			}
			ms, err := c.Metrics(ctx, t.ID)
			if err != nil {
				return pastRun{}, err
			}
			var mine []float64
			for i := 1; i < len(ms); i++ {
				a, b := ms[i-1], ms[i]
				if a.AttemptID == b.AttemptID && b.Step > a.Step {
					mine = append(mine, float64(b.Time.Sub(a.Time))/float64(b.Step-a.Step))
				}
			}
			if len(mine) > 0 {
				per = append(per, mine...)
				slices.Sort(mine)
				st := time.Duration(mine[len(mine)/2])
				obs = append(obs, steptime.Obs{Point: t.HParams, StepTime: st})
				// The control loop creates a trial when it can start it:
				// creation to first report, less that report's steps, is
				// its first attempt's start-up.
				if up := ms[0].Time.Sub(t.CreatedAt) - time.Duration(ms[0].Step)*st; ms[0].AttemptID != 0 {
					ups = append(ups, max(up, 0))
				}
			}
		}
		if len(stepsSeen) == 0 || len(per) == 0 {
			continue
		}
		slices.Sort(stepsSeen)
		slices.Sort(per)
		out = pastRun{id: x.ID, steps: stepsSeen[len(stepsSeen)/2], stepTime: time.Duration(per[len(per)/2]), obs: obs}
		if len(ups) > 0 {
			slices.Sort(ups)
			out.startup = ups[len(ups)/2]
		}
	}
	return out, nil
}
