package control

import (
	"encoding/binary"
	hashfnv "hash/fnv"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/schedule"
	"github.com/virga-ml/virga/internal/spec"
)

// TestSettledSnapshot changes the trials of an experiment at random, as the
// loop does (through setTrial), and checks after each change that the
// policy's snapshot, which sums settled trials once (settled.go), is the
// one a visit of every trial builds (snapshotEveryTrial, the snapshot as
// it was before).
func TestSettledSnapshot(t *testing.T) {
	sp, err := spec.Parse("e.yaml", []byte(`name: s
entrypoint: [train]
hyperparameters: {lr: {type: float, min: 0.1, max: 1}}
searcher: {sampler: random, stopper: asha, mode: promote, min_resource: 1, max_resource: 9, reduction_factor: 3}
objective: {metric: loss, direction: minimize}
max_trials: 40
max_concurrent: 6
resources: {cpu: 1}
deadline: 10h
`))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	c := &Controller{cfg: Config{TickInterval: time.Minute}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), met: newMetrics()}
	es := &expState{exp: &virga.Experiment{CreatedAt: t0}, spec: sp}
	es.pol.stepSum, es.pol.steps = time.Minute, 1
	pools := []backend.PoolStatus{{Name: "spot", Capacity: virga.Resources{CPU: 4}, Free: virga.Resources{CPU: 2}, Up: true, Preemptible: true},
		{Name: "ondemand", Capacity: virga.Resources{CPU: 8}, Free: virga.Resources{CPU: 5}, Up: true}}
	res := virga.Resources{CPU: 1}
	rng := rand.New(rand.NewPCG(3, 4))
	states := []virga.TrialState{virga.TrialQueued, virga.TrialRunning, virga.TrialPaused, virga.TrialCompleted, virga.TrialStopped, virga.TrialFailed}
	now := t0
	var attempts int64
	settledSeen := 0
	for i := range 4000 {
		now = now.Add(time.Duration(rng.IntN(90)) * time.Second)
		switch {
		case len(es.trials) < 40 && rng.IntN(8) == 0:
			ts := &trialState{exp: es, t: &virga.Trial{Seq: len(es.trials) + 1, CreatedAt: now}}
			if !c.setTrial(newIteration(), ts, virga.TrialQueued, virga.ReasonNone, "", now) {
				t.Fatal("cannot queue a new trial")
			}
			if rng.IntN(4) == 0 {
				ts.t.ParentStep = int64(rng.IntN(3))
			}
			es.addTrial(ts)
		case len(es.trials) > 0:
			ts := es.trials[rng.IntN(len(es.trials))]
			if ts.attempt != nil && rng.IntN(2) == 0 {
				// A report: a step, maybe saved.
				ts.t.Step++
				ts.speed.report(es, ts.attempt.ID, ts.t.Step, now, rng.IntN(3) == 0)
				if rng.IntN(10) == 0 {
					ts.stopping, ts.moveTo = stopMove, pools[rng.IntN(2)].Name
				}
				break
			}
			to := states[rng.IntN(len(states))]
			if probe := *ts.t; probe.Transition(to, virga.ReasonNone, "", now) != nil {
				break
			}
			if !c.setTrial(newIteration(), ts, to, virga.ReasonNone, "", now) {
				t.Fatalf("setTrial %s -> %s refused", ts.t.State, to)
			}
			ts.attempt, ts.stopping, ts.moveTo = nil, notStopping, ""
			if to == virga.TrialRunning {
				attempts++
				ts.attempt = &virga.Attempt{ID: attempts, Pool: pools[rng.IntN(2)].Name, Backend: "sim"}
				ts.started = now
			}
			if to == virga.TrialQueued && rng.IntN(3) == 0 {
				ts.notBefore = now.Add(time.Minute)
			}
		}
		if rng.IntN(500) == 0 {
			es.pol.stepSum += time.Duration(rng.IntN(100)) * time.Second // the mean step time changes
			es.pol.steps++
		}
		got, want := c.snapshot(es, pools, res, now), c.snapshotEveryTrial(es, pools, res, now)
		if len(got.e.Trials) == 0 {
			got.e.Trials = nil // kept for the next snapshot (snapshotBuf): empty, not nil
		}
		if !reflect.DeepEqual(got.e, want.e) {
			t.Fatalf("change %d: snapshot differs from one that visits every trial (-every trial +snapshot):\n%s", i, cmp.Diff(want.e, got.e))
		}
		if sig := digestBytes(&want.e, want.trials); got.sig != sig {
			t.Fatalf("change %d: the snapshot's digest is %x, the digest of its trials and pools %x", i, got.sig, sig)
		}
		if !slices.Equal(got.trials, want.trials) {
			t.Fatalf("change %d: the snapshot's trials stand for other trials than a visit of every trial's", i)
		}
		settledSeen = max(settledSeen, len(es.trials)-len(es.active))
	}
	if settledSeen < 10 {
		t.Fatalf("at most %d trials settled at once: the test does not exercise the sums", settledSeen)
	}
}

// snapshotEveryTrial is snapshot as it was before settled.go: it visits
// every trial of es.
func (c *Controller) snapshotEveryTrial(es *expState, pools []backend.PoolStatus, res virga.Resources, now time.Time) *policyView {
	steps := stepsPerTrial(es)
	step := es.pol.stepSum / time.Duration(es.pol.steps)
	shape := schedule.ShapeOf(es.spec, steps)
	v := &policyView{}
	e := &v.e
	e.Elapsed = now.Sub(es.exp.CreatedAt)
	e.Deadline = es.spec.Deadline.Time(es.exp.CreatedAt).Sub(es.exp.CreatedAt)
	if c.cfg.Pricer != nil {
		e.Budget = es.spec.Budget
	}
	e.Tick = c.cfg.TickInterval
	e.Checkpoint = step
	if es.pol.saves > 0 {
		e.Checkpoint = es.pol.saveSum / time.Duration(es.pol.saves)
	}
	e.Lanes = es.spec.MaxConcurrent
	e.Committed = es.pol.committed

	// Pools, in the backend's order.
	index := make(map[string]int, len(pools))
	var overhead time.Duration
	for i, ps := range pools {
		index[ps.Name] = i
		info, ok := c.cfg.PoolInfo[ps.Name]
		if !ok {
			info.Spot = ps.Preemptible
		}
		share := 1.0
		if info.Node != (virga.Resources{}) {
			if s, err := capacity.Share(res, info.Node); err == nil && s > 0 {
				share = s
			}
		}
		price := 0.0
		if info.Price != nil {
			price = info.Price(now) * share
		}
		overhead = max(overhead, info.RestartOverhead)
		e.Pools = append(e.Pools, schedule.Pool{
			Name: ps.Name, Spot: info.Spot, Slots: fitCount(ps.Capacity, res), Free: fitCount(ps.Free, res),
			Up: ps.Up, Reclaiming: ps.Reclaiming(now), Price: price, Overhead: info.RestartOverhead,
			MinCost: price * info.MinBilled.Hours(), Stats: info.Stats,
		})
	}

	// A slot of the pool a trial is moving to is kept for it while its
	// attempt stops (the simulator moves a trial at once).
	for _, ts := range es.trials {
		if ts.attempt != nil && ts.stopping == stopMove && ts.moveTo != "" {
			if i, ok := index[ts.moveTo]; ok {
				e.Pools[i].Free = max(e.Pools[i].Free-1, 0)
			}
		}
	}

	// Trials, and the search's progress.
	prog := schedule.Progress{Lowest: math.MaxInt64, Overhead: overhead, Exhausted: es.exhausted, StepTime: step,
		Reached: make([]int, len(shape.Rungs)), Passed: make([]int, len(shape.Rungs))}
	var means []time.Duration
	for _, ts := range es.trials {
		t := ts.t
		kept := keptStep(ts)
		own := ts.speed.stepTime()
		if own > 0 {
			means = append(means, own)
		} else {
			own = step
		}
		done := max(kept-t.ParentStep, 0)
		prog.Steps += done
		e.Done += time.Duration(done) * own
		for k, r := range shape.Rungs {
			if t.Step >= r {
				prog.Reached[k]++
				if t.Step > r {
					prog.Passed[k]++
					if shape.Promote {
						prog.Attempts++ // resumed past the rung
					}
				}
			}
		}
		prog.Attempts++
		if t.State.Terminal() {
			prog.Ended++
			prog.EndedSteps += t.Step
			continue
		}
		prog.Lowest = min(prog.Lowest, kept)
		waiting := ts.attempt == nil && t.State == virga.TrialQueued
		if ts.attempt == nil && !waiting {
			continue // paused
		}
		prog.Live = append(prog.Live, schedule.LiveTrial{Step: kept, StepTime: ts.speed.stepTime()})
		tr := schedule.Trial{ID: int64(len(v.trials) + 1), Pool: -1, Done: time.Duration(done) * own,
			Left: time.Duration(max(shape.Steps-kept, 0)) * own, Final: shape.Final(kept), PauseAhead: shape.PauseAhead(kept)}
		if waiting {
			if now.Before(ts.notBefore) {
				continue
			}
		} else {
			a := ts.attempt
			i, ok := index[a.Pool]
			if !ok || ts.stopping != notStopping || a.Backend == apiBackend {
				continue // not the policy's to move
			}
			tr.Pool = i
			over := e.Pools[i].Overhead
			from := ts.started.Add(over) // progress starts after the restart overhead
			if ts.speed.attempt != a.ID {
				tr.Starting = max(from.Sub(now), 0) // no report yet
			}
			if ts.speed.attempt == a.ID && ts.speed.savedAt.After(from) {
				from = ts.speed.savedAt
			}
			tr.Unsaved = max(now.Sub(from), 0)
		}
		e.Trials = append(e.Trials, tr)
		v.trials = append(v.trials, ts)
	}
	if prog.Lowest == math.MaxInt64 {
		prog.Lowest = 0
	}
	if len(means) > 0 {
		slices.Sort(means)
		prog.Slow = means[min(len(means)-1, int(math.Ceil(slowQuantile*float64(len(means))))-1)]
	}
	e.Left, e.Chain = shape.EstimateWork(prog)
	return v
}

// digestBytes is the snapshot's digest (policyView.sig) as hash/fnv sums
// it over the bytes it encodes, as the snapshot did before summing it as it
// builds.
func digestBytes(e *schedule.Experiment, trials []*trialState) uint64 {
	h := hashfnv.New64a()
	var b []byte
	for i, t := range e.Trials {
		b = append(b, 't')
		b = binary.AppendVarint(b, int64(trials[i].t.Seq))
		b = binary.AppendVarint(b, int64(t.Pool))
		b = append(b, flags(t.Starting > 0, t.Final))
	}
	for _, p := range e.Pools {
		b = append(b, 'p')
		b = binary.AppendVarint(b, int64(p.Slots))
		b = binary.AppendVarint(b, int64(p.Free))
		b = append(b, flags(p.Up, p.Reclaiming))
	}
	h.Write(b)
	return h.Sum64()
}
