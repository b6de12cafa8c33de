package sim

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/forecast"
	"github.com/virga-ml/virga/internal/spec"
)

func pools(t *testing.T, rate float64, outage time.Duration) (spot, od *capacity.Pool) {
	t.Helper()
	pre, err := capacity.RateModel(rate, outage)
	if err != nil {
		t.Fatal(err)
	}
	node := virga.Resources{CPU: 8, MemoryMB: 61 << 10, GPU: 1}
	spot = &capacity.Pool{Name: "spot", Node: node, MaxNodes: 4, Market: spec.Spot, Billing: capacity.PerSecond,
		RestartOverhead: 5 * time.Minute, PriceSeries: capacity.Constant(0.9), Preemption: pre}
	od = &capacity.Pool{Name: "od", Node: node, MaxNodes: 4, Market: spec.OnDemand, Billing: capacity.PerSecond,
		RestartOverhead: 5 * time.Minute, PriceSeries: capacity.Constant(3)}
	return spot, od
}

func TestEstimatePlans(t *testing.T) {
	spot, od := pools(t, 0.5, 2*time.Hour)
	in := EstimateInput{Work: 40 * time.Hour, Slots: 4, Deadline: 18 * time.Hour, Spot: spot, OnDemand: od, Samples: 50, Seed: 1}
	got, err := Estimate(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Plan != "on-demand" || got[1].Plan != "spot-only" || got[2].Plan != "virga" {
		t.Fatalf("plans %+v", got)
	}
	// On-demand: 4 nodes x (10h + 5m) at $3/h.
	if want := 4 * 3 * (10 + 5.0/60); math.Abs(got[0].Cost-want) > 1e-6 || got[0].PMeet != 1 {
		t.Errorf("on-demand %+v, want cost %v", got[0], want)
	}
	if got[2].PMeet != 1 {
		t.Errorf("virga meets the deadline in %.0f%% of samples, want all", 100*got[2].PMeet)
	}
	if !(got[2].Cost < got[0].Cost) || !(got[1].Cost < got[2].Cost) {
		t.Errorf("costs on-demand %.2f virga %.2f spot-only %.2f: want spot-only < virga < on-demand", got[0].Cost, got[2].Cost, got[1].Cost)
	}
	if got[1].PMeet >= 1 || got[1].Wall <= got[0].Wall {
		t.Errorf("spot only with 0.5 reclaims/h and 2h outages: %+v, want slower than on-demand and sometimes late", got[1])
	}
	// Same seed, same estimate.
	again, err := Estimate(in)
	if err != nil || again[2].Cost != got[2].Cost || again[2].Wall != got[2].Wall || again[2].PMeet != got[2].PMeet {
		t.Errorf("not deterministic: %+v vs %+v (%v)", again[2], got[2], err)
	}
}

func TestEstimateInfeasibleDeadline(t *testing.T) {
	spot, od := pools(t, 0.5, time.Hour)
	_, err := Estimate(EstimateInput{Work: 40 * time.Hour, Slots: 4, Deadline: 9 * time.Hour, Spot: spot, OnDemand: od, Samples: 10})
	if !errors.Is(err, ErrDeadlineInfeasible) {
		t.Fatalf("got %v, want ErrDeadlineInfeasible", err)
	}
}

// A trial that takes a quarter of a node is billed a quarter, and a pool of
// 4 nodes holds 16 of them at once.
func TestEstimateShare(t *testing.T) {
	_, od := pools(t, 0.5, time.Hour)
	got, err := Estimate(EstimateInput{Work: 160 * time.Hour, Slots: 16, OnDemand: od, OnDemandShare: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	// 16 lanes of 10h (+5m overhead) at $3/h x 0.25.
	if p := got[0]; p.Wall != 10*time.Hour+5*time.Minute || math.Abs(p.Cost-16*0.25*3*(10+5.0/60)) > 1e-6 {
		t.Errorf("on-demand plan %+v", p)
	}
}

// TestEstimateWorkDraws: when the work is uncertain (draws of it), the
// on-demand plan's p90 is above its mean instead of equal to it, its chance
// of meeting the deadline is the share of draws that fit, and the spot
// plans' spread widens too.
func TestEstimateWorkDraws(t *testing.T) {
	spot, od := pools(t, 0.5, 2*time.Hour)
	var draws []time.Duration
	for i := range 100 {
		draws = append(draws, time.Duration(20+i*2/5)*time.Hour) // 20h to 59.6h, mean 39.8h
	}
	in := EstimateInput{Work: 40 * time.Hour, WorkDraws: draws, Slots: 4, Deadline: 12 * time.Hour, Spot: spot, OnDemand: od, Samples: 100, Seed: 1}
	got, err := Estimate(in)
	if err != nil {
		t.Fatal(err)
	}
	o := got[0]
	if o.Samples != 100 || o.WallP90 <= o.Wall || o.CostP90 <= o.Cost {
		t.Errorf("on-demand %+v: want 100 samples with p90 above the mean", o)
	}
	// Wall = work/4 + 5m <= 12h for work <= 47.67h: draws 20..47 (70 of 100).
	if o.PMeet < 0.69 || o.PMeet > 0.71 {
		t.Errorf("on-demand meets the deadline in %.0f%% of draws, want 70%%", 100*o.PMeet)
	}
	one, err := Estimate(EstimateInput{Work: 40 * time.Hour, Slots: 4, Deadline: 12 * time.Hour, Spot: spot, OnDemand: od, Samples: 100, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got[1].WallP90-got[1].Wall <= one[1].WallP90-one[1].Wall {
		t.Errorf("spot-only spread %s with uncertain work, %s without: want wider", got[1].WallP90-got[1].Wall, one[1].WallP90-one[1].Wall)
	}
}

// TestEstimateBillsEveryAttempt: 12 trials of 5 s on 2 on-demand nodes
// billed per second with a one-minute minimum cost 12 minutes of node
// time, not the 2 minutes of two lanes of 30 s; and each trial pays the
// restart overhead: 6 of them run one after another on each node.
func TestEstimateBillsEveryAttempt(t *testing.T) {
	_, od := pools(t, 0.5, time.Hour)
	od.RestartOverhead = 2 * time.Second
	od.Billing = capacity.Billing{Increment: time.Second, Minimum: time.Minute}
	attempts := make([]float64, 12)
	for i := range attempts {
		attempts[i] = 1.0 / 12
	}
	got, err := Estimate(EstimateInput{Work: time.Minute, Slots: 2, OnDemand: od, Attempts: attempts})
	if err != nil {
		t.Fatal(err)
	}
	if want := 12 * 3.0 / 60; math.Abs(got[0].Cost-want) > 1e-9 {
		t.Errorf("cost $%.3f, want $%.3f (12 attempts x the 1-minute minimum at $3/h)", got[0].Cost, want)
	}
	if want := 6 * (5 + 2) * time.Second; got[0].Wall != want {
		t.Errorf("wall %s, want %s (6 attempts of 5 s + 2 s overhead per node)", got[0].Wall, want)
	}
	// A start-up of 1 s measured by a profile: every attempt pays it too.
	got, err = Estimate(EstimateInput{Work: time.Minute, Slots: 2, OnDemand: od, Attempts: attempts, Startup: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if want := 6 * (5 + 2 + 1) * time.Second; got[0].Wall != want {
		t.Errorf("wall with a start-up of 1s: %s, want %s", got[0].Wall, want)
	}
}

// TestEstimateUnmodelled: what the model leaves out spreads the on-demand
// plan's wall around the model's (its p10 below, its p90 above), while
// whether the deadline can be met at all is judged on the model's own
// earliest finish.
func TestEstimateUnmodelled(t *testing.T) {
	spot, od := pools(t, 0.5, time.Hour)
	in := EstimateInput{Work: 40 * time.Hour, Slots: 4, OnDemand: od, Spot: spot, Samples: 400, Seed: 3, Unmodelled: 0.3, Deadline: 20 * time.Hour}
	got, err := Estimate(in)
	if err != nil {
		t.Fatal(err)
	}
	base := 10*time.Hour + 5*time.Minute
	if o := got[0]; !(o.WallP10 < base && base < o.WallP90) || o.Samples != 400 {
		t.Errorf("on-demand %+v: want p10 < %s < p90 over 400 samples", o, base)
	}
	// exp(0.3 z) at the 10th percentile is 0.68: p10 about 6.9h.
	if p10 := got[0].WallP10.Hours(); p10 < 6.4 || p10 > 7.4 {
		t.Errorf("on-demand p10 %.1fh, want about 6.9h", p10)
	}
	in.Deadline = 9 * time.Hour
	_, err = Estimate(in)
	var late *InfeasibleError
	if !errors.As(err, &late) || late.Earliest != base {
		t.Errorf("deadline 9h: %v, want infeasible with the earliest finish %s", err, base)
	}
}

// TestEstimateCalibrated: a calibration from earlier runs that took 1.5
// times the prediction moves the on-demand plan's median by 1.5 and gives
// it the calibration's p10 and p90 (the on-demand plan has no spread of
// its own), in place of the unmodelled share.
func TestEstimateCalibrated(t *testing.T) {
	spot, od := pools(t, 0.5, time.Hour)
	c := forecast.Calibration{Pairs: 8, Mu: math.Log(1.5), Sigma: 0.2}
	c.Median = 1.5
	c.P10, c.P90 = 1.5*math.Exp(-0.2*1.415*math.Sqrt(1+1.0/8)), 1.5*math.Exp(0.2*1.415*math.Sqrt(1+1.0/8)) // t(7) 90th percentile: 1.415
	in := EstimateInput{Work: 40 * time.Hour, Slots: 4, OnDemand: od, Spot: spot, Samples: 2000, Seed: 3, Unmodelled: 0.3, Factor: c.Factor}
	got, err := Estimate(in)
	if err != nil {
		t.Fatal(err)
	}
	base := 10*time.Hour + 5*time.Minute
	o := got[0]
	for _, q := range []struct {
		name      string
		got       time.Duration
		wantRatio float64
	}{{"p10", o.WallP10, c.P10}, {"p50", o.WallP50, c.Median}, {"p90", o.WallP90, c.P90}} {
		// The restart overhead is stretched too: the ratio is of the whole.
		if r := q.got.Hours() / base.Hours(); math.Abs(r/q.wantRatio-1) > 0.03 {
			t.Errorf("on-demand %s %s: %.3f times the model's %s; want %.3f", q.name, q.got, r, base, q.wantRatio)
		}
	}
	if o.Samples != 2000 {
		t.Errorf("on-demand plan over %d samples; want 2000", o.Samples)
	}
}
