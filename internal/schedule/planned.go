package schedule

import (
	"math"
	"sync"
	"time"
)

// Planned is Virga's single-job deadline policy: the decision that minimises
// the expected cost of finishing by the deadline, under a model of the spot
// pool fitted to its history. The model is a two-state Markov chain (capacity
// up or down) whose mean up and down periods are the pool's measured ones
// (PoolStats); the plan is a dynamic program over (time left, work left,
// node held and its remaining restart overhead, spot up now), solved once per
// pool and decision interval and looked up at every decision. Missing the
// deadline has infinite cost, so the plan moves to on-demand exactly when
// waiting or staying on spot could make the deadline unreachable in the
// model; the shared safety net (as for Greedy) still guards against a model
// that is wrong. Unlike Greedy, it spends on-demand time in outages when the
// spot time left is likely too short, which keeps the end of the job free
// for spot capacity; unlike Uniform Progress, it does not when spot capacity
// is likely enough.
//
// A Planned is safe for concurrent use; it keeps the last few plans.
type Planned struct {
	mu    sync.Mutex
	plans []*plan // most recently used last
}

// Name implements Policy.
func (*Planned) Name() string { return "planned" }

// maxPlans bounds the plans a Planned keeps (each is a table of the size of
// ticks left x work left x 2 x node states).
const maxPlans = 4

// planKey is what a plan depends on.
type planKey struct {
	tick, overhead, checkpoint time.Duration
	pool                       PoolStats
	spot, onDemand             float64
}

type plan struct {
	key  planKey
	k, w int // horizon: ticks left and work left (in ticks) covered
	o    int // restart overhead in ticks
	ns   int // node states: none, spot with 0..o overhead left, on-demand with 0..o left
	// dec[((k*(w+1)+w)*ns+s)*2+u] is the decision; inf marks states from
	// which the deadline cannot be met even on on-demand.
	dec []Instance
	inf []bool
}

// Decide implements Policy.
func (p *Planned) Decide(j *Job) Instance {
	if mustOnDemand(j) || j.Tick <= 0 {
		return OnDemand
	}
	k := int(j.Remaining() / j.Tick)
	w := int((j.Left() + j.Tick - 1) / j.Tick)
	if k <= 0 || w <= 0 {
		return OnDemand
	}
	pl := p.plan(j, k, w)
	o := int((j.Starting + j.Tick - 1) / j.Tick)
	s := 0
	switch j.Running {
	case Spot:
		s = 1 + min(o, pl.o)
	case OnDemand:
		s = pl.o + 2 + min(o, pl.o)
	}
	u := 0
	if j.SpotUp {
		u = 1
	}
	i := ((k*(pl.w+1)+w)*pl.ns+s)*2 + u
	if pl.inf[i] {
		return OnDemand
	}
	return pl.dec[i]
}

// plan returns a plan covering k ticks and w work ticks for j's pool.
func (p *Planned) plan(j *Job, k, w int) *plan {
	key := planKey{j.Tick, j.Overhead, j.Checkpoint, j.Pool, j.SpotPrice, j.OnDemandPrice}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, pl := range p.plans {
		if pl.key == key && pl.k >= k && pl.w >= w {
			p.plans = append(append(p.plans[:i:i], p.plans[i+1:]...), pl)
			return pl
		}
	}
	// Round the horizon up so that a few sizes cover many jobs.
	const round = 256
	for i, pl := range p.plans {
		if pl.key == key {
			k, w = max(k, pl.k), max(w, pl.w)
			p.plans = append(p.plans[:i:i], p.plans[i+1:]...)
			break
		}
	}
	pl := solve(key, (k+round)/round*round, (w+round)/round*round)
	if len(p.plans) >= maxPlans {
		p.plans = p.plans[1:]
	}
	p.plans = append(p.plans, pl)
	return pl
}

// solve computes the plan by backward induction over the ticks left.
func solve(key planKey, K, W int) *plan {
	tick := key.tick
	o := 0
	if key.overhead > 0 {
		o = max(1, int(math.Ceil(float64(key.overhead)/float64(tick))))
	}
	ns := 2*o + 3
	pl := &plan{key: key, k: K, w: W, o: o, ns: ns}
	n := (K + 1) * (W + 1) * ns * 2
	pl.dec = make([]Instance, n)
	pl.inf = make([]bool, n)

	// Availability chain per tick.
	stayUp, stayDown := 0.0, 1.0
	switch {
	case key.pool.MeanUp > 0:
		stayUp = math.Exp(-float64(tick) / float64(key.pool.MeanUp))
	case key.pool.Available >= 1:
		stayUp = 1 // never reclaimed
	}
	if key.pool.MeanDown > 0 {
		stayDown = math.Exp(-float64(tick) / float64(key.pool.MeanDown))
	} else if key.pool.Available > 0 {
		stayDown = 0
	}
	pUp := [2]float64{1 - stayDown, stayUp} // P(up next | down now), P(up next | up now)
	// Work a preemption throws away, in ticks, on average.
	loss := int(math.Round(float64(key.checkpoint) / 2 / float64(tick)))
	cost := [3]float64{0, key.spot * tick.Hours(), key.onDemand * tick.Hours()}
	inf := math.Inf(1)

	stride := ns * 2
	prev := make([]float64, (W+1)*stride) // values with k-1 ticks left
	cur := make([]float64, (W+1)*stride)
	for i := stride; i < len(prev); i++ {
		prev[i] = inf // no time left, work left: missed
	}
	// mix is p*a + (1-p)*b, where a term of weight 0 counts nothing even
	// if its value is infinite.
	mix := func(p, a, b float64) float64 {
		switch p {
		case 1:
			return a
		case 0:
			return b
		}
		return p*a + (1-p)*b
	}
	val := func(v []float64, w, s, u int) float64 {
		if w <= 0 {
			return 0
		}
		return v[(w*ns+s)*2+u]
	}
	// next returns the expected value after running inst (1 spot, 2
	// on-demand) with ov overhead ticks left from work w.
	next := func(inst Instance, ov, w, u int) float64 {
		w2, ov2 := w, ov
		if ov > 0 {
			ov2--
		} else {
			w2--
		}
		if w2 <= 0 {
			return 0
		}
		base := 1 // spot states 1..o+1
		if inst == OnDemand {
			base = o + 2
		}
		s2 := base + ov2
		up := pUp[u]
		if inst == Spot {
			// Preempted if capacity goes: back to no node, with lost work.
			return mix(up, val(prev, w2, s2, 1), val(prev, min(w2+loss, W), 0, 0))
		}
		return mix(up, val(prev, w2, s2, 1), val(prev, w2, s2, 0))
	}
	for k := 1; k <= K; k++ {
		for w := 1; w <= W; w++ {
			for s := 0; s < ns; s++ {
				held, ov := None, 0
				switch {
				case s >= 1 && s <= o+1:
					held, ov = Spot, s-1
				case s >= o+2:
					held, ov = OnDemand, s-o-2
				}
				for u := 0; u < 2; u++ {
					// Waiting.
					best, dec := mix(pUp[u], val(prev, w, 0, 1), val(prev, w, 0, 0)), None
					for _, inst := range [2]Instance{Spot, OnDemand} {
						if inst == Spot && u == 0 {
							continue
						}
						start := ov
						if held != inst {
							start = o
						}
						v := cost[inst] + next(inst, start, w, u)
						// On a tie, running on spot beats waiting: it
						// costs no more and finishes sooner.
						if v < best || inst == Spot && v <= best {
							best, dec = v, inst
						}
					}
					i := (w*ns+s)*2 + u
					cur[i] = best
					gi := ((k*(W+1)+w)*ns+s)*2 + u
					pl.dec[gi] = dec
					pl.inf[gi] = math.IsInf(best, 1)
				}
			}
		}
		prev, cur = cur, prev
	}
	return pl
}
