package fleet

import (
	"math"
	"math/rand/v2"
	"time"
)

// Fixed keeps N on-demand replicas whatever the load: the fleet sized for
// the peak that the others are measured against.
type Fixed struct {
	N int
}

var _ Policy = Fixed{}

// Name implements Policy.
func (Fixed) Name() string { return "fixed" }

// Decide implements Policy: start on-demand replicas up to N, stop any
// beyond it.
func (f Fixed) Decide(s *Snapshot, _ *rand.Rand) Decision {
	od := s.OnDemand()
	if od == nil {
		return Decision{}
	}
	return Decision{Actions: scaleTo(s, od.Name, f.N, func(_ Replica, p *Pool) bool { return p != nil && !p.Spot })}
}

// scaleTo starts or stops replicas in pool so that the live replicas
// matching keep number want.
func scaleTo(s *Snapshot, pool string, want int, keep func(Replica, *Pool) bool) []Action {
	have := s.count(keep)
	switch {
	case have < want:
		return []Action{{Kind: Start, Pool: pool, N: want - have}}
	case have > want:
		return s.stopOrder(have-want, keep)
	}
	return nil
}

// Reactive is Ray Serve's request-based autoscaler
// (replica_queue_length_autoscaling_policy in
// python/ray/serve/autoscaling_policy.py) on on-demand replicas, with its
// defaults: target_ongoing_requests 2, upscale_delay_s 30,
// downscale_delay_s 600, look_back_period_s 30, smoothing factors 1.
// Ongoing requests include those queued at the router, which is what
// ray#20977 asks for; without them a fleet whose replicas are all starting
// would never scale.
type Reactive struct {
	TargetOngoing  float64       // target_ongoing_requests; 0 means 2
	UpscaleDelay   time.Duration // upscale_delay_s; 0 means 30 s
	DownscaleDelay time.Duration // downscale_delay_s; 0 means 600 s
	LookBack       time.Duration // look_back_period_s; 0 means 30 s
	Min, Max       int           // min_replicas, max_replicas (Max 0: no bound)
}

var _ Policy = Reactive{}

// reactiveMemo is Ray's controller state: the current target and the
// decision counter (positive while upscaling is wanted, negative while
// downscaling is).
type reactiveMemo struct {
	Target  int
	Counter int
}

// Name implements Policy.
func (Reactive) Name() string { return "reactive" }

func (r Reactive) withDefaults() Reactive {
	if r.TargetOngoing <= 0 {
		r.TargetOngoing = 2
	}
	if r.UpscaleDelay <= 0 {
		r.UpscaleDelay = 30 * time.Second
	}
	if r.DownscaleDelay <= 0 {
		r.DownscaleDelay = 600 * time.Second
	}
	if r.LookBack <= 0 {
		r.LookBack = 30 * time.Second
	}
	if r.Min < 1 {
		r.Min = 1
	}
	return r
}

// Decide implements Policy.
func (r Reactive) Decide(s *Snapshot, _ *rand.Rand) Decision {
	r = r.withDefaults()
	m, ok := s.Memo.(reactiveMemo)
	if !ok {
		m = reactiveMemo{Target: r.Min} // initial_replicas defaults to min_replicas
	}
	onDemand := func(_ Replica, p *Pool) bool { return p != nil && !p.Spot }
	running := s.count(onDemand)
	// total_num_requests: ongoing requests averaged over look_back_period_s.
	total := s.MeanOngoing(r.LookBack)
	// _calculate_desired_num_replicas: error_ratio = (total/running)/target,
	// desired = ceil(running * error_ratio) with smoothing 1, i.e.
	// ceil(total/target); from zero running replicas Ray scales straight to
	// what the load asks.
	desired := int(math.Ceil(total / r.TargetOngoing))
	if running == 0 && total > 0 && desired < 1 {
		desired = 1
	}
	desired = max(desired, r.Min)
	if r.Max > 0 {
		desired = min(desired, r.Max)
	}
	// The decision counter: scale only after the same direction has been
	// wanted for more than upscale_delay_s (downscale_delay_s) worth of
	// control-loop periods.
	switch {
	case desired > m.Target:
		m.Counter = max(m.Counter, 0) + 1
		if m.Counter > periods(r.UpscaleDelay, s.Interval) {
			m.Target, m.Counter = desired, 0
		}
	case desired < m.Target:
		m.Counter = min(m.Counter, 0) - 1
		if -m.Counter > periods(r.DownscaleDelay, s.Interval) {
			m.Target, m.Counter = desired, 0
		}
	default:
		m.Counter = 0
	}
	od := s.OnDemand()
	if od == nil {
		return Decision{Memo: m}
	}
	return Decision{Actions: scaleTo(s, od.Name, m.Target, onDemand), Memo: m}
}
