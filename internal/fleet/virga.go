package fleet

import (
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// Virga plans one start-up ahead instead of reacting:
//
//  1. Forecast. The level is the highest arrival rate over any Burst window
//     (30 s) within the last Level window (a burst seen recently is likely to
//     come back); the trend
//     is the least-squares slope of the per-interval rate over the last Fit
//     window. The forecast is level + max(0, slope) x (StartUp + Interval):
//     the rate when a replica launched now would be ready.
//  2. Size. N = ceil(forecast x (1 + Headroom) / Capacity) replicas. N goes
//     up at once and down only after a smaller N has been wanted for
//     DownHold.
//  3. Zones. Every available spot zone counts (with StableAfter > 0, only
//     those available that long without a break), except one where a replica
//     is under preemption notice: the reclaim takes the zone. From the pools'
//     availability at each decision Virga keeps, in its memo, each zone's
//     history as it has seen it: seconds up and losses (up to not up). A
//     zone's reclaim rate is hz = (losses + 1) / (seconds up + Prior), a
//     prior of one loss per Prior (2 h) of up-time that the zone's own
//     history outweighs within hours. A zone counts as lost from the first
//     preemption notice there (or, holding no replica, when it stops being
//     available). The chance rho that a loss takes a second zone with it is
//     the share of losses seen within one start-up of another zone's (prior
//     0.1). While two or more zones are under notice at once, rho is 1 and
//     every zone's rate is at least (share of zones going) / gap: a
//     correlated reclaim is under way, and the zones left are likely to
//     follow within the replacement window. Nothing is read from the whole
//     trace.
//  4. Mix. A loss in zone z leaves its c_z spot replicas missing for gap =
//     StartUp + Interval - Warning (Virga starts their replacements on the
//     notice), and the fleet's headroom h = spot + on-demand - M absorbs h
//     of them, where M = ceil(last minute's rate / Capacity) is what the
//     current load needs (N also covers bursts and the trend a start-up
//     ahead, which need not survive a loss). The expected share of the
//     load's replica-time lost is
//     sum_z hz_z x gap x ((1-rho) max(0, c_z - h) + rho max(0, c_z + c_other - h)) / M
//     (c_other: the largest other zone). Virga runs the S in [0, 3N] spot
//     replicas, placed one at a time where they add the least risk (lowest
//     hz x (c_z + 1)), and the fewest on-demand F >= N - S that keep that
//     share within Budget, whichever costs least per hour. Zones that are
//     rarely reclaimed so hold more replicas, extra spot goes where the
//     risk is, and on-demand is bought only when spot spread over the zones
//     up cannot keep the expected loss within Budget (one zone left, or all
//     flapping). With fewer than two zones counted, or a negative Budget,
//     the rule is the worst case instead:
//     F = max(0, N - S, M - (S - ceil(S/k))) over k zones, i.e. survive
//     losing the largest zone whatever its history.
//  5. Act. New spot replicas go where they add the least risk; spot
//     replicas under preemption notice are replaced at once; surplus spot
//     replicas are stopped after DownHold, from the zones with the most risk
//     (hz x c_z). The on-demand floor is recomputed from the spot replicas
//     actually live and goes up at once; it goes down after DownHold, and
//     only as far as the spot replicas ready now allow, so on-demand is not
//     released for spot that is still starting.
type Virga struct {
	Burst       time.Duration // 0 means 30 s
	StableAfter time.Duration // positive: only zones up that long count; 0 or negative: every available zone
	Level       time.Duration // 0 means 5 min
	Fit         time.Duration // 0 means 10 min
	Headroom    float64       // fraction added to the forecast; 0 means none
	DownHold    time.Duration // 0 means 5 min
	Min         int           // at least 1
	// Budget is the expected share of the current load's replica-time that
	// Virga lets reclaims take (step 4); 0 means 0.02. Negative means no
	// risk at all: the fleet survives losing its largest zone.
	Budget float64
	// Even spreads spot replicas evenly over the zones counted (the
	// fewest first, the lowest reclaim rate breaking ties) instead of by
	// risk (step 4).
	Even bool
	// Prior is the up-time a zone is assumed to hold per reclaim before
	// its own history says otherwise; 0 means 2 h.
	Prior time.Duration
}

var _ Policy = Virga{}

type virgaMemo struct {
	UpSince   map[string]time.Time // when each available zone's current run began (as seen)
	Zones     map[string]zoneStats // each zone's availability history, as seen
	Seen      time.Time            // the previous decision's time
	Downs     int                  // zone losses seen, all zones
	Joint     int                  // of which within one start-up of another zone's
	N         int
	Lower     int // consecutive decisions wanting fewer replicas
	ODLower   int // consecutive decisions wanting fewer on-demand replicas
	SpotLower int // consecutive decisions wanting fewer spot replicas
	Launched  bool
}

// Name implements Policy.
func (Virga) Name() string { return "virga" }

func (v Virga) withDefaults() Virga {
	if v.Level <= 0 {
		v.Level = 5 * time.Minute
	}
	if v.Burst <= 0 {
		v.Burst = 30 * time.Second
	}
	if v.Fit <= 0 {
		v.Fit = 10 * time.Minute
	}
	v.Headroom = max(v.Headroom, 0)
	if v.DownHold <= 0 {
		v.DownHold = 5 * time.Minute
	}
	v.Min = max(v.Min, 1)
	if v.Budget == 0 {
		v.Budget = 0.02
	}
	if v.Prior <= 0 {
		v.Prior = 2 * time.Hour
	}
	return v
}

// Forecast is step 1: the rate expected one start-up from now.
func (v Virga) Forecast(s *Snapshot) float64 {
	v = v.withDefaults()
	level := 0.0
	// Highest rate over a Burst window within the Level window.
	for end := len(s.History); end > 0; end-- {
		if s.Now.Sub(s.History[end-1].At) >= v.Level {
			break
		}
		n, d := 0, time.Duration(0)
		for i := end - 1; i >= 0 && d < v.Burst; i-- {
			n += s.History[i].Arrivals
			d += s.History[i].Interval
		}
		if d > 0 {
			level = math.Max(level, float64(n)/d.Seconds())
		}
	}
	// Least-squares slope of the rate over the Fit window.
	var sx, sy, sxx, sxy, k float64
	for i := len(s.History) - 1; i >= 0; i-- {
		h := s.History[i]
		age := s.Now.Sub(h.At)
		if age >= v.Fit {
			break
		}
		x := -age.Seconds()
		y := h.Rate()
		sx, sy, sxx, sxy, k = sx+x, sy+y, sxx+x*x, sxy+x*y, k+1
	}
	slope := 0.0
	if den := k*sxx - sx*sx; k >= 3 && den > 0 {
		slope = (k*sxy - sx*sy) / den
	}
	ahead := (s.StartUp + s.Interval).Seconds()
	return level + math.Max(0, slope)*ahead
}

// Decide implements Policy.
func (v Virga) Decide(s *Snapshot, _ *rand.Rand) Decision {
	v = v.withDefaults()
	m, _ := s.Memo.(virgaMemo)

	// Steps 1 and 2.
	need := v.Min
	if s.Capacity > 0 {
		need = max(need, int(math.Ceil(v.Forecast(s)*(1+v.Headroom)/s.Capacity)))
	}
	switch {
	case !m.Launched || need >= m.N:
		m.N, m.Lower, m.Launched = need, 0, true
	default:
		m.Lower++
		if m.Lower >= periods(v.DownHold, s.Interval) {
			m.N, m.Lower = need, 0
		}
	}
	n := m.N
	// What must survive a zone's loss: the current load (the last minute's
	// mean), for the replacements started at the notice to take over.
	survive := min(n, v.Min)
	if s.Capacity > 0 {
		survive = min(n, max(v.Min, int(math.Ceil(s.Rate(time.Minute)/s.Capacity))))
	}

	od := s.OnDemand()
	m, lostNow := m.observe(s, s.StartUp+s.Interval)
	// Step 3: the zones to count.
	up := map[string]time.Time{}
	var avail []string
	spotPrice := math.Inf(1)
	noticed := map[string]bool{}
	for _, r := range s.Replicas {
		if p := s.Pool(r.Pool); r.Preempting && p != nil {
			noticed[p.Zone] = true
		}
	}
	for _, p := range s.Pools {
		if p.Spot && p.Available && !noticed[p.Zone] {
			avail = addZone(avail, p.Zone)
			spotPrice = math.Min(spotPrice, p.Price)
			if t, ok := m.UpSince[p.Zone]; ok {
				up[p.Zone] = t
			} else {
				up[p.Zone] = s.Now
			}
		}
	}
	m.UpSince = up
	var zones []string
	for _, z := range avail {
		if v.StableAfter <= 0 || s.Now.Sub(up[z]) >= v.StableAfter {
			zones = append(zones, z)
		}
	}
	if len(zones) < 2 {
		zones = avail
	}
	odPrice := math.Inf(1)
	if od != nil {
		odPrice = od.Price
	}

	// Step 4: the cheapest mix whose expected loss to reclaims is within
	// the budget (or, with a negative budget, that survives losing a zone).
	risk := riskModel{hz: map[string]float64{}, rho: m.joint(), load: float64(max(survive, 1)), even: v.Even,
		gap: max(s.Interval, s.StartUp+s.Interval-s.Warning).Seconds()}
	for _, p := range s.Pools {
		if p.Spot {
			risk.hz[p.Zone] = m.hazard(p.Zone, v.Prior)
		}
	}
	if len(noticed) >= 2 || lostNow >= 2 {
		// Several zones going at once: a correlated event is under way.
		// Plan for the next loss taking two zones, and for each zone still
		// up going within the replacement window with the share of zones
		// now going.
		risk.rho = 1
		frac := float64(len(noticed)) / float64(len(noticed)+len(avail))
		for z, h := range risk.hz {
			risk.hz[z] = math.Max(h, frac/risk.gap)
		}
	}
	// With fewer than two zones to spread over, one loss takes every spot
	// replica: the worst case is the only safe plan.
	worst := v.Budget < 0 || len(zones) < 2
	k := len(zones)
	bestS, bestCost := 0, math.Inf(1)
	if od != nil {
		bestCost = float64(n) * odPrice
	}
	spread := map[string]int{}
	for S := 1; k > 0 && S <= 3*n; S++ {
		var f int
		if worst {
			f = floorFor(n, survive, S, (S+k-1)/k)
		} else {
			spread[risk.place(zones, spread)]++
			f = risk.floor(n, survive, S, spread, v.Budget)
		}
		if od == nil && f > 0 {
			continue
		}
		c := float64(S)*spotPrice + float64(f)*odPrice
		if c < bestCost-1e-9 {
			bestS, bestCost = S, c
		}
	}

	// Step 5: spot replicas, counted by zone; those under notice or in a
	// zone no longer available do not count.
	perZone := map[string]int{}
	var keepSpot []Replica
	for _, r := range s.Replicas {
		p := s.Pool(r.Pool)
		if !live(r) || p == nil || !p.Spot || r.Preempting {
			continue
		}
		keepSpot = append(keepSpot, r)
		perZone[p.Zone]++
	}
	var acts []Action
	spot := len(keepSpot)
	spotPools := spotPoolsOf(s)
	if spot < bestS {
		starts := map[string]int{}
		for ; spot < bestS; spot++ {
			best := ""
			if worst {
				for _, z := range zones {
					if best == "" || perZone[z] < perZone[best] {
						best = z
					}
				}
			} else {
				best = risk.place(zones, perZone)
			}
			perZone[best]++
			starts[cheapestPool(availablePools(spotPools), best)]++
		}
		acts = append(acts, startsOf(starts)...)
		m.SpotLower = 0
	} else if spot == bestS {
		m.SpotLower = 0
	} else if m.SpotLower++; m.SpotLower >= periods(v.DownHold, s.Interval) {
		m.SpotLower = 0
		// Stop from the riskiest zones (the largest, with a negative
		// budget), starting replicas first.
		weight := func(z string) float64 {
			if worst {
				return float64(perZone[z])
			}
			return risk.hz[z] * float64(perZone[z])
		}
		sort.SliceStable(keepSpot, func(i, j int) bool {
			zi, zj := s.Pool(keepSpot[i].Pool).Zone, s.Pool(keepSpot[j].Pool).Zone
			if weight(zi) != weight(zj) {
				return weight(zi) > weight(zj)
			}
			if (keepSpot[i].State == Starting) != (keepSpot[j].State == Starting) {
				return keepSpot[i].State == Starting
			}
			return keepSpot[i].ID > keepSpot[j].ID
		})
		for i := 0; spot > bestS; i++ {
			r := keepSpot[i]
			z := s.Pool(r.Pool).Zone
			if perZone[z] == 0 {
				continue
			}
			perZone[z]--
			spot--
			acts = append(acts, Action{Kind: Stop, Replica: r.ID})
		}
	}
	if od == nil {
		return Decision{Actions: acts, Memo: m}
	}
	largest := 0
	for _, c := range perZone {
		largest = max(largest, c)
	}
	floor := floorFor(n, survive, spot, largest)
	// The floor that counts only the spot replicas ready now: on-demand is
	// released only once the spot replicas taking over serve (a zone that
	// just came back may be lost again before they do).
	readyZone, readySpot, readyLargest := map[string]int{}, 0, 0
	for _, r := range keepSpot {
		if r.State == Ready {
			z := s.Pool(r.Pool).Zone
			readyZone[z]++
			readySpot++
			readyLargest = max(readyLargest, readyZone[z])
		}
	}
	keep := floorFor(n, survive, readySpot, readyLargest)
	if !worst {
		floor = risk.floor(n, survive, spot, perZone, v.Budget)
		keep = risk.floor(n, survive, readySpot, readyZone, v.Budget)
	}
	keep = max(keep, floor)
	isOD := func(_ Replica, p *Pool) bool { return p != nil && !p.Spot }
	have := s.count(isOD)
	switch {
	case have < floor:
		m.ODLower = 0
		acts = append(acts, Action{Kind: Start, Pool: od.Name, N: floor - have})
	case have > keep:
		floor = keep
		m.ODLower++
		if m.ODLower >= periods(v.DownHold, s.Interval) {
			m.ODLower = 0
			acts = append(acts, s.stopOrder(have-floor, isOD)...)
		}
	default:
		m.ODLower = 0
	}
	return Decision{Actions: acts, Memo: m}
}

// floorFor is the on-demand replicas that make n replicas in all with spot
// spot replicas, and keep survive after losing the largest zone, which holds
// largest of the spot replicas.
func floorFor(n, survive, spot, largest int) int { return max(0, n-spot, survive-(spot-largest)) }

func availablePools(pools []Pool) []Pool {
	var out []Pool
	for _, p := range pools {
		if p.Available {
			out = append(out, p)
		}
	}
	return out
}
