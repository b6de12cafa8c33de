package curve_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/virga-ml/virga/internal/search/curve"
)

// A synthetic is a learning curve with a known formula.
type synthetic struct {
	name string
	f    func(t float64) float64
}

// familyCurves returns one curve of each family Predict fits, with
// parameters drawn from r: the formulas are the families' own, written in raw
// steps.
func familyCurves(r *rand.Rand) []synthetic {
	u := func(lo, hi float64) float64 { return lo + (hi-lo)*r.Float64() }
	a, b, c, s, k := u(0.1, 0.5), u(0.8, 2), u(0.3, 1.5), u(0, 5), u(3, 15)
	return []synthetic{
		{"pow3", func(t float64) float64 { return a + b*math.Pow(t, -c) }},
		{"pow4", func(t float64) float64 { return a + b*math.Pow(t+s, -c) }},
		{"exp3", func(t float64) float64 { return a + b*math.Exp(-t/k) }},
		{"janoschek", func(t float64) float64 { return a + b*math.Exp(-0.5*math.Pow(t, c)) }},
		{"mmf", func(t float64) float64 { return a + b/(1+math.Pow(t/k, c+0.5)) }},
		{"logpower", func(t float64) float64 { return b / (1 + math.Pow(t/k, c+0.3)) }},
		{"ilog", func(t float64) float64 { return a + b/math.Log(1+t/(s+0.5)) }},
	}
}

// sample returns the steps stride, 2·stride, ..., n·stride and the values
// f(1), ..., f(n) plus Gaussian noise.
func sample(f func(float64) float64, n int, stride, noise float64, r *rand.Rand) (steps, values []float64) {
	for i := 1; i <= n; i++ {
		steps = append(steps, float64(i)*stride)
		v := f(float64(i))
		if noise > 0 {
			v += noise * r.NormFloat64()
		}
		values = append(values, v)
	}
	return steps, values
}

func mustPredict(t testing.TB, steps, values []float64, horizon float64) curve.Forecast {
	t.Helper()
	fc, err := curve.Predict(steps, values, horizon)
	if err != nil {
		t.Fatalf("Predict(%v, %v, %v): %v", steps, values, horizon, err)
	}
	return fc
}

func TestPredictRecoversEachFamily(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for rep := range 5 {
		for _, c := range familyCurves(r) {
			for _, stride := range []float64{1, 100} {
				t.Run(fmt.Sprintf("%s/%d/stride%v", c.name, rep, stride), func(t *testing.T) {
					steps, values := sample(c.f, 30, stride, 0, nil)
					horizon := 100 * stride
					fc := mustPredict(t, steps, values, horizon)
					want := c.f(100)
					// Noise-free data are fitted exactly by the family that made
					// them, which then takes all the weight.
					if tol := 1e-4 * (values[0] - values[29]); math.Abs(fc.Mean-want) > tol {
						t.Errorf("Mean = %.8f, want %.8f (within %.2g); Std %.3g, %d families", fc.Mean, want, tol, fc.Std, fc.Families)
					}
				})
			}
		}
	}
}

func TestPredictNoisyFamiliesAreCalibrated(t *testing.T) {
	// 203 curves (29 draws of the 7 families), observed at steps 1..30 with
	// noise of 1% of a typical drop, forecast at step 100.
	r := rand.New(rand.NewPCG(2, 2))
	const noise = 0.01
	var cases, inside int
	var absErr float64
	for range 29 {
		for _, c := range familyCurves(r) {
			steps, values := sample(c.f, 30, 1, noise, r)
			fc := mustPredict(t, steps, values, 100)
			want := c.f(100)
			cases++
			absErr += math.Abs(fc.Mean - want)
			if math.Abs(fc.Mean-want) <= 2*fc.Std {
				inside++
			}
		}
	}
	cover := float64(inside) / float64(cases)
	t.Logf("%d noisy curves: true value within 2 std in %.1f%%, mean absolute error %.4f", cases, 100*cover, absErr/float64(cases))
	if cover < 0.9 {
		t.Errorf("true value within mean ± 2 std in %.1f%% of %d cases, want >= 90%%", 100*cover, cases)
	}
	if mae := absErr / float64(cases); mae > 5*noise {
		t.Errorf("mean absolute error %.4f, want <= %.4f", mae, 5*noise)
	}
}

// lossCurves are decreasing curves that no single family describes: a fast
// phase and a slow one, as validation losses of neural networks often have.
func lossCurves(r *rand.Rand) []synthetic {
	u := func(lo, hi float64) float64 { return lo + (hi-lo)*r.Float64() }
	a, b, k, c, d := u(0.05, 0.3), u(1, 2), u(1.5, 4), u(0.2, 0.6), u(0.3, 0.8)
	return []synthetic{
		{"exp+pow", func(t float64) float64 { return a + b*math.Exp(-t/k) + c*math.Pow(t, -d) }},
		{"two exps", func(t float64) float64 { return a + b*math.Exp(-t/k) + c*math.Exp(-t/(8*k)) }},
		{"sigmoid", func(t float64) float64 { return a + b/(1+math.Exp((t-2*k)/k)) + c*math.Pow(t, -d) }},
	}
}

func TestPredictDecreasingLossCurves(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	var cases, inside int
	var absErr, lastErr float64
	for rep := range 30 {
		for _, c := range lossCurves(r) {
			steps, values := sample(c.f, 15, 1, 0.005, r)
			fc := mustPredict(t, steps, values, 45)
			want := c.f(45)
			last := values[len(values)-1]
			cases++
			absErr += math.Abs(fc.Mean - want)
			lastErr += math.Abs(last - want)
			if math.Abs(fc.Mean-want) <= 2*fc.Std {
				inside++
			}
			// A decreasing curve is forecast to keep decreasing, not to turn
			// up, and not to fall off a cliff.
			if fc.Mean > last+0.02 {
				t.Errorf("%s/%d: Mean %.4f above the last value %.4f", c.name, rep, fc.Mean, last)
			}
			if drop := values[0] - last; fc.Mean < last-drop {
				t.Errorf("%s/%d: Mean %.4f falls more than the whole drop so far below %.4f", c.name, rep, fc.Mean, last)
			}
		}
	}
	cover := float64(inside) / float64(cases)
	t.Logf("%d loss curves, 15 of 45 steps seen: MAE %.4f (last value as the forecast: %.4f), within 2 std %.1f%%",
		cases, absErr/float64(cases), lastErr/float64(cases), 100*cover)
	if absErr >= lastErr {
		t.Errorf("MAE %.4f no better than forecasting the last value (%.4f)", absErr/float64(cases), lastErr/float64(cases))
	}
	if cover < 0.85 {
		t.Errorf("true value within mean ± 2 std in %.1f%%, want >= 85%%", 100*cover)
	}
}

func TestPredictFlatCurve(t *testing.T) {
	steps, values := sample(func(float64) float64 { return 0.7 }, 20, 1, 0, nil)
	fc := mustPredict(t, steps, values, 60)
	if math.Abs(fc.Mean-0.7) > 1e-12 || fc.Std > 1e-6 || fc.Families == 0 {
		t.Errorf("flat at 0.7: got %+v, want Mean 0.7, Std <= 1e-6, some families", fc)
	}

	r := rand.New(rand.NewPCG(4, 4))
	const noise = 0.01
	for rep := range 20 {
		steps, values := sample(func(float64) float64 { return 0.7 }, 20, 1, noise, r)
		fc := mustPredict(t, steps, values, 60)
		if math.Abs(fc.Mean-0.7) > 4*noise || fc.Std <= 0 || fc.Std > 10*noise || math.Abs(fc.Mean-0.7) > 3*fc.Std {
			t.Errorf("noisy flat %d: got %+v, want Mean within %v of 0.7 and 3 Std, 0 < Std <= %v", rep, fc, 4*noise, 10*noise)
		}
	}
}

func TestPredictOverfittingCurve(t *testing.T) {
	// Validation losses that reach a minimum and rise again.
	r := rand.New(rand.NewPCG(5, 5))
	shapes := []synthetic{
		{"fast", func(t float64) float64 { return 0.3 + 2*math.Exp(-t/3) + 0.004*t }},
		{"slow", func(t float64) float64 { return 0.3 + 2*math.Exp(-t/6) + 0.01*t }},
		{"quadratic", func(t float64) float64 { return 0.5 + 0.002*(t-12)*(t-12) }},
	}
	for _, c := range shapes {
		for _, noise := range []float64{0, 0.005, 0.01} {
			for rep := range 5 {
				steps, values := sample(c.f, 30, 1, noise, r)
				lo, hi := slices.Min(values), slices.Max(values)
				fc := mustPredict(t, steps, values, 90)
				// Not far below: within 5% of the range seen.
				if floor := lo - 0.05*(hi-lo); fc.Mean < floor {
					t.Errorf("%s noise %v #%d: Mean %.4f below %.4f, 5%% of the range under the minimum %.4f so far", c.name, noise, rep, fc.Mean, floor, lo)
				}
			}
		}
	}
}

func TestPredictIsDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	for _, c := range lossCurves(r) {
		steps, values := sample(c.f, 12, 1, 0.01, r)
		first := mustPredict(t, steps, values, 40)
		other, _ := sample(func(t float64) float64 { return 1 / t }, 7, 1, 0, nil)
		mustPredict(t, other, other, 9) // no state carried between calls
		again := mustPredict(t, steps, values, 40)
		if first != again {
			t.Errorf("%s: Predict gave %+v, then %+v", c.name, first, again)
		}
	}
}

func TestPredictIsInvariantToUnits(t *testing.T) {
	// Multiplying the steps (epochs to batches) or the values (a loss in
	// other units) changes nothing but the units of the forecast.
	r := rand.New(rand.NewPCG(7, 7))
	for _, c := range append(lossCurves(r), familyCurves(r)...) {
		steps, values := sample(c.f, 12, 1, 0.01, r)
		base := mustPredict(t, steps, values, 40)
		scaledSteps := make([]float64, len(steps))
		scaledValues := make([]float64, len(values))
		for i := range steps {
			scaledSteps[i] = steps[i] * 250
			scaledValues[i] = values[i] * 8
		}
		got := mustPredict(t, scaledSteps, scaledValues, 40*250)
		if math.Abs(got.Mean-8*base.Mean) > 1e-6*8*math.Abs(base.Mean) || math.Abs(got.Std-8*base.Std) > 1e-6*8*base.Std {
			t.Errorf("%s: %+v, scaled %+v; want the mean and std times 8", c.name, base, got)
		}
	}
}

func TestStdGrowsWithHorizon(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	curves := append(lossCurves(r), familyCurves(r)...)
	for _, noise := range []float64{0, 0.01} {
		for _, c := range curves {
			steps, values := sample(c.f, 10, 1, noise, r)
			prev := 0.0
			for _, h := range []float64{11, 12, 15, 20, 30, 50, 100, 1000, 1e6} {
				fc := mustPredict(t, steps, values, h)
				if fc.Std < prev {
					t.Errorf("%s noise %v: Std %.6g at step %v, below %.6g nearer", c.name, noise, fc.Std, h, prev)
				}
				prev = fc.Std
			}
		}
	}
}

func TestPredictShortCurves(t *testing.T) {
	for _, values := range [][]float64{{2.3, 1.9, 1.7}, {1, 1, 1}, {1, 2, 3}, {0.5, 0.1, 0.4}, {2.3, 1.9, 1.7, 1.6}} {
		steps := make([]float64, len(values))
		for i := range steps {
			steps[i] = float64(i + 1)
		}
		fc := mustPredict(t, steps, values, 30)
		if fc.Std < 0 || math.IsNaN(fc.Mean) {
			t.Errorf("%v: %+v", values, fc)
		}
	}
}

func TestPredictErrors(t *testing.T) {
	ok := []float64{1, 2, 3, 4}
	vals := []float64{1, 0.5, 0.4, 0.35}
	tests := []struct {
		name          string
		steps, values []float64
		horizon       float64
		want          error
	}{
		{"no points", nil, nil, 10, curve.ErrTooFewPoints},
		{"two points", []float64{1, 2}, []float64{1, 0.5}, 10, curve.ErrTooFewPoints},
		{"lengths differ", ok, vals[:3], 10, curve.ErrInvalid},
		{"step below 1", []float64{0, 1, 2, 3}, vals, 10, curve.ErrInvalid},
		{"steps not increasing", []float64{1, 2, 2, 3}, vals, 10, curve.ErrInvalid},
		{"NaN step", []float64{1, math.NaN(), 3, 4}, vals, 10, curve.ErrInvalid},
		{"infinite step", []float64{1, 2, 3, math.Inf(1)}, vals, 10, curve.ErrInvalid},
		{"NaN value", ok, []float64{1, math.NaN(), 0.4, 0.3}, 10, curve.ErrInvalid},
		{"infinite value", ok, []float64{1, 0.5, math.Inf(-1), 0.3}, 10, curve.ErrInvalid},
		{"horizon at the last step", ok, vals, 4, curve.ErrInvalid},
		{"horizon before it", ok, vals, 2, curve.ErrInvalid},
		{"NaN horizon", ok, vals, math.NaN(), curve.ErrInvalid},
		{"infinite horizon", ok, vals, math.Inf(1), curve.ErrInvalid},
		{"overflowing forecast", ok, []float64{0, 0.6e308, 1.2e308, 1.79e308}, 10, curve.ErrRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc, err := curve.Predict(tt.steps, tt.values, tt.horizon)
			if !errors.Is(err, tt.want) {
				t.Errorf("Predict = %+v, %v; want error %v", fc, err, tt.want)
			}
		})
	}
}

func TestProbBelow(t *testing.T) {
	fc := curve.Forecast{Mean: 0.3, Std: 0.05}
	if p := fc.ProbBelow(0.3); p != 0.5 {
		t.Errorf("ProbBelow(Mean) = %v, want 0.5", p)
	}
	if p := fc.ProbBelow(0.3 - 0.05); math.Abs(p-0.158655) > 1e-5 {
		t.Errorf("ProbBelow(Mean - Std) = %v, want 0.158655", p)
	}
	if p := fc.ProbBelow(0.3 + 2*0.05); math.Abs(p-0.977250) > 1e-5 {
		t.Errorf("ProbBelow(Mean + 2 Std) = %v, want 0.977250", p)
	}
	prev := -1.0
	for x := -1.0; x <= 2; x += 0.01 {
		p := fc.ProbBelow(x)
		if p < prev || p < 0 || p > 1 {
			t.Fatalf("ProbBelow(%v) = %v after %v: not a non-decreasing probability", x, p, prev)
		}
		prev = p
	}
	if fc.ProbBelow(math.Inf(-1)) != 0 || fc.ProbBelow(math.Inf(1)) != 1 {
		t.Errorf("ProbBelow(±Inf) = %v, %v; want 0, 1", fc.ProbBelow(math.Inf(-1)), fc.ProbBelow(math.Inf(1)))
	}
	sure := curve.Forecast{Mean: 1}
	if sure.ProbBelow(0.9) != 0 || sure.ProbBelow(1) != 0.5 || sure.ProbBelow(1.1) != 1 {
		t.Errorf("with Std 0: ProbBelow(0.9, 1, 1.1) = %v, %v, %v; want 0, 0.5, 1", sure.ProbBelow(0.9), sure.ProbBelow(1), sure.ProbBelow(1.1))
	}
}

func FuzzPredict(f *testing.F) {
	f.Add(1.0, 2.0, 3.0, 4.0, 2.3, 1.2, 0.8, 0.7, 27.0)
	f.Add(1.0, 2.0, 3.0, 4.0, 1.0, 1.0, 1.0, 1.0, 5.0)
	f.Add(1.0, 10.0, 100.0, 1000.0, -0.5, -0.9, -0.95, -0.97, 1e9)
	f.Add(1.0, 1.0000001, 1.0000002, 1e300, 1e-300, -1e300, 0.0, 5.0, 1.7e308)
	f.Add(3.0, 4.0, 5.0, 6.0, 0.1, 0.5, 10.0, 10.0, 7.0)
	f.Fuzz(func(t *testing.T, s0, s1, s2, s3, v0, v1, v2, v3, horizon float64) {
		check := func(steps, values []float64, horizon float64) {
			fc, err := curve.Predict(steps, values, horizon)
			if err != nil {
				return
			}
			if math.IsNaN(fc.Mean) || math.IsInf(fc.Mean, 0) || math.IsNaN(fc.Std) || math.IsInf(fc.Std, 0) || fc.Std < 0 {
				t.Fatalf("Predict(%v, %v, %v) = %+v without an error", steps, values, horizon, fc)
			}
			if fc.Families < 0 || fc.Families > 7 {
				t.Fatalf("Predict(%v, %v, %v): Families = %d", steps, values, horizon, fc.Families)
			}
		}
		steps := []float64{s0, s1, s2, s3}
		values := []float64{v0, v1, v2, v3}
		for _, n := range []int{3, 4} {
			// As given (mostly invalid), then made valid so that the
			// arbitrary values reach the fit: steps from the gaps' sizes,
			// the horizon after the last.
			check(steps[:n], values[:n], horizon)
			valid := make([]float64, n)
			at := 1.0
			for i := range n {
				if gap := math.Abs(steps[i]); i > 0 && gap > 0 && gap < 1e12 {
					at += gap
				} else if i > 0 {
					at++
				}
				valid[i] = at
			}
			h := valid[n-1] + math.Min(math.Abs(horizon), 1e15) + 1e-9*valid[n-1]
			check(valid, values[:n], h)
		}
	})
}

func BenchmarkPredict(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 9))
	for _, n := range []int{10, 30, 100} {
		steps, values := sample(func(t float64) float64 { return 0.3 + 1.5*math.Pow(t+2, -0.8) }, n, 1, 0.01, r)
		b.Run(fmt.Sprintf("points=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := curve.Predict(steps, values, float64(3*n)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
