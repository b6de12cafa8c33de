package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
	simb "github.com/virga-ml/virga/internal/backend/sim"
	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/clock"
	"github.com/virga-ml/virga/internal/control"
	"github.com/virga-ml/virga/internal/schedule"
	"github.com/virga-ml/virga/internal/search"
	"github.com/virga-ml/virga/internal/spec"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/memory"
)

// OpenStore opens the store a simulated run keeps its state in: the
// in-memory store (internal/store/memory), which passes the same
// conformance suite as SQLite and PostgreSQL. dir is the run's own
// temporary directory, for a store that keeps files. It is a variable so
// that a test can run the loop on another store.
var OpenStore = func(ctx context.Context, dir string) (store.Store, error) {
	return memory.New(), nil
}

// RunLoop simulates one experiment by running Virga's control loop
// (control.Controller) on the simulated backend (internal/backend/sim) in
// virtual time: it submits the experiment file as a user would, makes the
// trials' reports through the loop's report path and moves the clock from
// one event to the next, stepping the loop at each, until the experiment
// ends. cfg.Data must be the experiment file's content (cfg.Spec parsed
// from it, and maybe changed).
func RunLoop(cfg ExperimentConfig) (*ExperimentResult, error) {
	e := cfg.Spec
	switch {
	case e == nil:
		return nil, errors.New("sim: no experiment")
	case cfg.Data == nil:
		return nil, errors.New("sim: no experiment file content")
	case cfg.Curves == nil:
		return nil, errors.New("sim: no learning-curve table")
	case len(cfg.Pools) == 0:
		return nil, errors.New("sim: no pools")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// 1. The experiment as submitted: the run's seed, deadline and budget.
	seed := cfg.Seed
	if seed == 0 {
		seed = e.Seed
	}
	if seed == 0 {
		seed = 1
	}
	ex := *e
	ex.Seed = seed
	if len(ex.Entrypoint.Argv) == 0 {
		// A file for the simulator alone names no trainer: its trials are
		// the table's, run by the backend (not driven through the API).
		ex.Entrypoint.Argv = []string{"simulated-trial"}
	}
	switch {
	case cfg.Deadline > 0:
		ex.Deadline = spec.Deadline{After: spec.Duration(cfg.Deadline)}
	case cfg.Deadline < 0:
		ex.Deadline = spec.Deadline{}
	}
	switch {
	case cfg.Budget > 0:
		ex.Budget = cfg.Budget
	case cfg.Budget < 0:
		ex.Budget = 0
	}
	start := cfg.Start
	if start.IsZero() {
		start = time.Unix(0, 0).UTC()
	}
	var deadline time.Duration
	if !ex.Deadline.IsZero() {
		deadline = ex.Deadline.Time(start).Sub(start)
		if deadline <= 0 {
			return nil, fmt.Errorf("the deadline %s is not after the start %s", ex.Deadline.At.Format(time.RFC3339), start.Format(time.RFC3339))
		}
	}
	tick := cfg.Tick
	if tick <= 0 {
		tick = time.Minute
	}
	limit := cfg.Limit
	if limit <= 0 {
		limit = 365 * 24 * time.Hour
		if deadline > 0 {
			limit = 4 * deadline
		}
	}

	// 2. The backend's pools, their availability from the trace offset.
	rng := cfg.Rand
	if rng == nil {
		rng = rand.New(rand.NewPCG(seed, 0x73696d))
	}
	clk := clock.NewFake(start)
	var pools []simb.Pool
	info := map[string]control.PoolInfo{}
	for _, p := range cfg.Pools {
		sp := simb.Pool{Pool: p}
		tl := p.Timeline(start.Add(-cfg.TraceOffset), rng)
		if p.Preemption != nil && p.Spot() {
			sp.Availability = tl
		}
		pools = append(pools, sp)
		info[p.Name] = control.PoolInfo{Spot: p.Spot(), Node: p.Node, Price: p.Price, RestartOverhead: p.RestartOverhead,
			MinBilled: p.Billing.Billed(max(p.RestartOverhead, 1)), Stats: schedule.StatsOfPool(p.Stats())}
	}
	b, err := simb.New(simb.Config{Clock: clk, Curves: cfg.Curves, Metric: ex.Objective.Metric, Pools: pools, SaveOnStop: cfg.SaveOnStop})
	if err != nil {
		return nil, err
	}
	defer b.Close()

	// 3. The control loop, on a store of its own.
	dir, err := os.MkdirTemp(scratchRoot(), "virga-sim-")
	if err != nil {
		dir, err = os.MkdirTemp("", "virga-sim-") // shared memory not writable
	}
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	st, err := OpenStore(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	ctl, err := control.New(control.Config{Store: st, Backend: b, Checkpoints: simb.Checkpoints{}, DataDir: dir,
		ReportBase: "http://sim.invalid", Secret: []byte("sim"), Pricer: (&capacity.Set{Pools: cfg.Pools}).Pricer(),
		Policy: cfg.Policy, PoolInfo: info, Clock: clk, Rand: rand.New(rand.NewPCG(seed, 1)),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), TickInterval: tick, NoTicker: true, Volatile: true,
		NewSearcher: func(e *spec.Experiment, _ uint64) (search.Searcher, error) { return search.New(e, seed) }})
	if err != nil {
		return nil, err
	}
	go func() { _ = ctl.Run(ctx) }()
	defer func() { cancel(); <-ctl.Done() }()
	select {
	case <-ctl.Ready():
	case <-ctl.Done():
		return nil, fmt.Errorf("sim: control loop: %w", ctl.Err())
	}
	file := cfg.File
	if file == "" {
		file = "experiment.yaml"
	}
	// The estimate a user submits with the experiment (virga run
	// --estimate): the table's steps per trial and mean epoch, as a profile
	// would measure them. The policy decides from it until the loop has
	// measured the trials' own.
	estimate, err := json.Marshal(map[string]any{"steps_per_trial": cfg.Curves.Table.Epochs, "step_time": cfg.Curves.MeanEpoch()})
	if err != nil {
		return nil, err
	}
	exp, err := ctl.SubmitSpec(ctx, file, cfg.Data, estimate, &ex)
	if err != nil {
		return nil, err
	}

	// 4. From event to event: the trials' reports, then one pass of the
	// loop with the backend's events, until the experiment ends.
	d := &driver{ctl: ctl, b: b, curves: cfg.Curves}
	state := exp.State
	end := start.Add(limit)
	nextTick := start.Add(tick)
	stopped := false
	for !state.Terminal() {
		if err := d.pass(ctx); err != nil {
			return nil, err
		}
		// The pass is committed when StepEvents returns: read the
		// experiment's state from the store (the loop's updates arrive on
		// their own goroutine, and a run must not depend on when).
		if exp, err = st.Experiment(ctx, exp.ID); err != nil {
			return nil, err
		}
		state = exp.State
		if state.Terminal() {
			break
		}
		now := clk.Now()
		next := b.Next()
		if next.Equal(now) {
			continue // events or reports at this instant still
		}
		if next.IsZero() || next.After(nextTick) {
			next = nextTick
		}
		if !next.Before(nextTick) {
			nextTick = nextTick.Add(tick)
		}
		if !stopped && next.After(end) {
			// Out of simulated time: stop what runs, as a user would.
			clk.Set(end)
			if _, err := ctl.Control(ctx, exp.ID, wire.OpStop); err != nil {
				return nil, err
			}
			stopped = true
			continue
		}
		clk.Set(next)
		b.Advance()
	}

	// 5. What happened, from the store.
	return d.result(ctx, st, exp, cfg, &ex, start, deadline, stopped)
}

type driver struct {
	ctl    *control.Controller
	b      *simb.Backend
	curves *Curves
	steps  int64
	work   time.Duration
	events int
	passes int
}

// pass makes the waiting reports, then steps the loop with the events.
func (d *driver) pass(ctx context.Context) error {
	for reps := d.b.TakeReports(); len(reps) > 0; reps = d.b.TakeReports() {
		for _, r := range reps {
			dec, err := d.ctl.Report(ctx, r.AttemptID, wire.Report{Step: r.Step, Metrics: r.Metrics})
			if errors.Is(err, control.ErrSuperseded) {
				err = nil
				dec = search.Stop
			}
			if err != nil && ctx.Err() != nil {
				return err
			}
			d.b.Decided(r, dec != search.Continue, err)
			if _, progress := r.Metrics[simb.ProgressMetric]; !progress {
				d.steps++
			}
		}
	}
	evs := d.b.TakeEvents()
	d.events += len(evs)
	d.passes++
	return d.ctl.StepEvents(ctx, evs)
}

// result reads the run's outcome from the store.
func (d *driver) result(ctx context.Context, st store.Store, exp *virga.Experiment, cfg ExperimentConfig, e *spec.Experiment,
	start time.Time, deadline time.Duration, limited bool) (*ExperimentResult, error) {
	r := &ExperimentResult{Deadline: deadline, Budget: e.Budget, Events: d.events, Decisions: d.passes}
	switch {
	case deadline == 0:
		r.Policy = FirstFit{}.Name() // the loop asks no policy without a deadline
	case cfg.Policy != nil:
		r.Policy = cfg.Policy.Name()
	}
	trials, err := st.Trials(ctx, exp.ID)
	if err != nil {
		return nil, err
	}
	attempts, err := st.ExperimentAttempts(ctx, exp.ID)
	if err != nil {
		return nil, err
	}
	usage := make([]PoolUsage, len(cfg.Pools))
	idx := map[string]int{}
	for i, p := range cfg.Pools {
		usage[i] = PoolUsage{Pool: p.Name, Spot: p.Spot()}
		idx[p.Name] = i
	}
	res := virga.Resources{CPU: e.Resources.CPU, MemoryMB: e.Resources.MemoryMB, GPU: e.Resources.GPU}
	last := start
	for _, a := range attempts {
		r.Cost += a.Cost
		r.LostCost += a.LostCost
		if a.EndedAt.After(last) {
			last = a.EndedAt
		}
		i, ok := idx[a.Pool]
		if !ok {
			continue
		}
		u := &usage[i]
		u.Attempts++
		u.Cost += a.Cost
		u.LostCost += a.LostCost
		if a.Outcome == virga.OutcomePreempted {
			u.Preemptions++
			r.Preemptions++
		}
		if !a.StartedAt.IsZero() && a.EndedAt.After(a.StartedAt) {
			p := cfg.Pools[i]
			share, _ := capacity.Share(res, p.Node)
			u.NodeHours += p.Billing.Billed(a.EndedAt.Sub(a.StartedAt)).Hours() * share
		}
	}
	r.Pools = usage
	better := func(v, than float64) bool {
		if e.Objective.Direction == spec.Maximize {
			return v > than
		}
		return v < than
	}
	for _, t := range trials {
		r.Trials++
		cfgIdx, _ := cfg.Curves.Config(t.HParams)
		steps := cfg.Curves.Steps(t.HParams)
		if t.State == virga.TrialCompleted && t.Step >= int64(steps) {
			r.Completed++
		}
		for s := 1; s <= int(t.Step); s++ {
			r.Work += cfg.Curves.StepTime(cfgIdx, s)
		}
		if t.Best != nil && (r.Best == nil || better(*t.Best, r.Best.Value)) {
			r.Best = &Best{Trial: t.ID, Step: t.BestStep, Value: *t.Best, Config: cfgIdx, HParams: t.HParams}
		}
	}
	evs, err := st.Events(ctx, store.EventFilter{ExperimentID: exp.ID})
	if err != nil {
		return nil, err
	}
	for _, ev := range evs {
		if ev.Kind == virga.EventTrialMoved {
			r.Moves++
		}
	}
	r.Steps = d.steps
	r.Lost, r.Moved = d.b.Thrown()
	end := exp.UpdatedAt
	if end.Before(last) {
		end = last
	}
	r.Makespan = end.Sub(start)
	switch {
	case limited:
		r.End = "limit"
	case exp.State == virga.ExperimentStopped && exp.Reason == virga.ReasonBudgetSpent:
		r.End = "budget"
	case exp.State == virga.ExperimentCompleted:
		r.End = "completed"
	default:
		r.End = string(exp.Reason)
	}
	r.Finished = r.End == "completed"
	r.Met = r.Finished && (deadline == 0 || r.Makespan <= deadline)
	return r, nil
}
