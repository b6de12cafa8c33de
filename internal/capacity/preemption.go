package capacity

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/virga-ml/virga/internal/capacity/trace"
	"github.com/virga-ml/virga/internal/spec"
)

// Preemption is a pool's preemption model: when its capacity is available.
// It yields a Timeline per start time and random source, and the summary
// statistics scheduling policies use. Build one with Never, ReplayTrace,
// RateModel or BidModel. It is immutable and safe for concurrent use; a nil
// *Preemption is Never.
type Preemption struct {
	kind spec.PreemptionKind
	desc string

	// Trace replay, in wall time: changes within one period of the trace.
	changes      []time.Duration
	period       time.Duration
	wrap, up0    bool
	offset       time.Duration
	randomOffset bool

	// Rate: mean up time and mean outage.
	meanUp, outage time.Duration

	// Bid: absolute change times from origin.
	origin time.Time

	stats Stats
}

// Stats summarises a preemption model, in wall time.
type Stats struct {
	// Available is the fraction of the time capacity is up, in [0, 1].
	Available float64
	// MeanUp is the mean length of a run of availability; 0 when capacity
	// is never reclaimed.
	MeanUp time.Duration
	// MeanOutage is the mean length of a run of unavailability; 0 when
	// capacity is never down or never up (see Available).
	MeanOutage time.Duration
	// PreemptionsPerHour is the reclaims per hour of up time, the hazard a
	// running node faces (a rate model's rate); 0 when never reclaimed.
	PreemptionsPerHour float64
}

// Never is the model of capacity that is never reclaimed.
func Never() *Preemption {
	return &Preemption{kind: spec.PreemptNone, desc: "none", stats: Stats{Available: 1}}
}

// minWallTick is the shortest a trace tick may last in wall time.
const minWallTick = time.Microsecond

// ReplayTrace replays an availability trace (up while the count is > 0) from
// offset into it (in trace time), speed times faster than it was recorded:
// each tick lasts Tick/speed of wall time. A trace shorter than the horizon
// wraps around. With randomOffset, each Timeline starts at a point of the
// trace drawn uniformly from its random source instead, and offset is
// ignored.
func ReplayTrace(a *trace.Availability, speed float64, offset time.Duration, randomOffset bool) (*Preemption, error) {
	if len(a.Count) == 0 {
		return nil, errors.New("the trace has no ticks")
	}
	if !(speed > 0) || math.IsInf(speed, 0) {
		return nil, fmt.Errorf("speed must be > 0, got %g", speed)
	}
	if a.Tick <= 0 {
		return nil, fmt.Errorf("the trace's tick is %v", a.Tick)
	}
	wallTick := float64(a.Tick) / speed
	if wallTick < float64(minWallTick) {
		return nil, fmt.Errorf("at speed %g a tick of %v would last under %v; lower the speed", speed, a.Tick, minWallTick)
	}
	if offset < 0 {
		return nil, fmt.Errorf("offset must be >= 0, got %v", offset)
	}
	wall := func(k int) time.Duration {
		if speed == 1 {
			return time.Duration(k) * a.Tick
		}
		return time.Duration(math.Round(float64(k) * wallTick))
	}
	n := len(a.Count)
	if float64(n)*wallTick > float64(maxHorizon) {
		return nil, fmt.Errorf("the trace spans more than %v at speed %g", maxHorizon, speed)
	}
	m := &Preemption{kind: spec.PreemptTrace, up0: a.Count[0] > 0, period: wall(n), randomOffset: randomOffset}
	for k := 1; k < n; k++ {
		if (a.Count[k] > 0) != (a.Count[k-1] > 0) {
			m.changes = append(m.changes, wall(k))
		}
	}
	m.wrap = (a.Count[n-1] > 0) != m.up0
	if !randomOffset {
		m.offset = time.Duration(math.Round(float64(offset%a.Duration()) / speed))
		m.offset %= m.period
	}
	m.desc = fmt.Sprintf("trace of %d ticks of %v at %gx", n, a.Tick, speed)
	m.stats = cyclicStats(a.Count, wallTick)
	return m, nil
}

// cyclicStats computes Stats over counts taken as repeating, each tick
// lasting tick nanoseconds.
func cyclicStats(counts []int, tick float64) Stats {
	n := len(counts)
	upTicks, reclaims := 0, 0
	for i, c := range counts {
		if c > 0 {
			upTicks++
			if counts[(i+1)%n] == 0 {
				reclaims++
			}
		}
	}
	s := Stats{Available: float64(upTicks) / float64(n)}
	if reclaims == 0 { // always up or always down
		return s
	}
	s.MeanUp = time.Duration(float64(upTicks) * tick / float64(reclaims))
	s.MeanOutage = time.Duration(float64(n-upTicks) * tick / float64(reclaims))
	s.PreemptionsPerHour = float64(reclaims) / (float64(upTicks) * tick / float64(time.Hour))
	return s
}

// RateModel reclaims a running node after exponential up times of mean
// 1/perHour hours; the capacity then stays gone for exponential outages of
// mean outage. Each Timeline starts in the long-run state: up with
// probability Available.
func RateModel(perHour float64, outage time.Duration) (*Preemption, error) {
	meanUp := float64(time.Hour) / perHour
	if !(perHour > 0) || !(meanUp >= 1) || meanUp > float64(maxHorizon) {
		return nil, fmt.Errorf("rate must give a mean up time between 1ns and %v, got %g per hour", maxHorizon, perHour)
	}
	if outage <= 0 || outage > maxHorizon {
		return nil, fmt.Errorf("outage must be > 0 and at most %v, got %v", maxHorizon, outage)
	}
	up := time.Duration(meanUp)
	return &Preemption{
		kind: spec.PreemptRate, meanUp: up, outage: outage,
		desc: fmt.Sprintf("rate %.4g/h (mean up %v), outages of %v", perHour, up.Round(time.Second), outage),
		stats: Stats{
			Available:          float64(up) / float64(up+outage),
			MeanUp:             up,
			MeanOutage:         outage,
			PreemptionsPerHour: perHour,
		},
	}, nil
}

// BidModel is down while the spot price of s is above bid (an old-style
// spot market, where a node lasts while the bid covers the price). The
// price before the first step is the first step's; NaN steps (no price)
// keep the price before them.
func BidModel(s *trace.Series, bid float64) (*Preemption, error) {
	if !(bid > 0) || math.IsInf(bid, 0) {
		return nil, fmt.Errorf("bid must be > 0, got %g", bid)
	}
	steps := finiteSteps(s.Steps)
	if len(steps) == 0 {
		return nil, errors.New("the price series has no price")
	}
	m := &Preemption{kind: spec.PreemptBid, origin: steps[0].Time, up0: steps[0].USDPerHour <= bid,
		desc: fmt.Sprintf("bid %g USD/h", bid)}
	up := m.up0
	for _, st := range steps[1:] {
		if now := st.USDPerHour <= bid; now != up {
			m.changes = append(m.changes, st.Time.Sub(m.origin))
			up = now
		}
	}
	// The statistics cover the series' span: from its first step to its last.
	end := steps[len(steps)-1].Time.Sub(m.origin)
	if end <= 0 {
		m.stats.Available = 0
		if m.up0 {
			m.stats.Available = 1
		}
		return m, nil
	}
	var upTime, downTime time.Duration
	upRuns, downRuns, reclaims := 0, 0, 0
	up, from := m.up0, time.Duration(0)
	for i := 0; i <= len(m.changes); i++ {
		to := end
		if i < len(m.changes) {
			to = m.changes[i]
		}
		if to > from {
			if up {
				upTime += to - from
				upRuns++
			} else {
				downTime += to - from
				downRuns++
			}
		}
		if i < len(m.changes) {
			if up {
				reclaims++
			}
			up, from = !up, to
		}
	}
	m.stats.Available = float64(upTime) / float64(end)
	if reclaims > 0 && upRuns > 0 {
		m.stats.MeanUp = upTime / time.Duration(upRuns)
		m.stats.PreemptionsPerHour = float64(reclaims) / upTime.Hours()
	}
	if downRuns > 0 && upRuns > 0 {
		m.stats.MeanOutage = downTime / time.Duration(downRuns)
	}
	return m, nil
}

// finiteSteps returns the steps without NaN prices (each keeps the price
// before it) and with one step per instant (the last written).
func finiteSteps(in []trace.Price) []trace.Price {
	out := make([]trace.Price, 0, len(in))
	for _, st := range in {
		if math.IsNaN(st.USDPerHour) || math.IsInf(st.USDPerHour, 0) {
			continue
		}
		if len(out) > 0 && out[len(out)-1].Time.Equal(st.Time) {
			out[len(out)-1] = st
			continue
		}
		if len(out) > 0 && out[len(out)-1].USDPerHour == st.USDPerHour {
			continue
		}
		out = append(out, st)
	}
	return out
}

// Kind is the model: none, trace, rate or bid.
func (m *Preemption) Kind() spec.PreemptionKind {
	if m == nil {
		return spec.PreemptNone
	}
	return m.kind
}

// String describes the model, e.g. "rate 0.5/h, outages of 10m0s".
func (m *Preemption) String() string {
	if m == nil {
		return "none"
	}
	return m.desc
}

// Stats returns the model's summary statistics: from the whole trace for a
// replay (taken as repeating, in wall time), from the price series' span for
// a bid, exact for a rate.
func (m *Preemption) Stats() Stats {
	if m == nil {
		return Stats{Available: 1}
	}
	return m.stats
}

// Timeline returns the availability from start on. rng is drawn from only
// by a rate model and a replay from a random offset (a few numbers, at
// once; the Timeline keeps its own generator seeded from them, so it is
// deterministic whatever is drawn from rng later); nil stands for a fixed
// seed. A bid model's timeline is in absolute time (that of the price
// series) whatever start is.
func (m *Preemption) Timeline(start time.Time, rng *rand.Rand) *Timeline {
	if m == nil || m.kind == spec.PreemptNone {
		return &Timeline{origin: start, up0: true}
	}
	switch m.kind {
	case spec.PreemptTrace:
		tl := &Timeline{origin: start, up0: m.up0, changes: m.changes, period: m.period, wrap: m.wrap, offset: m.offset}
		if m.randomOffset {
			tl.offset = time.Duration(orFixed(rng).Int64N(int64(m.period)))
		}
		return tl
	case spec.PreemptRate:
		r := orFixed(rng)
		g := &generator{
			rng:    rand.New(rand.NewPCG(r.Uint64(), r.Uint64())),
			meanUp: float64(m.meanUp),
			outage: float64(m.outage),
		}
		g.up = g.rng.Float64() < m.stats.Available
		g.cur.Store(&drawn{})
		return &Timeline{origin: start, up0: g.up, gen: g}
	default: // bid
		return &Timeline{origin: m.origin, up0: m.up0, changes: m.changes}
	}
}

// orFixed returns rng, or a generator with a fixed seed when it is nil.
func orFixed(rng *rand.Rand) *rand.Rand {
	if rng == nil {
		return rand.New(rand.NewPCG(0x5669726761, 0x706f6f6c))
	}
	return rng
}
