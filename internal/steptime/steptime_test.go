package steptime

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/search"
	"github.com/virga-ml/virga/internal/spec"
)

// space is a network's search space: step time grows with the width as a
// power, shrinks with the batch size (fewer batches per epoch), depends on
// the activation, and not at all on the learning rate.
func space() *spec.Experiment {
	return &spec.Experiment{
		Order: []string{"hidden", "batch", "lr", "act"},
		Hyperparameters: map[string]*spec.Hyperparameter{
			"hidden": {Name: "hidden", Type: spec.HPInt, Min: 8, Max: 256, Log: true},
			"batch":  {Name: "batch", Type: spec.HPInt, Min: 16, Max: 256},
			"lr":     {Name: "lr", Type: spec.HPFloat, Min: 1e-4, Max: 1e-1, Log: true},
			"act":    {Name: "act", Type: spec.HPCategorical, Values: []any{"relu", "gelu"}},
		},
	}
}

var twoCPU = virga.Resources{CPU: 2}

// truth is the step time of a configuration, and noise its spread between
// trials of one configuration (5%).
func truth(p map[string]any) time.Duration {
	h := float64(p["hidden"].(int64))
	b := float64(p["batch"].(int64))
	s := 0.02 * math.Pow(h/8, 0.6) * math.Pow(b/16, -0.8)
	if p["act"] == "gelu" {
		s *= 1.3
	}
	return time.Duration(s * float64(time.Second))
}

func measure(t *testing.T, pts []map[string]any, r *rand.Rand) []Obs {
	t.Helper()
	obs := make([]Obs, len(pts))
	for i, p := range pts {
		obs[i] = Obs{Point: p, Resources: twoCPU, StepTime: time.Duration(float64(truth(p)) * math.Exp(0.05*r.NormFloat64()))}
	}
	return obs
}

// check forecasts 400 random configurations and returns the median
// relative error of the median forecast against the configuration's true
// step time, and the share of new trials' step times (the truth and its
// noise) inside the forecast's 10-90% interval.
func check(t *testing.T, m *Model, r *rand.Rand) (medErr, cover, width float64) {
	t.Helper()
	var errs, widths []float64
	in := 0
	const n = 400
	for range n {
		p := map[string]any{
			"hidden": int64(math.Round(8 * math.Pow(32, r.Float64()))),
			"batch":  16 + r.Int64N(241),
			"lr":     1e-4 * math.Pow(1000, r.Float64()),
			"act":    []any{"relu", "gelu"}[r.IntN(2)],
		}
		pr, err := m.Predict(p, twoCPU)
		if err != nil {
			t.Fatal(err)
		}
		want := truth(p)
		errs = append(errs, math.Abs(float64(pr.Median()-want))/float64(want))
		trial := time.Duration(float64(want) * math.Exp(0.05*r.NormFloat64()))
		lo, hi := pr.Quantile(0.1), pr.Quantile(0.9)
		if lo <= trial && trial <= hi {
			in++
		}
		widths = append(widths, float64(hi)/float64(lo))
	}
	slices.Sort(errs)
	slices.Sort(widths)
	return errs[len(errs)/2], float64(in) / n, widths[len(widths)/2]
}

// TestLearnsFromADesign: profiled at 8 configurations spanning the space,
// the model forecasts any configuration's step time within 10% (median
// error), and its 10-90% intervals hold the truth about 80% of the time;
// one configuration (the profile of old) cannot tell the width's effect, and
// the model says so: its intervals are wide enough to still hold the truth
// most of the time, though its median is far off.
func TestLearnsFromADesign(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pts, err := search.Design(space(), 8, r)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Fit(space(), measure(t, pts, r))
	if err != nil {
		t.Fatal(err)
	}
	medErr, cover, width := check(t, m, r)
	t.Logf("8 designed configurations: median error %.1f%%, 10-90%% interval holds %.0f%%, p90/p10 %.2f", 100*medErr, 100*cover, width)
	if medErr > 0.10 {
		t.Errorf("median error %.1f%% from 8 designed configurations, want at most 10%%", 100*medErr)
	}
	// Trials vary by 5%: an interval that holds 80% of them is 1.14 wide.
	// With 8 measurements of 5 unknowns the model cannot be that sure of
	// the noise; it must not be much less sure either.
	if cover < 0.75 || width > 1.5 {
		t.Errorf("the 10-90%% interval holds the truth %.0f%% of the time and is %.2f wide (p90/p10), want at least 75%% and at most 1.5", 100*cover, width)
	}

	one, err := Fit(space(), measure(t, pts[:1], r))
	if err != nil {
		t.Fatal(err)
	}
	medErr1, cover1, width1 := check(t, one, r)
	t.Logf("1 configuration: median error %.1f%%, 10-90%% interval holds %.0f%%, p90/p10 %.2f", 100*medErr1, 100*cover1, width1)
	if medErr1 < medErr {
		t.Errorf("one measurement forecast better (%.1f%%) than eight (%.1f%%)", 100*medErr1, 100*medErr)
	}
	if cover1 < 0.6 {
		t.Errorf("from one measurement the 10-90%% interval holds the truth %.0f%% of the time: it claims to know what it cannot", 100*cover1)
	}
}

// TestSampleSpreadIsThePosterior: draws of the model spread around its
// forecast as the forecast says (their 10-90% range of one configuration's
// step time is the forecast's, within sampling error).
func TestSampleSpreadIsThePosterior(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	pts, _ := search.Design(space(), 4, r)
	m, err := Fit(space(), measure(t, pts, r))
	if err != nil {
		t.Fatal(err)
	}
	p := map[string]any{"hidden": int64(200), "batch": int64(20), "lr": 0.01, "act": "gelu"}
	pr, err := m.Predict(p, twoCPU)
	if err != nil {
		t.Fatal(err)
	}
	var draws []float64
	for range 4000 {
		st, err := m.Sample(r).Noisy(p, twoCPU, r)
		if err != nil {
			t.Fatal(err)
		}
		draws = append(draws, st.Seconds())
	}
	slices.Sort(draws)
	for _, q := range []float64{0.1, 0.5, 0.9} {
		got, want := draws[int(q*float64(len(draws)))], pr.Quantile(q).Seconds()
		if math.Abs(math.Log(got/want)) > 0.1 {
			t.Errorf("q%.0f of the draws %.4fs, the forecast's %.4fs", 100*q, got, want)
		}
	}
}

// TestResourcesCount: a trial measured on 1, 2 and 4 CPUs whose step time
// halves with each doubling is forecast at 8 CPUs near half the 4-CPU time.
func TestResourcesCount(t *testing.T) {
	p := map[string]any{"hidden": int64(64), "batch": int64(64), "lr": 0.01, "act": "relu"}
	var obs []Obs
	for _, c := range []float64{1, 2, 4} {
		obs = append(obs, Obs{Point: p, Resources: virga.Resources{CPU: c}, StepTime: time.Duration(float64(time.Second) / c)})
	}
	m, err := Fit(space(), obs)
	if err != nil {
		t.Fatal(err)
	}
	pr, _ := m.Predict(p, virga.Resources{CPU: 8})
	if got := pr.Median(); got < 100*time.Millisecond || got > 160*time.Millisecond {
		t.Errorf("at 8 CPUs: %s, want about 125ms", got)
	}
}

// TestBadMeasurements: what cannot be learnt from is refused with the
// reason.
func TestBadMeasurements(t *testing.T) {
	p := map[string]any{"hidden": int64(64), "batch": int64(64), "lr": 0.01, "act": "relu"}
	for name, obs := range map[string][]Obs{
		"none":     nil,
		"zero":     {{Point: p, StepTime: 0}},
		"missing":  {{Point: map[string]any{"hidden": int64(64)}, StepTime: time.Second}},
		"category": {{Point: map[string]any{"hidden": int64(64), "batch": int64(64), "lr": 0.01, "act": "swish"}, StepTime: time.Second}},
	} {
		if _, err := Fit(space(), obs); err == nil {
			t.Errorf("%s: no error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// TestDisagreeingMeasurementsStayBounded: measurements that disagree (a
// step time here includes a pause, there not) make the noise large, but
// must not make every weight large with it: the mean over draws of the
// step time of a configuration far from the measured ones stays within
// reach of what was measured.
func TestDisagreeingMeasurementsStayBounded(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	p := map[string]any{"hidden": int64(16), "batch": int64(32), "lr": 0.01, "act": "relu"}
	var obs []Obs
	for _, ms := range []float64{20, 200, 25, 400, 18} {
		obs = append(obs, Obs{Point: p, Resources: twoCPU, StepTime: time.Duration(ms * float64(time.Millisecond))})
	}
	m, err := Fit(space(), obs)
	if err != nil {
		t.Fatal(err)
	}
	far := map[string]any{"hidden": int64(256), "batch": int64(256), "lr": 0.1, "act": "gelu"}
	sum := 0.0
	const n = 2000
	for range n {
		st, err := m.Sample(r).StepTime(far, twoCPU)
		if err != nil {
			t.Fatal(err)
		}
		sum += st.Seconds()
	}
	if mean := sum / n; mean > 100 {
		t.Errorf("mean step time over draws %.3gs, from measurements of 18-400ms: the weights grew with the noise", mean)
	}
}
