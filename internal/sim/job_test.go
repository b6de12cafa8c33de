package sim

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/schedule"
)

func ups(pattern string) []bool {
	up := make([]bool, len(pattern))
	for i, c := range pattern {
		up[i] = c == '1'
	}
	return up
}

func TestOnDemandOnlyCost(t *testing.T) {
	cfg := JobConfig{Work: 10 * time.Hour, Deadline: 20 * time.Hour, Overhead: 12 * time.Minute, SpotPrice: 1, OnDemandPrice: 3, Billing: capacity.PerSecond}
	r, err := RunJob(schedule.OnDemandOnly{}, ups("0000000000000000000000000"), time.Hour, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := 3 * (10 + 0.2)
	if math.Abs(r.Cost-want) > 1e-9 || !r.Met || r.Finish != 10*time.Hour+12*time.Minute || r.Starts != 1 {
		t.Fatalf("got %+v, want cost %v finishing at 10h12m", r, want)
	}
}

func TestPreemptionLosesUnsavedWork(t *testing.T) {
	// Spot for 3 ticks, then gone for 2, then back. With a 2h checkpoint
	// interval, the preemption at tick 3 throws away the work after 2h.
	cfg := JobConfig{Work: 4 * time.Hour, Deadline: 100 * time.Hour, Checkpoint: 2 * time.Hour, SpotPrice: 1, OnDemandPrice: 3, Billing: capacity.PerSecond}
	r, err := RunJob(schedule.Greedy{}, ups("1110011111"), time.Hour, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Preemptions != 1 || r.Lost != time.Hour {
		t.Fatalf("preemptions %d lost %s, want 1 and 1h", r.Preemptions, r.Lost)
	}
	// 3h billed, 2h kept; then 2h more from tick 5: done at 7h.
	if r.Finish != 7*time.Hour || r.SpotTime != 5*time.Hour || r.OnDemandTime != 0 || math.Abs(r.Cost-5) > 1e-9 {
		t.Fatalf("got %+v", r)
	}
}

func TestBillingMinimumPerNode(t *testing.T) {
	// Per-hour billing: a node held for 1h30m is billed 2h.
	cfg := JobConfig{Work: 90 * time.Minute, Deadline: 10 * time.Hour, SpotPrice: 1, OnDemandPrice: 2, Billing: capacity.PerHour}
	r, err := RunJob(schedule.OnDemandOnly{}, ups("0000"), time.Hour, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.OnDemandTime != 2*time.Hour || r.Cost != 4 {
		t.Fatalf("got %+v, want 2h billed for $4", r)
	}
}

func TestBillingPerTick(t *testing.T) {
	// Billed per 10-minute tick: a spot node held to a reclaim at the start
	// of the 4th tick is billed 3 ticks; an on-demand node that finishes 5
	// minutes into its 4th tick is billed 4.
	tick := 10 * time.Minute
	cfg := JobConfig{Work: 30 * time.Minute, Deadline: 10 * time.Hour, Overhead: 5 * time.Minute, SpotPrice: 6, OnDemandPrice: 12, Billing: capacity.PerTick(tick)}
	r, err := RunJob(schedule.Greedy{}, ups("1110"), tick, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.SpotTime != 3*tick || r.Preemptions != 1 {
		t.Fatalf("greedy on 1110: %+v, want 3 spot ticks billed and a reclaim", r)
	}
	r, err = RunJob(schedule.OnDemandOnly{}, ups("0000"), tick, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// 5m restart and 30m of work end 35m in: 4 ticks billed in full.
	if r.OnDemandTime != 4*tick || math.Abs(r.Cost-12*4*tick.Hours()) > 1e-9 || r.Finish != 35*time.Minute {
		t.Fatalf("on-demand: %+v, want 4 ticks billed, done at 35m", r)
	}
}

// Every deadline policy must meet every deadline that on-demand alone can
// meet with a decision interval to spare, on any availability pattern:
// random ones, a pool that disappears for good, and one that flaps.
func TestPoliciesMeetFeasibleDeadlines(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	tick := 15 * time.Minute
	policies := []schedule.Policy{schedule.Greedy{}, schedule.UniformProgress{}, &schedule.Planned{}}
	check := func(name string, up []bool, cfg JobConfig) {
		t.Helper()
		cfg.Pool = StatsOf(up, tick)
		for _, p := range policies {
			r, err := RunJob(p, up, tick, 0, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Met {
				t.Fatalf("%s on %s: missed the deadline %s: finished %v at %s", p.Name(), name, cfg.Deadline, r.Finished, r.Finish)
			}
		}
	}
	for n := range 60 {
		work := time.Duration(1+rng.IntN(24)) * time.Hour
		ckpt := time.Duration(0)
		if n%2 == 1 {
			ckpt = time.Duration(rng.IntN(90)+1) * time.Minute
		}
		overhead := time.Duration(rng.IntN(20)) * time.Minute
		// On-demand needs work+overhead; leave one tick (and a checkpoint
		// interval) for the safety net's reaction.
		deadline := work + overhead + tick + ckpt + time.Duration(rng.Float64()*float64(work))
		cfg := JobConfig{Work: work, Deadline: deadline, Overhead: overhead, Checkpoint: ckpt, SpotPrice: 1, OnDemandPrice: 3, Billing: capacity.PerSecond}
		ticks := int(4*deadline/tick) + 10
		random := make([]bool, ticks)
		stay := rng.Float64()
		for i := range random {
			if i == 0 || rng.Float64() > stay {
				random[i] = rng.IntN(2) == 0
			} else {
				random[i] = random[i-1]
			}
		}
		check("random", random, cfg)
		cliff := make([]bool, ticks)
		for i := range cliff[:rng.IntN(ticks)] {
			cliff[i] = true
		}
		check("cliff", cliff, cfg)
		flap := make([]bool, ticks)
		for i := range flap {
			flap[i] = i%2 == 0
		}
		check("flap", flap, cfg)
	}
}

// With spot capacity always there, every spot policy runs on spot only.
func TestAlwaysUpRunsOnSpot(t *testing.T) {
	up := make([]bool, 100)
	for i := range up {
		up[i] = true
	}
	cfg := JobConfig{Work: 10 * time.Hour, Deadline: 15 * time.Hour, Overhead: 6 * time.Minute, SpotPrice: 1, OnDemandPrice: 3, Billing: capacity.PerSecond, Pool: StatsOf(up, time.Hour)}
	for _, p := range []schedule.Policy{schedule.Greedy{}, schedule.UniformProgress{}, &schedule.Planned{}} {
		r, err := RunJob(p, up, time.Hour, 0, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if r.OnDemandTime != 0 || r.Starts != 1 || !r.Met {
			t.Fatalf("%s: %+v, want one spot node only", p.Name(), r)
		}
	}
}

func TestStatsOf(t *testing.T) {
	s := StatsOf(ups("1100011110"), time.Minute)
	if s.Available != 0.6 || s.MeanUp != 3*time.Minute || s.MeanDown != 2*time.Minute {
		t.Fatalf("got %+v", s)
	}
}

// recorder records the decisions of the policy it wraps.
type recorder struct {
	schedule.Policy
	got []schedule.Instance
}

func (r *recorder) Decide(j *schedule.Job) schedule.Instance {
	d := r.Policy.Decide(j)
	r.got = append(r.got, d)
	return d
}

func decisions(t *testing.T, p schedule.Policy, trace string, cfg JobConfig) (JobResult, string) {
	t.Helper()
	rec := &recorder{Policy: p}
	r, err := RunJob(rec, ups(trace), time.Hour, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, d := range rec.got {
		b.WriteByte(map[schedule.Instance]byte{schedule.None: '-', schedule.Spot: 'S', schedule.OnDemand: 'D'}[d])
	}
	return r, b.String()
}

// Uniform Progress on hand-made traces (ticks of 1h, 4h of work due in 8h,
// so the line rises by 30m of work an hour).
func TestUniformProgressPublished(t *testing.T) {
	cfg := JobConfig{Work: 4 * time.Hour, Deadline: 8 * time.Hour, Overhead: 30 * time.Minute, SpotPrice: 1, OnDemandPrice: 3, Billing: capacity.PerSecond}

	// No spot capacity at all: behind the line at 1h, the job starts on
	// on-demand and keeps it to the end, ahead of the line or not (at 5h it
	// is 1h ahead, more than 2d of work: dropping to idle then would pay a
	// second restart when it falls behind again).
	for _, p := range []schedule.Policy{schedule.UniformProgress{}, schedule.UniformProgress{Plain: true}} {
		r, got := decisions(t, p, "0000000000", cfg)
		if got != "-DDDDD" || r.Starts != 1 || r.Finish != 5*time.Hour+30*time.Minute || r.Cost != 3*4.5 {
			t.Errorf("%s in an outage: decisions %q, %+v; want -DDDDD, one start, done at 5h30m for $13.50", p.Name(), got, r)
		}
	}

	// Spot capacity back at 2h while the job is on on-demand and behind the
	// line: the plain variant moves to spot; with the hysteresis the job
	// stays on on-demand until it is ahead of the line two restart overheads
	// of time later: at 5h (3h30m done, the line at 6h is at 3h).
	r, got := decisions(t, schedule.UniformProgress{Plain: true}, "0011111111", cfg)
	if got != "-DSSSS" || r.Starts != 2 || r.Finish != 6*time.Hour || r.Cost != 3+4 {
		t.Errorf("plain, spot back at 2h: decisions %q, %+v; want -DSSSS, done at 6h for $7", got, r)
	}
	_, got = decisions(t, schedule.UniformProgress{}, "0011111111", cfg)
	if got != "-DDDDS" {
		t.Errorf("hysteresis, spot back at 2h: decisions %q, want -DDDDS", got)
	}

	// The hysteresis threshold is in time: with d = 40m, at 5h the job has
	// done 3h20m, above the line at 5h+2d (3h10m) but below the line at 5h
	// plus 2d of work (3h50m): it moves to spot when spot capacity is back.
	cfg.Overhead = 40 * time.Minute
	_, got = decisions(t, schedule.UniformProgress{}, "0000011111", cfg)
	if got != "-DDDDSS" {
		t.Errorf("hysteresis in time, spot back at 5h: decisions %q, want -DDDDSS", got)
	}
}

// ages records how long spot capacity has been up or down at each decision.
type ages struct {
	schedule.SpotOnly
	got []string
}

func (a *ages) Decide(j *schedule.Job) schedule.Instance {
	if j.SpotUp {
		a.got = append(a.got, "up "+j.UpFor.String())
	} else {
		a.got = append(a.got, "down "+j.DownFor.String())
	}
	return a.SpotOnly.Decide(j)
}

// The policy is told the age of the period under way, counted from before
// the job's start when the period began earlier; StatsOf measures every
// period's length.
func TestRunJobTellsPeriodAges(t *testing.T) {
	up := ups("1100011110")
	s := StatsOf(up, time.Minute)
	if s.UpPeriods.Len() != 2 || s.Outages.Len() != 2 {
		t.Fatalf("StatsOf: %d up periods and %d outages, want 2 and 2", s.UpPeriods.Len(), s.Outages.Len())
	}
	a := &ages{}
	cfg := JobConfig{Work: 3 * time.Minute, Deadline: time.Hour, SpotPrice: 1, OnDemandPrice: 3, Billing: capacity.PerSecond, Horizon: 6 * time.Minute}
	if _, err := RunJob(a, up, time.Minute, 3, cfg); err != nil {
		t.Fatal(err)
	}
	want := []string{"down 1m0s", "down 2m0s", "up 0s", "up 1m0s", "up 2m0s"}
	if len(a.got) < len(want) {
		t.Fatalf("decisions %v, want at least %v", a.got, want)
	}
	for i, w := range want {
		if a.got[i] != w {
			t.Fatalf("decisions %v, want %v first", a.got, want)
		}
	}
}
