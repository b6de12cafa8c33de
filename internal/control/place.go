package control

import (
	"fmt"
	"slices"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/search"
	"github.com/virga-ml/virga/internal/spec"
)

// Placement is what a PlaceFunc decides from: one trial about to start and
// the backend's pools as the control loop sees them. Experiment, Spec and
// Trial are the loop's own (read only, and only during the call); Pools is
// the policy's copy.
type Placement struct {
	Now        time.Time
	Experiment *virga.Experiment
	Spec       *spec.Experiment
	// Trial is the trial to start; its ID is 0 if the searcher has just
	// proposed it (it is committed with its first attempt).
	Trial *virga.Trial
	// Needs is what one attempt of the trial takes.
	Needs virga.Resources
	// Pools are the backend's pools in its order (the first is its
	// default), each one's Free net of the attempts already placed on it and
	// not yet seen started.
	Pools []backend.PoolStatus
}

// PlaceFunc picks the pool an attempt of p.Trial starts on: the name of one
// of p.Pools, or ok false to leave the trial waiting (it is asked again at
// the next pass of the loop, at least every TickInterval). It runs on the
// control loop's goroutine, so it must be quick and must not block; it is a
// function of p (and of what the policy itself keeps), and must not change p.
// A pool it picks that is not up or lacks room is refused: the trial waits.
type PlaceFunc func(p *Placement) (pool string, ok bool)

// FirstFit is the default PlaceFunc: the first pool, in the backend's
// order, that is up, is not being reclaimed (its warning has not begun) and
// has room for the trial; none means wait.
func FirstFit(p *Placement) (string, bool) {
	for _, ps := range p.Pools {
		if ps.Up && !ps.Reclaiming(p.Now) && p.Needs.Fits(ps.Free) {
			return ps.Name, true
		}
	}
	return "", false
}

// poolStatus returns the backend's pools with each one's Free net of what
// is in flight on it, or nil if the backend has no named pools.
func (c *Controller) poolStatus() []backend.PoolStatus {
	pb, ok := c.cfg.Backend.(backend.Pooled)
	if !ok {
		return nil
	}
	pools := pb.Pools()
	for i := range pools {
		pools[i].Free = pools[i].Free.Sub(c.inflightPool[pools[i].Name])
	}
	return pools
}

// poolRoom reports whether some pool is up with room for res: no trial can
// be placed otherwise.
func poolRoom(pools []backend.PoolStatus, res virga.Resources) bool {
	for _, p := range pools {
		if p.Up && res.Fits(p.Free) {
			return true
		}
	}
	return false
}

// fitsEver reports whether res fits in what the backend can ever offer: in
// one of pools, or, without pools, in the backend's capacity if it is a
// sizer; known is false if the backend cannot tell. most is what the
// backend (each of its pools) has at most, and where names it, for messages.
func (c *Controller) fitsEver(pools []backend.PoolStatus, res virga.Resources) (fits bool, most virga.Resources, where string, known bool) {
	if pools == nil {
		sz, ok := c.cfg.Backend.(sizer)
		if !ok {
			return true, virga.Resources{}, "", false
		}
		return res.Fits(sz.Capacity()), sz.Capacity(), "the " + c.cfg.Backend.Name() + " backend", true
	}
	for _, p := range pools {
		if res.Fits(p.Capacity) {
			return true, p.Capacity, "", true
		}
		most = virga.Resources{CPU: max(most.CPU, p.Capacity.CPU), MemoryMB: max(most.MemoryMB, p.Capacity.MemoryMB), GPU: max(most.GPU, p.Capacity.GPU)}
	}
	return false, most, "each pool of the " + c.cfg.Backend.Name() + " backend", true
}

// place asks the placement policy for ts's pool and, if it picks one that
// can take the trial, reserves the trial's resources there (in pools and in
// flight) and records the choice for createAttempts.
func (c *Controller) place(ts *trialState, res virga.Resources, pools []backend.PoolStatus, now time.Time) bool {
	name, ok := c.cfg.Place(&Placement{Now: now, Experiment: ts.exp.exp, Spec: ts.exp.spec, Trial: ts.t, Needs: res, Pools: slices.Clone(pools)})
	if !ok {
		return false
	}
	for i := range pools {
		p := &pools[i]
		if p.Name != name {
			continue
		}
		if !p.Up || !res.Fits(p.Free) {
			c.log.Warn("the placement policy picked a pool that cannot take the trial now; it waits",
				"experiment", ts.exp.exp.ID, "trial", ts.t.ID, "pool", name, "up", p.Up, "free", fmtResources(p.Free))
			return false
		}
		p.Free = p.Free.Sub(res)
		if c.inflightPool == nil {
			c.inflightPool = map[string]virga.Resources{}
		}
		c.inflightPool[name] = c.inflightPool[name].Add(res)
		ts.pool = name
		return true
	}
	c.log.Warn("the placement policy picked a pool the backend does not have; the trial waits",
		"experiment", ts.exp.exp.ID, "trial", ts.t.ID, "pool", name)
	return false
}

// releasePool gives back what an attempt placed on pool had in flight.
func (c *Controller) releasePool(pool string, res virga.Resources) {
	if pool == "" || c.inflightPool == nil {
		return
	}
	left := c.inflightPool[pool].Sub(res)
	if left == (virga.Resources{}) {
		delete(c.inflightPool, pool)
		return
	}
	c.inflightPool[pool] = left
}

// maxFruitlessPreemptions is how many preemptions in a row without a new
// checkpoint a trial takes for free; each one beyond counts as a restart (so
// a trainer that never checkpoints cannot loop forever on a pool that is
// reclaimed before it finishes). From the second in a row the trial also
// waits a tick before it is placed again.
const maxFruitlessPreemptions = 5

// afterPreempted settles a trial whose attempt a was preempted (its pool's
// capacity was reclaimed) while its experiment is active: it is queued to
// resume from its latest checkpoint, on whichever pool the placement policy
// picks, without counting a restart.
func (c *Controller) afterPreempted(it *iteration, ts *trialState, a *virga.Attempt, now time.Time) {
	t, es := ts.t, ts.exp
	if t.Checkpoint != a.Restored {
		ts.fruitless = 0
	} else {
		ts.fruitless++
	}
	pool := "pool " + a.Pool
	if a.Pool == "" {
		pool = "the " + a.Backend + " backend"
	}
	if ts.fruitless > maxFruitlessPreemptions {
		why := fmt.Sprintf("preempted %d times in a row without saving a new checkpoint (last by %s)", ts.fruitless, pool)
		if t.Restarts >= es.spec.MaxRestarts {
			c.endTrial(it, ts, virga.TrialFailed, virga.ReasonPreemptedWithoutProgress,
				why+"; checkpoint more often or use capacity that is not preemptible", search.Failed, now)
			return
		}
		t.Restarts++
	}
	if ts.fruitless >= 2 {
		ts.notBefore = now.Add(c.cfg.TickInterval)
	}
	msg := "preempted: " + pool + " reclaimed its capacity; resuming from " + ckptName(t.Checkpoint)
	c.setTrial(it, ts, virga.TrialQueued, virga.ReasonPreempted, msg, now)
	it.event(&virga.Event{ExperimentID: es.exp.ID, TrialID: t.ID, AttemptID: a.ID, Kind: virga.EventTrialPreempted, Message: msg, Time: now})
}
