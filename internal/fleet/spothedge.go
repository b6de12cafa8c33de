package fleet

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"time"
)

// SpotHedge is SkyServe's policy (Mao et al., "SkyServe: Serving AI Models
// across Regions and Clouds with Spot Instances", EuroSys'25, arXiv
// 2411.01438), as its paper defines it and sky/serve implements it
// (FallbackRequestRateAutoscaler in autoscalers.py with
// dynamic_ondemand_fallback, DynamicFallbackSpotPlacer in spot_placer.py):
//
//  1. Target: N_tar = ceil(QPS over the last 60 s / target_qps_per_replica),
//     changed only after it has been wanted for upscale_delay (300 s) or
//     downscale_delay (1200 s), SkyServe's defaults.
//  2. Over-provisioning: run N_tar + N_extra spot replicas.
//  3. Dynamic placement: keep active zones Z_A and preempted zones Z_P; a
//     zone goes to Z_P when a replica in it is preempted or a launch in it
//     fails, and back to Z_A when a replica in it becomes ready; when fewer
//     than two zones remain active, all are made active again. Each new spot
//     replica goes to the active zone with the fewest spot replicas, then
//     the cheapest (SkyServe's placer prefers unused zones, then the
//     cheapest; for fleets larger than the zone count "fewest" is that rule
//     generalised so that replicas stay spread, as the paper requires).
//  4. Dynamic fallback: run max(0, N_tar - ready spot replicas) on-demand
//     replicas, so on-demand covers exactly the spot capacity missing now and
//     is released as soon as spot is back (the paper's rule). With
//     FallbackExtra, on-demand covers N_tar + N_extra - ready spot replicas,
//     as sky/serve's FallbackRequestRateAutoscaler does with
//     dynamic_ondemand_fallback (num_ondemand_to_provision =
//     base_ondemand_fallback_replicas + num_spot_to_provision - num_ready_spot,
//     the spot target including the over-provisioned replicas).
//
// SkyServe's default num_overprovision is 0 and its default placer for
// spot is dynamic_fallback (spot_placer.py); the paper evaluates N_extra = 2.
type SpotHedge struct {
	TargetQPS      float64       // target_qps_per_replica; 0 means the snapshot's Capacity
	Extra          int           // N_extra; negative means 0
	Window         time.Duration // QPS window; 0 means 60 s
	UpscaleDelay   time.Duration // 0 means 300 s
	DownscaleDelay time.Duration // 0 means 1200 s
	Min, Max       int           // min_replicas, max_replicas (Max 0: no bound)
	// FallbackExtra makes on-demand cover the over-provisioned replicas
	// too (sky/serve's code) rather than only N_tar (the paper).
	FallbackExtra bool
}

var _ Policy = SpotHedge{}

// spotHedgeMemo is SkyServe's controller state.
type spotHedgeMemo struct {
	Target            int
	Up, Down          int      // hysteresis counters
	Preempted         []string // Z_P, sorted
	InitialisedTarget bool
}

// Name implements Policy.
func (SpotHedge) Name() string { return "spothedge" }

func (h SpotHedge) withDefaults(s *Snapshot) SpotHedge {
	if h.TargetQPS <= 0 {
		h.TargetQPS = s.Capacity
	}
	h.Extra = max(h.Extra, 0)
	if h.Window <= 0 {
		h.Window = 60 * time.Second
	}
	if h.UpscaleDelay <= 0 {
		h.UpscaleDelay = 300 * time.Second
	}
	if h.DownscaleDelay <= 0 {
		h.DownscaleDelay = 1200 * time.Second
	}
	if h.Min < 1 {
		h.Min = 1
	}
	return h
}

// Decide implements Policy.
func (h SpotHedge) Decide(s *Snapshot, _ *rand.Rand) Decision {
	h = h.withDefaults(s)
	m, _ := s.Memo.(spotHedgeMemo)
	m.Preempted = slices.Clone(m.Preempted)
	if !m.InitialisedTarget {
		m.Target, m.InitialisedTarget = h.Min, true
	}

	// Rule 1: the target from the request rate, with hysteresis
	// (_set_target_num_replica_with_hysteresis).
	want := int(math.Ceil(s.Rate(h.Window) / h.TargetQPS))
	want = max(want, h.Min)
	if h.Max > 0 {
		want = min(want, h.Max)
	}
	switch {
	case m.Target == 0:
		m.Target = want
	case want > m.Target:
		m.Up, m.Down = m.Up+1, 0
		if m.Up >= periods(h.UpscaleDelay, s.Interval) {
			m.Target, m.Up = want, 0
		}
	case want < m.Target:
		m.Down, m.Up = m.Down+1, 0
		if m.Down >= periods(h.DownscaleDelay, s.Interval) {
			m.Target, m.Down = want, 0
		}
	default:
		m.Up, m.Down = 0, 0
	}

	// Rule 3: learn zone status from what happened since the last decision.
	for _, e := range s.Events {
		p := s.Pool(e.Pool)
		if p == nil || !p.Spot {
			continue
		}
		switch e.Kind {
		case Preempted, LaunchFailed:
			m.Preempted = addZone(m.Preempted, p.Zone)
		case BecameReady:
			m.Preempted = removeZone(m.Preempted, p.Zone)
		}
	}
	spotPools := spotPoolsOf(s)
	zones := zonesOf(spotPools)
	active := func() []string {
		var a []string
		for _, z := range zones {
			if !slices.Contains(m.Preempted, z) {
				a = append(a, z)
			}
		}
		return a
	}
	if len(active()) < 2 { // "prevent the case with only one active location"
		m.Preempted = nil
	}

	isSpot := func(_ Replica, p *Pool) bool { return p != nil && p.Spot }
	isOD := func(_ Replica, p *Pool) bool { return p != nil && !p.Spot }
	var acts []Action

	// Rule 2: N_tar + N_extra spot replicas. A replica under preemption
	// notice is not counted (SkyServe learns of it when it is gone; the
	// notice only lets the replacement start a little earlier).
	spotWant := m.Target + h.Extra
	notDoomed := func(r Replica, p *Pool) bool { return isSpot(r, p) && !r.Preempting }
	spotHave := s.count(notDoomed)
	if spotHave < spotWant {
		perZone := map[string]int{}
		for _, r := range s.Replicas {
			if p := s.Pool(r.Pool); live(r) && p != nil && p.Spot {
				perZone[p.Zone]++
			}
		}
		act := active()
		starts := map[string]int{}
		for i := 0; i < spotWant-spotHave && len(act) > 0; i++ {
			// Rule 3: the active zone with the fewest spot replicas, then
			// the cheapest, then by name.
			best := ""
			for _, z := range act {
				if best == "" || perZone[z] < perZone[best] ||
					perZone[z] == perZone[best] && zonePrice(spotPools, z) < zonePrice(spotPools, best) {
					best = z
				}
			}
			perZone[best]++
			starts[cheapestPool(spotPools, best)]++
		}
		acts = append(acts, startsOf(starts)...)
	} else if spotHave > spotWant {
		acts = append(acts, s.stopOrder(spotHave-spotWant, notDoomed)...)
	}

	// Rule 4: on-demand fills the gap between the target and the spot
	// replicas ready now.
	readySpot := 0
	for _, r := range s.Replicas {
		if p := s.Pool(r.Pool); r.State == Ready && !r.Preempting && p != nil && p.Spot {
			readySpot++
		}
	}
	if od := s.OnDemand(); od != nil {
		cover := m.Target
		if h.FallbackExtra {
			cover += h.Extra
		}
		acts = append(acts, scaleTo(s, od.Name, max(0, cover-readySpot), isOD)...)
	}
	return Decision{Actions: acts, Memo: m}
}

func spotPoolsOf(s *Snapshot) []Pool {
	var out []Pool
	for _, p := range s.Pools {
		if p.Spot {
			out = append(out, p)
		}
	}
	return out
}

func zonesOf(pools []Pool) []string {
	var zs []string
	for _, p := range pools {
		if !slices.Contains(zs, p.Zone) {
			zs = append(zs, p.Zone)
		}
	}
	sort.Strings(zs)
	return zs
}

func zonePrice(pools []Pool, zone string) float64 {
	best := math.Inf(1)
	for _, p := range pools {
		if p.Zone == zone {
			best = math.Min(best, p.Price)
		}
	}
	return best
}

func cheapestPool(pools []Pool, zone string) string {
	name, price := "", math.Inf(1)
	for _, p := range pools {
		if p.Zone == zone && (p.Price < price || p.Price == price && p.Name < name) {
			name, price = p.Name, p.Price
		}
	}
	return name
}

// startsOf turns counts by pool into Start actions in pool-name order.
func startsOf(starts map[string]int) []Action {
	names := make([]string, 0, len(starts))
	for n := range starts {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []Action
	for _, n := range names {
		out = append(out, Action{Kind: Start, Pool: n, N: starts[n]})
	}
	return out
}

func addZone(zs []string, z string) []string {
	if slices.Contains(zs, z) {
		return zs
	}
	zs = append(zs, z)
	sort.Strings(zs)
	return zs
}

func removeZone(zs []string, z string) []string {
	return slices.DeleteFunc(zs, func(x string) bool { return x == z })
}
