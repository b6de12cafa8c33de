package forecast

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// synthetic returns n pairs whose actual wall time is bias times the
// predicted median, times exp(spread*z) with z standard normal.
func synthetic(r *rand.Rand, n int, bias, spread float64) []Pair {
	ps := make([]Pair, n)
	for i := range ps {
		pred := time.Duration(10+r.IntN(1000)) * time.Minute
		ps[i] = Pair{ExperimentID: int64(i + 1), Predicted: Kept{WallP50: pred, Shift: 1},
			Wall: time.Duration(float64(pred) * bias * math.Exp(spread*r.NormFloat64()))}
	}
	return ps
}

// TestCalibrationMovesTheMedianByTheBias: runs that took 1.5 times the
// prediction move the calibrated median by 1.5 (within what 200 noisy pairs
// allow), whatever each run's own prediction was.
func TestCalibrationMovesTheMedianByTheBias(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, bias := range []float64{0.6, 1, 1.5} {
		c, ok := Calibrate(synthetic(r, 200, bias, 0.3))
		if !ok {
			t.Fatal("no calibration from 200 pairs")
		}
		t.Logf("bias %.2f: calibrated median ratio %.3f from 200 pairs", bias, c.Median)
		if math.Abs(c.Median/bias-1) > 0.06 {
			t.Errorf("bias %.2f: calibrated median ratio %.3f; want %.2f within 6%%", bias, c.Median, bias)
		}
		lo, mid, hi := c.Interval(time.Hour)
		if want := time.Duration(bias * float64(time.Hour)); math.Abs(float64(mid-want)) > 0.06*float64(want) {
			t.Errorf("bias %.2f: calibrated median of a 1h prediction %s; want %s", bias, mid, want)
		}
		// With a spread of 0.3, the 10th and 90th percentiles are
		// exp(-+1.28*0.3) = 0.68 and 1.47 times the median.
		if g := float64(hi) / float64(mid); math.Abs(g-1.47) > 0.1 {
			t.Errorf("bias %.2f: p90/median %.2f; want 1.47", bias, g)
		}
		if g := float64(lo) / float64(mid); math.Abs(g-0.68) > 0.05 {
			t.Errorf("bias %.2f: p10/median %.2f; want 0.68", bias, g)
		}
	}
}

// TestCalibrationCoverage: the calibrated p10-p90 interval, made from a few
// earlier runs, holds about 80% of later runs (held out, never used to
// calibrate), with as few as MinPairs earlier runs.
func TestCalibrationCoverage(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{MinPairs, 5, 20} {
		const trials = 4000
		in, inEmpirical := 0, 0
		for range trials {
			ps := synthetic(r, n+1, 1.3, 0.4)
			c, ok := Calibrate(ps[:n])
			if !ok {
				t.Fatalf("no calibration from %d pairs", n)
			}
			held := ps[n]
			lo, _, hi := c.Interval(held.Predicted.WallP50)
			if held.Wall >= lo && held.Wall <= hi {
				in++
			}
			// For comparison: the earlier runs' own p10 and p90 ratios.
			var rs []float64
			for _, p := range ps[:n] {
				r, _ := p.Ratio()
				rs = append(rs, r)
			}
			slices.Sort(rs)
			q := func(p float64) time.Duration {
				return time.Duration(rs[min(int(p*float64(n)), n-1)] * float64(held.Predicted.WallP50))
			}
			if held.Wall >= q(0.1) && held.Wall <= q(0.9) {
				inEmpirical++
			}
		}
		cov := float64(in) / trials
		t.Logf("%d earlier runs: p10-p90 held %.3f of %d held-out runs (their own p10-p90 ratios: %.3f)", n, cov, trials, float64(inEmpirical)/trials)
		if math.Abs(cov-0.8) > 0.025 {
			t.Errorf("%d earlier runs: p10-p90 held %.3f of held-out runs; want 0.80", n, cov)
		}
	}
}

// TestCalibrationFactorDraws: the factors drawn for a Monte-Carlo estimate
// have the calibration's percentiles.
func TestCalibrationFactorDraws(t *testing.T) {
	c, ok := Calibrate(synthetic(rand.New(rand.NewPCG(5, 6)), 4, 1.2, 0.3))
	if !ok {
		t.Fatal("no calibration")
	}
	r := rand.New(rand.NewPCG(7, 8))
	const n = 20000
	below10, below50, below90 := 0, 0, 0
	for range n {
		f := c.Factor(r)
		if f <= c.P10 {
			below10++
		}
		if f <= c.Median {
			below50++
		}
		if f <= c.P90 {
			below90++
		}
	}
	for _, q := range []struct {
		name  string
		got   int
		wantP float64
	}{{"p10", below10, 0.1}, {"median", below50, 0.5}, {"p90", below90, 0.9}} {
		if p := float64(q.got) / n; math.Abs(p-q.wantP) > 0.015 {
			t.Errorf("%.3f of the draws at or below the %s (%.3f); want %.2f", p, q.name, c.P10, q.wantP)
		}
	}
}

// TestCalibrateNeedsPairs: fewer than MinPairs usable pairs make no
// calibration; a pair without a prediction or an outcome is not usable.
func TestCalibrateNeedsPairs(t *testing.T) {
	ps := synthetic(rand.New(rand.NewPCG(9, 10)), MinPairs, 1, 0.2)
	if _, ok := Calibrate(ps[:MinPairs-1]); ok {
		t.Errorf("a calibration from %d pairs; want none below %d", MinPairs-1, MinPairs)
	}
	ps[0].Wall = 0
	if _, ok := Calibrate(ps); ok {
		t.Error("a calibration from a pair whose run took no time")
	}
	ps[0].Wall, ps[1].Predicted.WallP50 = time.Hour, 0
	if _, ok := Calibrate(ps); ok {
		t.Error("a calibration from a pair without a prediction")
	}
}

// TestKeptPlan: the plan a run is compared with is Virga's, else
// on-demand; an estimate from before the median was kept gives its mean;
// a calibrated estimate's shift is read back so that the next calibration
// compares runs with the model, not with an earlier correction.
func TestKeptPlan(t *testing.T) {
	k, ok := KeptPlan(`{"plans":[{"plan":"spot-only","wall":1},{"plan":"on-demand","wall":2,"wall_p50":3},{"plan":"virga","wall":4,"wall_p50":5}],"calibration":{"median":1.25}}`)
	if !ok || k.Plan != "virga" || k.WallP50 != 5 || k.Shift != 1.25 {
		t.Errorf("KeptPlan = %+v, %v; want virga's plan, median 5, shift 1.25", k, ok)
	}
	k, ok = KeptPlan(`{"plans":[{"plan":"spot-only","wall":1},{"plan":"on-demand","wall":2,"cost":7}]}`)
	if !ok || k.Plan != "on-demand" || k.WallP50 != 2 || k.CostP50 != 7 || k.Shift != 1 {
		t.Errorf("KeptPlan = %+v, %v; want on-demand's plan with its mean as median, shift 1", k, ok)
	}
	p := Pair{Predicted: Kept{WallP50: 125, Shift: 1.25}, Wall: 150}
	if r, ok := p.Ratio(); !ok || math.Abs(r-1.5) > 1e-9 {
		t.Errorf("Ratio of a run of 150 against 125 calibrated by 1.25 = %v, %v; want 1.5 (against the model's 100)", r, ok)
	}
	if r, ok := (Pair{Predicted: Kept{WallP50: 1, Shift: 1e308}, Wall: time.Hour}).Ratio(); ok {
		t.Errorf("Ratio against a median of 1e-308 ns = %v; want none", r)
	}
	for _, bad := range []string{``, `{}`, `{"plans":[]}`, `not json`} {
		if _, ok := KeptPlan(bad); ok {
			t.Errorf("KeptPlan(%q) ok; want none", bad)
		}
	}
}

// FuzzKeptPlan: any kept estimate is read without panicking, and a plan
// read has a shift that divides (positive and finite) and a median that is
// its own or its mean.
func FuzzKeptPlan(f *testing.F) {
	f.Add(`{"plans":[{"plan":"virga","wall":4,"wall_p50":5}],"calibration":{"median":1.25}}`)
	f.Add(`{"plans":[{"plan":"on-demand","wall":2}]}`)
	f.Add(`{"plans":[{"plan":"x","wall":-1,"wall_p50":-3}],"calibration":{"median":-1}}`)
	f.Add(`{"plans":[],"calibration":null}`)
	f.Fuzz(func(t *testing.T, s string) {
		k, ok := KeptPlan(s)
		if !ok {
			return
		}
		if !(k.Shift > 0) || math.IsInf(k.Shift, 0) {
			t.Errorf("KeptPlan(%q): shift %v", s, k.Shift)
		}
		if k.WallP50 <= 0 && k.WallP50 != k.Wall {
			t.Errorf("KeptPlan(%q): median %v, mean %v", s, k.WallP50, k.Wall)
		}
		p := Pair{Predicted: k, Wall: time.Hour}
		if r, ok := p.Ratio(); ok && (!(r > 0) || math.IsInf(r, 0)) {
			t.Errorf("Ratio of %+v = %v", k, r)
		}
	})
}
