package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/schedule"
)

// EstimateInput is what an estimate before a run needs: the work, how wide
// it runs, its deadline, and the pools it may use.
type EstimateInput struct {
	// Work is the on-demand node time of the whole experiment (all trials).
	Work time.Duration
	// WorkDraws, if set, are draws of Work from what is known of it (a
	// learnt step time and its error): each sample of a plan takes one in
	// turn, so that the plans' spread includes that of the work. Work is
	// then their mean.
	WorkDraws []time.Duration
	// Attempts, if set, are the experiment's attempts (trials, and their
	// resumptions at rungs), each as its share of Work, in the order they
	// start: every attempt pays the pool's restart overhead and is billed
	// on its own (with the billing minimum), as the backends bill. The
	// on-demand plan places them on its nodes as they free up. Without
	// them, the work is Slots lanes each started once.
	Attempts []float64
	// Unmodelled is the log standard deviation of what the model leaves
	// out (trials sharing cores, the control loop's gaps, the machine's
	// other load): each sample's attempts run exp(Unmodelled*z) times as
	// long as the model says, z standard normal. 0: none.
	Unmodelled float64
	// Factor, if set, replaces Unmodelled: it draws from r how many times
	// as long as the model says a sample's attempts run (a calibration
	// from earlier runs: forecast.Calibration.Factor).
	Factor func(r *rand.Rand) float64
	// Startup is what every attempt takes before its first step, on any
	// pool (starting its process, the trainer's set-up): billed, no
	// progress, on top of the pool's restart overhead.
	Startup time.Duration
	// Slots is how many nodes it uses at once (max_concurrent, bounded by
	// each pool's nodes); the work is spread evenly over them.
	Slots int
	// Deadline is from submission; 0 means none.
	Deadline time.Duration
	// Spot and OnDemand are the pools; either may be nil (its plans are
	// then left out).
	Spot, OnDemand *capacity.Pool
	// Checkpoint is the checkpoint interval in work; 0 means work is kept
	// at a reclaim.
	Checkpoint time.Duration
	// SpotShare and OnDemandShare are the fraction of a node of each pool
	// one trial takes (capacity.Share); 0 means a whole node. A trial is
	// billed its share, and a pool holds MaxNodes/share trials at once.
	SpotShare, OnDemandShare float64
	Samples                  int    // Monte-Carlo samples of the spot pool's availability; 0 means 200
	Seed                     uint64 // of the samples
	// Start is when the run would start (prices are taken from then).
	Start time.Time
}

// PlanEstimate is the forecast of one plan.
type PlanEstimate struct {
	Plan string `json:"plan"` // on-demand, spot-only, virga
	// Pools it uses.
	Pools []string `json:"pools"`
	// Wall is the mean wall time to finish, WallP10, WallP50 and WallP90
	// its 10th, 50th and 90th percentiles.
	Wall    time.Duration `json:"wall"`
	WallP10 time.Duration `json:"wall_p10"`
	WallP50 time.Duration `json:"wall_p50"`
	WallP90 time.Duration `json:"wall_p90"`
	// Cost is the mean cost in dollars, CostP10, CostP50 and CostP90 its
	// 10th, 50th and 90th percentiles.
	Cost    float64 `json:"cost"`
	CostP10 float64 `json:"cost_p10"`
	CostP50 float64 `json:"cost_p50"`
	CostP90 float64 `json:"cost_p90"`
	// PMeet is the fraction of samples that met the deadline (1 with no
	// deadline when every sample finished).
	PMeet float64 `json:"p_meet"`
	// Unfinished is the fraction of samples that had not finished after
	// the horizon (30 days, or four times the deadline); their wall time
	// counts as the horizon.
	Unfinished float64 `json:"unfinished,omitempty"`
	Samples    int     `json:"samples"`
}

// ErrDeadlineInfeasible is returned (wrapped, with the estimates) when even
// on-demand capacity cannot finish the work by the deadline.
var ErrDeadlineInfeasible = errors.New("the deadline cannot be met even on on-demand capacity")

// InfeasibleError is ErrDeadlineInfeasible with the earliest finish on
// on-demand capacity, from submission.
type InfeasibleError struct {
	Earliest, Deadline time.Duration
}

func (e *InfeasibleError) Error() string {
	return fmt.Sprintf("%v: on-demand needs %s from submission (deadline %s)", ErrDeadlineInfeasible, e.Earliest.Round(time.Minute), e.Deadline)
}

// Unwrap makes errors.Is(err, ErrDeadlineInfeasible) hold.
func (e *InfeasibleError) Unwrap() error { return ErrDeadlineInfeasible }

// Estimate forecasts the wall time, cost and chance of meeting the deadline
// of each plan: on-demand only, spot only, and Virga's (schedule.Planned
// over the spot and on-demand pools), by replaying the work on Samples draws
// of the spot pool's availability (its trace from random offsets, or its
// rate model with random draws). The experiment is modelled as Slots
// identical jobs of Work/Slots each (a fluid approximation of a search).
func Estimate(in EstimateInput) ([]PlanEstimate, error) {
	if in.Work <= 0 {
		return nil, fmt.Errorf("estimate: work must be positive")
	}
	if in.Spot == nil && in.OnDemand == nil {
		return nil, fmt.Errorf("estimate: no pool to run on")
	}
	samples := in.Samples
	if samples <= 0 {
		samples = 200
	}
	slots := max(in.Slots, 1)
	var out []PlanEstimate
	odPrice := 0.0
	if in.OnDemand != nil {
		odPrice = in.OnDemand.Price(in.Start)
		share := shareOf(in.OnDemandShare)
		p := min(slots, holds(in.OnDemand, share))
		draws := in.WorkDraws
		if len(draws) == 0 {
			draws = []time.Duration{in.Work}
		}
		n := len(draws)
		if in.Unmodelled > 0 || in.Factor != nil {
			n = max(n, samples)
		}
		walls := make([]time.Duration, n)
		costs := make([]float64, n)
		met := 0
		for i := range n {
			w := draws[i%len(draws)]
			slow := unmodelled(in, i)
			w = time.Duration(float64(w) * slow)
			var wall time.Duration
			if len(in.Attempts) > 0 {
				var billed time.Duration
				wall, billed = listSchedule(in.Attempts, w, p, time.Duration(float64(in.OnDemand.RestartOverhead+in.Startup)*slow), in.OnDemand.Billing)
				costs[i] = share * odPrice * billed.Hours()
			} else {
				wall = w/time.Duration(p) + time.Duration(float64(in.OnDemand.RestartOverhead+in.Startup)*slow)
				costs[i] = float64(p) * share * odPrice * in.OnDemand.Billing.Billed(wall).Hours()
			}
			walls[i] = wall
			if in.Deadline <= 0 || wall <= in.Deadline {
				met++
			}
		}
		out = append(out, PlanEstimate{Plan: "on-demand", Pools: []string{in.OnDemand.Name}, Wall: meanDur(walls), WallP10: quantileDur(walls, 0.1), WallP50: quantileDur(walls, 0.5),
			WallP90: quantileDur(walls, 0.9), Cost: mean(costs), CostP10: quantile(costs, 0.1), CostP50: quantile(costs, 0.5), CostP90: quantile(costs, 0.9),
			PMeet: float64(met) / float64(n), Samples: n})
	}
	if in.Spot != nil {
		spotOnly, err := monteCarlo(in, samples, slots, schedule.SpotOnly{}, odPrice, false)
		if err != nil {
			return nil, err
		}
		out = append(out, spotOnly)
		if in.OnDemand != nil && in.Deadline > 0 {
			v, err := monteCarlo(in, samples, slots, &schedule.Planned{}, odPrice, true)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
	}
	if in.OnDemand != nil && in.Deadline > 0 {
		// As the model has it (the mean work, nothing unmodelled): the
		// earliest finish on-demand capacity allows.
		share := shareOf(in.OnDemandShare)
		p := min(slots, holds(in.OnDemand, share))
		wall := in.Work/time.Duration(p) + in.OnDemand.RestartOverhead + in.Startup
		if len(in.Attempts) > 0 {
			wall, _ = listSchedule(in.Attempts, in.Work, p, in.OnDemand.RestartOverhead+in.Startup, in.OnDemand.Billing)
		}
		if wall > in.Deadline {
			return out, &InfeasibleError{Earliest: wall, Deadline: in.Deadline}
		}
	}
	return out, nil
}

// unmodelled is sample i's factor for what the model leaves out
// (EstimateInput.Factor, else Unmodelled), drawn from the estimate's seed.
func unmodelled(in EstimateInput, i int) float64 {
	if in.Factor == nil && in.Unmodelled <= 0 {
		return 1
	}
	r := rand.New(rand.NewPCG(in.Seed^0x756e6d6f64656c6c, uint64(i)))
	if in.Factor != nil {
		return in.Factor(r)
	}
	return math.Exp(in.Unmodelled * r.NormFloat64())
}

// listSchedule runs attempts (shares of work) in order on nodes nodes,
// each on the first node free, each paying overhead before its work; it
// returns when the last ends and the node time billed (each attempt on its
// own, with the billing minimum).
func listSchedule(attempts []float64, work time.Duration, nodes int, overhead time.Duration, b capacity.Billing) (wall, billed time.Duration) {
	free := make([]time.Duration, max(nodes, 1))
	for _, a := range attempts {
		d := overhead + time.Duration(a*float64(work))
		k := 0
		for j := range free {
			if free[j] < free[k] {
				k = j
			}
		}
		free[k] += d
		billed += b.Billed(d)
		wall = max(wall, free[k])
	}
	return wall, billed
}

// attemptExtras is what the lanes of a fluid replay leave out when the
// work is made of attempts: the restart overhead of every attempt after
// each lane's first (node time that makes no progress), and the billing
// minimum's excess over attempts shorter than it.
func attemptExtras(attempts []float64, work time.Duration, lanes int, overhead time.Duration, b capacity.Billing) (perLane, unbilled time.Duration) {
	if len(attempts) > lanes {
		perLane = time.Duration(len(attempts)-lanes) * overhead / time.Duration(lanes)
	}
	for _, a := range attempts {
		d := overhead + time.Duration(a*float64(work))
		unbilled += b.Billed(d) - d
	}
	return perLane, unbilled
}

// monteCarlo replays the work under policy on samples draws of the spot
// pool's availability.
func monteCarlo(in EstimateInput, samples, slots int, policy schedule.Policy, odPrice float64, withOD bool) (PlanEstimate, error) {
	sp := in.Spot
	share := shareOf(in.SpotShare)
	p := min(slots, holds(sp, share))
	if withOD {
		// On-demand makes up for spot slots that are missing (priced as
		// spot here: the plan's cost is a lower bound when the spot pool
		// holds fewer than the lanes).
		p = slots
	}
	work := in.Work / time.Duration(p)
	deadline := in.Deadline
	if deadline <= 0 {
		deadline = 4 * work
	}
	// One decision per tick; the tick keeps the plan's table small.
	tick := time.Minute
	if d := deadline / 600; d > tick {
		tick = d.Round(time.Minute)
	}
	overhead := sp.RestartOverhead + in.Startup
	st := sp.Stats()
	cfg := JobConfig{
		Work: work, Deadline: deadline, Overhead: overhead, Checkpoint: in.Checkpoint,
		SpotPrice: sp.Price(in.Start), OnDemandPrice: odPrice, Billing: sp.Billing,
		Pool: schedule.StatsOfPool(st),
	}
	if !withOD {
		cfg.OnDemandPrice = math.Inf(1)
		cfg.Horizon = max(4*(deadline+work+overhead), 30*24*time.Hour)
	}
	n := int(4*(deadline+work+overhead)/tick) + 2
	if cfg.Horizon > 0 {
		n = int(cfg.Horizon/tick) + 2
	}
	up := make([]bool, n)
	walls := make([]time.Duration, 0, samples)
	costs := make([]float64, 0, samples)
	met, unfinished := 0, 0
	for i := range samples {
		rng := rand.New(rand.NewPCG(in.Seed, uint64(i)))
		// The pool's availability from a random point within a month of
		// its timeline: a trace wraps around, a rate model is the same at
		// any time.
		tl := sp.Timeline(in.Start, rng)
		start := in.Start.Add(time.Duration(rng.Int64N(int64(30 * 24 * time.Hour))))
		for k := range up {
			up[k], _ = tl.Up(start.Add(time.Duration(k) * tick))
		}
		total := in.Work
		if len(in.WorkDraws) > 0 {
			total = in.WorkDraws[i%len(in.WorkDraws)]
		}
		total = time.Duration(float64(total) * unmodelled(in, i))
		cfg.Work = total / time.Duration(p)
		var unbilled time.Duration
		if len(in.Attempts) > 0 {
			var perLane time.Duration
			perLane, unbilled = attemptExtras(in.Attempts, total, p, overhead, sp.Billing)
			cfg.Work += perLane
		}
		r, err := RunJob(policy, up, tick, 0, cfg)
		if err != nil {
			return PlanEstimate{}, err
		}
		if r.Met || (in.Deadline <= 0 && r.Finished) {
			met++
		}
		if !r.Finished {
			unfinished++
		}
		walls = append(walls, r.Finish)
		costs = append(costs, float64(p)*share*r.Cost+share*cfg.SpotPrice*unbilled.Hours())
	}
	pools := []string{sp.Name}
	name := "spot-only"
	if withOD {
		pools = append(pools, in.OnDemand.Name)
		name = "virga"
	}
	return PlanEstimate{Plan: name, Pools: pools, Wall: meanDur(walls), WallP10: quantileDur(walls, 0.1), WallP50: quantileDur(walls, 0.5),
		WallP90: quantileDur(walls, 0.9), Cost: mean(costs), CostP10: quantile(costs, 0.1), CostP50: quantile(costs, 0.5), CostP90: quantile(costs, 0.9),
		PMeet:      float64(met) / float64(samples),
		Unfinished: float64(unfinished) / float64(samples), Samples: samples}, nil
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

func meanDur(xs []time.Duration) time.Duration {
	s := 0.0
	for _, x := range xs {
		s += float64(x)
	}
	return time.Duration(s / float64(len(xs)))
}

func quantileDur(xs []time.Duration, q float64) time.Duration {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

// shareOf reads a trial's share of a node (0: a whole node).
func shareOf(share float64) float64 {
	if share <= 0 || share > 1 {
		return 1
	}
	return share
}

// holds is how many trials of share pool p holds at once.
func holds(p *capacity.Pool, share float64) int {
	return max(p.MaxNodes, 1) * max(int(math.Floor(1/share+1e-9)), 1)
}
