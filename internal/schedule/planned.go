package schedule

import (
	"math"
	"slices"
	"sync"
	"time"
)

// Planned is Virga's single-job deadline policy: the decision that minimises
// the expected cost of finishing by the deadline, under a model of the spot
// pool fitted to its history. The model is semi-Markov: capacity is up or
// down, and an up period or an outage ends in the next interval with the
// chance its measured lengths give for its age (PoolStats.UpPeriods and
// Outages; with none measured, a memoryless chain of the mean up and down
// periods). The plan is a dynamic program over (time left, work left, node
// held and its remaining restart overhead, work unsaved on spot since its
// last checkpoint, spot up or down and the age band of the period under
// way), solved once per pool and decision interval and looked up at every
// decision. Missing the deadline has infinite cost, so the plan moves to
// on-demand exactly when waiting or staying on spot could make the deadline
// unreachable in the model; the shared safety net (as for Greedy) still
// guards against a model that is wrong. Unlike Greedy, it spends on-demand
// time in outages when the spot time left is likely too short, which keeps
// the end of the job free for spot capacity; unlike Uniform Progress, it
// does not when spot capacity is likely enough. Real outages are
// long-tailed: the plan waits at the start of one (most end within
// minutes) and leaves for on-demand once it has lasted long enough that it
// likely goes on for hours.
//
// A Planned is safe for concurrent use; it keeps the last few plans.
type Planned struct {
	mu    sync.Mutex
	plans []*plan // most recently used last
}

// Name implements Policy.
func (*Planned) Name() string { return "planned" }

// maxPlans bounds the plans a Planned keeps (each is a table of two bits
// per state: ticks left x work left x node and age states).
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
	nc   int // work unsaved on spot, in ticks: 0..nc-1
	// ns is the number of node states with spot up: none; spot with
	// 1..o overhead ticks left; spot with no overhead left and 0..nc-1
	// ticks of work unsaved; on-demand with 0..o overhead ticks left.
	ns int
	nd int // node states with spot down: none, on-demand with 0..o overhead left
	// upEdges and downEdges are the first ages (in ticks) of the age
	// bands of up periods and outages the plan tells apart.
	upEdges, downEdges []int
	stride             int // states per (ticks left, work left): ns*len(upEdges) + nd*len(downEdges)
	// dec holds the decision in state i at (k, w), two bits at position
	// (k*(w+1)+w)*stride+i; a state from which the deadline cannot be met
	// even on on-demand holds OnDemand.
	dec []uint8
}

// get returns the decision at position n.
func (pl *plan) get(n int) Instance { return Instance(pl.dec[n/4] >> (2 * (n % 4)) & 3) }

// put sets the decision at position n.
func (pl *plan) put(n int, d Instance) { pl.dec[n/4] |= uint8(d) << (2 * (n % 4)) }

// band returns the band of edges that an age ticks old falls in.
func band(edges []int, age int) int {
	b, _ := slices.BinarySearch(edges, age+1)
	return max(b-1, 0)
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
	o := min(int((j.Starting+j.Tick-1)/j.Tick), pl.o)
	i := 0
	switch {
	case j.SpotUp && j.Running == Spot && o > 0:
		i = o
	case j.SpotUp && j.Running == Spot:
		i = pl.o + 1 + min(int((j.Unsaved+j.Tick/2)/j.Tick), pl.nc-1)
	case j.SpotUp && j.Running == OnDemand:
		i = pl.o + 1 + pl.nc + o
	}
	if j.SpotUp {
		i += band(pl.upEdges, int(j.UpFor/j.Tick)) * pl.ns
	} else {
		d := 0
		if j.Running == OnDemand {
			d = 1 + o
		}
		i = pl.ns*len(pl.upEdges) + band(pl.downEdges, int(j.DownFor/j.Tick))*pl.nd + d
	}
	return pl.get((k*(pl.w+1)+w)*pl.stride + i)
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

// maxDownAge and maxUpAge bound, in ticks, the ages of outages and of up
// periods a plan tells apart: older ones share the last band.
const (
	maxDownAge = 1024
	maxUpAge   = 16
)

// bands returns the age bands a plan tells apart for periods of the given
// lengths (nil: memoryless, one band) and their end rates per tick, with
// prior the memoryless end rate.
func bands(ps *Periods, tick time.Duration, limit int, prior float64) ([]int, []float64) {
	if ps == nil || prior <= 0 || prior >= 1 {
		return []int{0}, []float64{prior}
	}
	longest := int(ps.lengths[len(ps.lengths)-1] / tick)
	edges := ageEdges(min(max(longest, 1), limit))
	return edges, ps.endRates(tick, edges, prior)
}

// advance returns, for each band of edges, the chance per tick of moving on
// to the next band (the reciprocal of the band's width; none from the last).
func advance(edges []int) []float64 {
	adv := make([]float64, len(edges))
	for b := 0; b+1 < len(edges); b++ {
		adv[b] = 1 / float64(edges[b+1]-edges[b])
	}
	return adv
}

// solve computes the plan by backward induction over the ticks left.
func solve(key planKey, K, W int) *plan {
	tick := key.tick
	o := 0
	if key.overhead > 0 {
		o = max(1, int(math.Ceil(float64(key.overhead)/float64(tick))))
	}
	// Work a preemption throws away: what was done since the last
	// checkpoint, tracked in whole ticks.
	nc := 1
	if key.checkpoint > 0 {
		nc = max(1, int(math.Round(float64(key.checkpoint)/float64(tick))))
	}
	ns, nd := 2*o+2+nc, o+2
	// Up states: spot with ov > 0 overhead ticks left is ov; spot with
	// none left and u ticks unsaved is spotRun+u; on-demand with ov left
	// is od+ov.
	spotRun, od := o+1, o+1+nc

	// Availability per tick: an up period ends with a probability that
	// depends on how long it has lasted, fall[c] for ages in band c; an
	// outage ends with probability ret[b] for ages in band b (memoryless
	// without measured distributions of their lengths).
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
	downEdges, ret := bands(key.pool.Outages, tick, min(maxDownAge, K), 1-stayDown)
	upEdges, fall := bands(key.pool.UpPeriods, tick, min(maxUpAge, K), 1-stayUp)
	adv, advUp := advance(downEdges), advance(upEdges)
	nu := ns * len(upEdges) // up states

	stride := nu + nd*len(downEdges)
	pl := &plan{key: key, k: K, w: W, o: o, nc: nc, ns: ns, nd: nd, upEdges: upEdges, downEdges: downEdges, stride: stride}
	pl.dec = make([]uint8, ((K+1)*(W+1)*stride+3)/4)

	cost := [3]float64{0, key.spot * tick.Hours(), key.onDemand * tick.Hours()}
	inf := math.Inf(1)

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
	// up and down return the values with k-1 ticks left: spot up in node
	// state s, its up period in age band c; spot down in node state d, the
	// outage in age band b.
	up := func(w, s, c int) float64 {
		if w <= 0 {
			return 0
		}
		return prev[w*stride+c*ns+s]
	}
	down := func(w, d, b int) float64 {
		if w <= 0 {
			return 0
		}
		return prev[w*stride+nu+b*nd+d]
	}
	// upNext and downNext are the values of an up period in band c, or an
	// outage in band b, going on one more tick.
	upNext := func(w, s, c int) float64 {
		if w <= 0 {
			return 0
		}
		return mix(advUp[c], up(w, s, min(c+1, len(upEdges)-1)), up(w, s, c))
	}
	downNext := func(w, d, b int) float64 {
		if w <= 0 {
			return 0
		}
		return mix(adv[b], down(w, d, min(b+1, len(downEdges)-1)), down(w, d, b))
	}
	// step returns the work left and overhead left after a tick on a node
	// with ov overhead ticks left.
	step := func(w, ov int) (int, int) {
		if ov > 0 {
			return w, ov - 1
		}
		return w - 1, 0
	}
	for k := 1; k <= K; k++ {
		for w := 1; w <= W; w++ {
			row := w * stride
			grow := (k*(W+1) + w) * stride
			set := func(i int, best float64, dec Instance) {
				cur[row+i] = best
				if math.IsInf(best, 1) {
					dec = OnDemand // the deadline is out of reach
				}
				pl.put(grow+i, dec)
			}
			// Spot up, its up period in band c, node state s.
			for c := range upEdges {
				stay := 1 - fall[c]
				for s := 0; s < ns; s++ {
					held, ov, unsaved := None, 0, 0
					switch {
					case s >= 1 && s < spotRun:
						held, ov = Spot, s
					case s >= spotRun && s < od:
						held, unsaved = Spot, s-spotRun
					case s >= od:
						held, ov = OnDemand, s-od
					}
					// Waiting.
					best, dec := mix(stay, upNext(w, 0, c), down(w, 0, 0)), None
					// Spot: preempted if capacity goes, back to no node
					// with the work unsaved lost.
					start, u2 := o, 0
					if held == Spot {
						start, u2 = ov, unsaved
					}
					w2, ov2 := step(w, start)
					s2 := ov2
					if ov2 == 0 {
						if start == 0 && nc > 1 {
							u2 = (u2 + 1) % nc
						}
						s2 = spotRun + u2
					}
					v := cost[Spot]
					if w2 > 0 {
						v += mix(stay, upNext(w2, s2, c), down(min(w2+u2, W), 0, 0))
					}
					// On a tie, running on spot beats waiting: it costs no
					// more and finishes sooner.
					if v <= best {
						best, dec = v, Spot
					}
					start = o
					if held == OnDemand {
						start = ov
					}
					w2, ov2 = step(w, start)
					v = cost[OnDemand]
					if w2 > 0 {
						v += mix(stay, upNext(w2, od+ov2, c), down(w2, 1+ov2, 0))
					}
					if v < best {
						best, dec = v, OnDemand
					}
					set(c*ns+s, best, dec)
				}
			}
			// Spot down, the outage in band b, node state d.
			for b := range downEdges {
				r := ret[b]
				for d := 0; d < nd; d++ {
					best, dec := mix(r, up(w, 0, 0), downNext(w, 0, b)), None
					start := o
					if d > 0 {
						start = d - 1
					}
					w2, ov2 := step(w, start)
					v := cost[OnDemand]
					if w2 > 0 {
						v += mix(r, up(w2, od+ov2, 0), downNext(w2, 1+ov2, b))
					}
					if v < best {
						best, dec = v, OnDemand
					}
					set(nu+b*nd+d, best, dec)
				}
			}
		}
		prev, cur = cur, prev
	}
	return pl
}
