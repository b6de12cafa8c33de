// Package curve forecasts where a learning curve is going: it fits an ensemble
// of parametric curve families (power laws, exponentials, MMF, Janoschek, ...)
// to the values a trial has reported so far and returns its expected value at
// a later step, with an uncertainty, in the spirit of Domhan, Springenberg and
// Hutter (IJCAI 2015).
//
// The package is pure computation: deterministic, no goroutines, no I/O, no
// randomness. It only forecasts; deciding what to do with a forecast (the
// "curve" early-stopping rule) belongs to the searcher.
package curve

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Errors returned by Predict.
var (
	// ErrTooFewPoints means the curve has fewer than 3 points.
	ErrTooFewPoints = errors.New("too few points to forecast a curve (need 3)")
	// ErrInvalid means the curve or the horizon is malformed.
	ErrInvalid = errors.New("invalid curve")
	// ErrRange means the forecast does not fit in a float64.
	ErrRange = errors.New("curve forecast out of range")
)

// Forecast is a learning curve's predicted value at a horizon.
type Forecast struct {
	// Mean is the expected value at the horizon.
	Mean float64
	// Std is its standard deviation: the curve's noise, the fitted
	// parameters' uncertainty and the disagreement between families. It never
	// decreases as the horizon moves further out.
	Std float64
	// Families is how many fitted families the forecast at the horizon
	// combines; 0 when none is acceptable and the forecast is the mean of the
	// last third of the curve with the variance of the whole curve.
	Families int
}

// ProbBelow returns the probability that the value at the horizon is below
// threshold, under a normal distribution with the forecast's mean and
// standard deviation. It is non-decreasing in threshold and 0.5 at Mean.
func (f Forecast) ProbBelow(threshold float64) float64 {
	switch {
	case math.IsNaN(threshold):
		return math.NaN()
	case threshold == f.Mean:
		return 0.5
	case f.Std == 0 || math.IsInf(threshold, 0):
		if threshold < f.Mean {
			return 0
		}
		return 1
	}
	return 0.5 * math.Erfc((f.Mean-threshold)/(f.Std*math.Sqrt2))
}

// Tuning constants, in normalised units (the observed values span [-1, 1],
// so the observed range is 2). They were chosen on the digits-mlp and
// digits-xgb tables of bench/search (see TestTables).
const (
	// recency is how much more the last point weighs in the fit than the
	// first (weights grow linearly with the point's index).
	recency = 1.0
	// evidence is how many independent observations a curve's residuals are
	// worth when families are compared: the residuals of a learning curve
	// are strongly correlated, and counting all n of them as independent
	// (plain BIC weights) lets one family take all the weight and makes the
	// forecast overconfident. A member's weight is exp(-BIC/2 · evidence/n).
	evidence = 1.5
	// noPointsNoise is the noise standard deviation assumed when a family
	// leaves no degree of freedom to estimate it (3 points, 3 parameters).
	noPointsNoise = 0.1
	// minNoise is the smallest standard deviation of a forecast, so that a
	// flat or exactly fitted curve still has a (tiny) uncertainty.
	minNoise = 1e-9
	// maxParamStd caps the standard deviation a family's parameter
	// uncertainty adds at the horizon: an ill-determined fit says "anything
	// within the observed range", not "anything at all".
	maxParamStd = 1.0
	// maxChange rejects a family whose forecast moves further than this from
	// its value at the last point (the observed range), unless straight times
	// the recent slope continued in a straight line would move further
	// still (a curve still falling steadily may fall much further).
	maxChange = 2.0
	straight  = 0.75
	// against rejects a family whose forecast moves against the recent trend
	// of the data by more than this, or than twice its noise.
	against = 0.05
)

// Predict fits the ensemble to a partial curve and forecasts its value at
// horizon. steps must be finite, at least 1 and strictly increasing; values
// are the objective in minimising form (a loss, or a negated accuracy), one
// per step, and finite; horizon must be a finite step after the last. It
// returns ErrTooFewPoints for fewer than 3 points, ErrInvalid for a
// malformed curve, and ErrRange when the forecast overflows. The same input
// always gives the same forecast.
//
// Each family is fitted by weighted least squares, later points weighing
// more; a fit whose residual variance exceeds the curve's own variance is
// dropped. At a horizon, a fit is acceptable when its forecast is finite,
// does not go below zero if every value so far is positive, moves no further
// from the fit's last value than the observed range (or than the recent
// slope continued in a straight line, if that is further), and does not go
// against the data: up by more than its noise while the recent points are
// not rising significantly, or down while they are. A curve whose last third
// rises significantly (overfitting) is forecast from its minimum on. The
// acceptable fits are averaged with tempered BIC weights (see evidence); the
// variance is the mixture's: each fit's residual variance, plus its
// parameters' uncertainty at the horizon (delta method), plus its distance
// from the mean. The variance reported is the largest over a fixed ladder of
// steps up to the first rung at or beyond the horizon, so it never decreases
// as the horizon moves out.
func Predict(steps, values []float64, horizon float64) (Forecast, error) {
	n := len(values)
	if len(steps) != n {
		return Forecast{}, fmt.Errorf("%w: %d steps but %d values", ErrInvalid, len(steps), n)
	}
	if n < 3 {
		return Forecast{}, fmt.Errorf("%w: got %d", ErrTooFewPoints, n)
	}
	for i := range n {
		if math.IsNaN(values[i]) || math.IsInf(values[i], 0) {
			return Forecast{}, fmt.Errorf("%w: value %d is %v", ErrInvalid, i, values[i])
		}
		if math.IsNaN(steps[i]) || math.IsInf(steps[i], 0) || steps[i] < 1 {
			return Forecast{}, fmt.Errorf("%w: step %d is %v, want a finite step >= 1", ErrInvalid, i, steps[i])
		}
		if i > 0 && steps[i] <= steps[i-1] {
			return Forecast{}, fmt.Errorf("%w: step %d (%v) is not after step %d (%v)", ErrInvalid, i, steps[i], i-1, steps[i-1])
		}
	}
	last := steps[n-1]
	if math.IsNaN(horizon) || math.IsInf(horizon, 0) || horizon <= last {
		return Forecast{}, fmt.Errorf("%w: horizon %v, want a finite step after %v", ErrInvalid, horizon, last)
	}
	if math.IsInf(horizon/last, 0) {
		return Forecast{}, fmt.Errorf("%w: horizon %v is too far after step %v", ErrRange, horizon, last)
	}
	out := forecast(steps, values, horizon, true)
	if math.IsNaN(out.Mean) || math.IsInf(out.Mean, 0) || math.IsNaN(out.Std) || math.IsInf(out.Std, 0) {
		return Forecast{}, fmt.Errorf("%w: mean %v, std %v", ErrRange, out.Mean, out.Std)
	}
	return out, nil
}

// forecast is Predict after validation. whole is false when the curve is the
// part of a curve from its minimum on.
func forecast(steps, values []float64, horizon float64, whole bool) Forecast {
	// 1. Normalise.
	n := len(values)
	d, center, scale := newData(steps, values)
	uh := horizon / steps[n-1]

	// 2. The curve's own spread and its recent direction. A curve that has
	// turned upwards (overfitting) is forecast from its minimum on: its
	// earlier descent says nothing of where it is going now.
	for i := range n {
		d.grid[i] = 1
	}
	_, _, rss0 := d.linear(false, d.grid) // the constant fit
	var0 := rss0 / float64(n-1)
	_, rising := d.recentTrend(d.lu)
	if rising && whole {
		low := 0
		for i, v := range values {
			if v < values[low] {
				low = i
			}
		}
		if low = min(low, n-3); low > 0 {
			// The rise could as well stop where it is: the uncertainty is at
			// least the rise so far.
			f := forecast(steps[low:], values[low:], horizon, false)
			f.Std = math.Max(f.Std, values[n-1]-values[low])
			return f
		}
	}
	slope, _ := d.recentTrend(d.u)
	e := &ensemble{d: d, var0: var0, slope: slope, rising: rising, floor: math.Inf(-1)}
	if slices.Min(values) > 0 {
		e.floor = d.zero // a positive objective (a loss) stays positive
	}

	// 3. Fit every family.
	for _, fam := range families {
		if f, ok := d.fitFamily(fam); ok {
			e.add(f)
		}
	}

	// 4. Combine: the mean at the horizon; the variance the largest over a
	// fixed ladder of steps up to the first at or beyond the horizon, so
	// that it never shrinks as the horizon moves out, though the members
	// acceptable at each step may differ.
	mean, _, k := e.at(uh)
	variance := 0.0
	for u := 1.0; u < uh; {
		u = nextRung(u)
		_, v, _ := e.at(u)
		variance = math.Max(variance, v)
	}
	variance = math.Max(variance, minNoise*minNoise)

	// 5. Back to the caller's units.
	return Forecast{
		Mean:     center + scale*mean,
		Std:      scale * math.Sqrt(variance),
		Families: k,
	}
}

// nextRung returns the rung of the variance ladder after u: steps 2^(1/8)
// apart up to 4096 times the last step, then u^1.25 (so that any horizon is
// a few dozen rungs away).
func nextRung(u float64) float64 {
	if u < 4096 {
		return u * 1.0905077326652577 // 2^(1/8)
	}
	return math.Min(math.Pow(u, 1.25), math.MaxFloat64)
}

// newData normalises a curve: steps divided by the last, values shifted and
// scaled to [-1, 1] (computed in halves, which cannot overflow). It returns
// the shift and scale.
func newData(steps, values []float64) (d *data, center, scale float64) {
	n := len(values)
	last := steps[n-1]
	lo, hi := values[0], values[0]
	for _, v := range values {
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	center, scale = lo/2+hi/2, hi/2-lo/2
	if !(scale > 0) {
		scale = math.Max(math.Abs(center), 1)
	}
	d = &data{
		n:      n,
		u:      make([]float64, n),
		lu:     make([]float64, n),
		y:      make([]float64, n),
		w:      make([]float64, n),
		grid:   make([]float64, n),
		ev:     [2]evaluation{newEvaluation(n), newEvaluation(n)},
		single: newEvaluation(1),
		su:     [2][]float64{make([]float64, 1), make([]float64, 1)},
	}
	wsum := 0.0
	for i := range n {
		d.u[i] = steps[i] / last
		d.lu[i] = math.Log(d.u[i])
		d.y[i] = (values[i]/2 - center/2) / (scale / 2)
		d.w[i] = 1 + recency*float64(i)/float64(n-1)
		wsum += d.w[i]
	}
	for i := range n {
		d.w[i] *= float64(n) / wsum
	}
	d.u[n-1], d.lu[n-1] = 1, 0
	d.u1 = d.u[0]
	d.zero = -center / scale
	if math.IsInf(d.zero, 0) || math.IsNaN(d.zero) {
		d.zero = math.Copysign(math.MaxFloat64, d.zero)
	}
	return d, center, scale
}

// An ensemble is the families fitted to a curve and what a forecast from
// them must respect.
type ensemble struct {
	d       *data
	members []member
	use     []*member // scratch: the members acceptable at a step
	var0    float64   // the curve's variance: no member's residual variance exceeds it
	slope   float64   // the recent slope, against the normalised step
	rising  bool      // the curve rises significantly: no forecast may fall
	floor   float64   // the lowest acceptable forecast
}

// member is a family fitted to the curve.
type member struct {
	fit
	noise float64 // residual variance
	bic   float64
	last  float64 // the fit's value at the last step
	// scratch for at: the weight, and the mean and variance at a step
	weight, mean, v float64
}

// add makes f a member, unless its residual variance exceeds the curve's.
func (e *ensemble) add(f fit) {
	d := e.d
	m := member{fit: f}
	k := len(f.act)
	if dof := d.n - k; dof > 0 {
		m.noise = f.rss / float64(dof)
	} else {
		m.noise = noPointsNoise * noPointsNoise
	}
	if m.noise > e.var0*(1+1e-9)+1e-20 {
		return
	}
	m.last, _ = d.at(&m.fit, 1)
	ml := math.Max(f.rss/float64(d.n), 1e-24)
	m.bic = float64(d.n)*math.Log(ml) + float64(k)*math.Log(float64(d.n))
	e.members = append(e.members, m)
}

// acceptable reports whether m's forecast at u is acceptable: finite, above
// the floor, no further from its value at the last step than the observed
// range (or the recent slope continued, times straight), and not against the
// curve's direction by more than its noise.
func (e *ensemble) acceptable(m *member, u float64) bool {
	end, _ := e.d.at(&m.fit, u)
	change := end - m.last
	maxMove := math.Max(maxChange, straight*math.Abs(e.slope)*(u-1))
	if math.IsNaN(change) || math.IsInf(change, 0) || math.Abs(change) > maxMove || end < e.floor {
		return false
	}
	tol := math.Max(against, 2*math.Sqrt(m.noise))
	return !(!e.rising && change > tol || e.rising && change < -tol)
}

// at returns the forecast's mean and variance at u, and how many members it
// combines: the mixture of the members acceptable at u, weighted by their
// BIC tempered by evidence/n, exp(-BIC/2 · evidence/n). Each member adds its
// residual variance and its parameters' uncertainty at u (the delta method,
// capped at maxParamStd). With no acceptable member, the forecast is the mean
// of the last third of the curve, with the whole curve's variance.
func (e *ensemble) at(u float64) (mean, variance float64, k int) {
	d := e.d
	e.use = e.use[:0]
	best := math.Inf(1)
	for i := range e.members {
		if m := &e.members[i]; e.acceptable(m, u) {
			e.use = append(e.use, m)
			best = math.Min(best, m.bic)
		}
	}
	if len(e.use) == 0 {
		last := max(3, (d.n+2)/3)
		for _, y := range d.y[d.n-last:] {
			mean += y
		}
		return mean / float64(last), e.var0, 0
	}
	total := 0.0
	for _, m := range e.use {
		m.weight = math.Exp(-(m.bic - best) / 2 * evidence / float64(d.n))
		total += m.weight
	}
	for _, m := range e.use {
		m.weight /= total
		var grad [4]float64
		m.mean, grad = d.at(&m.fit, u)
		pv := 0.0
		for _, x := range m.act {
			for _, y := range m.act {
				pv += grad[x] * m.cov[x][y] * grad[y]
			}
		}
		pv *= m.noise
		if !(pv <= maxParamStd*maxParamStd) { // also NaN
			pv = maxParamStd * maxParamStd
		}
		m.v = m.noise + math.Max(pv, 0)
		mean += m.weight * m.mean
	}
	for _, m := range e.use {
		dm := m.mean - mean
		variance += m.weight * (m.v + dm*dm)
	}
	return mean, variance, len(e.use)
}

// recentTrend returns the least-squares slope of the last third of the curve
// (at least 4 points, or all of them) against xs (the normalised step or
// its logarithm), and whether it rises significantly: a positive slope more
// than about Student's t at 97.5% standard errors from zero.
func (d *data) recentTrend(xs []float64) (slope float64, rising bool) {
	k := min(d.n, max(4, (d.n+2)/3))
	xs, ys := xs[d.n-k:], d.y[d.n-k:]
	var xm, ym float64
	for i := range k {
		xm += xs[i]
		ym += ys[i]
	}
	xm /= float64(k)
	ym /= float64(k)
	var sxx, sxy float64
	for i := range k {
		sxx += (xs[i] - xm) * (xs[i] - xm)
		sxy += (xs[i] - xm) * (ys[i] - ym)
	}
	if !(sxx > 0) {
		return 0, false
	}
	slope = sxy / sxx
	var rss float64
	for i := range k {
		r := ys[i] - ym - slope*(xs[i]-xm)
		rss += r * r
	}
	dof := float64(k - 2)
	se := math.Sqrt(rss / dof / sxx)
	// t at 97.5% is about 12.7 for 1 degree of freedom, 4.3 for 2, 2.8 for
	// 4, 2.2 for 10.
	return slope, slope > 0 && slope > (2+10/(dof*dof))*se
}
