// Package steptime learns a trial's step time as a function of its
// hyperparameters and resources from what has been measured (profiled
// configurations, earlier trials), with the error of what it learnt, for
// forecasts of a whole search's time and cost.
//
// The model: the log of the step time is linear in the features of a
// configuration (each int and float hyperparameter's place in its range, on
// the log scale for positive ranges, so that sizes act as powers; each
// categorical value but the first as an indicator; the log of the CPUs and
// of one plus the GPUs), with Gaussian noise. It is fitted as a Bayesian
// linear regression with the conjugate normal-inverse-gamma prior: the
// weights of the features a priori free within reason (a factor of 20 over a whole range
// is one prior standard deviation), the intercept left to the data, the
// noise about 10%. With few measurements the prior keeps the unmeasured
// directions uncertain instead of guessing; the predictive distribution of
// the log step time is Student's t. Sample draws a whole model (weights and
// noise) from the posterior, so that the trials of one simulated run share
// one draw of what the step time is: the uncertainty of what was learnt
// does not average away over many trials, as the noise of each does.
package steptime

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/stat/distuv"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/spec"
)

// Obs is one measured step time of a configuration on some resources.
type Obs struct {
	Point     map[string]any
	Resources virga.Resources
	StepTime  time.Duration
}

// Prior settings, in the log of the step time.
const (
	// weightSD is the prior standard deviation of a feature's weight: the
	// change of the log step time over the feature's whole range.
	weightSD = 3.0
	// noiseSD is the prior guess of the noise (0.1: 10%), held as if seen
	// in priorDoF measurements.
	noiseSD  = 0.1
	priorDoF = 1.0
	// interceptSD leaves the intercept to the data.
	interceptSD = 1e3
)

// Model is a fitted step-time model.
type Model struct {
	f    *features
	mean *mat.VecDense // posterior mean of the weights (intercept first)
	cov  *mat.SymDense // posterior covariance of the weights, over the noise variance
	a, b float64       // the noise variance's posterior inverse-gamma shape and scale
	n    int
}

// Fit learns the step time of e's configurations from obs (at least one).
func Fit(e *spec.Experiment, obs []Obs) (*Model, error) {
	if len(obs) == 0 {
		return nil, errors.New("step time: no measurement to learn from")
	}
	f, err := newFeatures(e)
	if err != nil {
		return nil, err
	}
	d := f.dim()
	x := mat.NewDense(len(obs), d, nil)
	y := mat.NewVecDense(len(obs), nil)
	ybar := 0.0
	for i, o := range obs {
		if o.StepTime <= 0 {
			return nil, fmt.Errorf("step time: measurement %d is %s; want a positive duration", i+1, o.StepTime)
		}
		row, err := f.vector(o.Point, o.Resources)
		if err != nil {
			return nil, fmt.Errorf("step time: measurement %d: %w", i+1, err)
		}
		x.SetRow(i, row)
		ly := math.Log(o.StepTime.Seconds())
		y.SetVec(i, ly)
		ybar += ly
	}
	ybar /= float64(len(obs))

	// Prior: w | s2 ~ N(m0, s2 V0), s2 ~ IG(a0, b0), with V0 such that a
	// weight's prior standard deviation is weightSD when s2 is noiseSD^2.
	m0 := mat.NewVecDense(d, nil)
	m0.SetVec(0, ybar)
	v0inv := mat.NewDiagDense(d, nil)
	v0inv.SetDiag(0, 1/(interceptSD*interceptSD))
	for j := 1; j < d; j++ {
		v0inv.SetDiag(j, noiseSD*noiseSD/(weightSD*weightSD))
	}
	a0 := priorDoF / 2
	b0 := a0 * noiseSD * noiseSD

	// Posterior: Vn = (V0^-1 + X'X)^-1, mn = Vn (V0^-1 m0 + X'y),
	// an = a0 + n/2, bn = b0 + (y'y + m0'V0^-1 m0 - mn'Vn^-1 mn)/2.
	var prec mat.SymDense
	prec.SymOuterK(1, x.T())
	for j := range d {
		prec.SetSym(j, j, prec.At(j, j)+v0inv.At(j, j))
	}
	var chol mat.Cholesky
	if !chol.Factorize(&prec) {
		return nil, errors.New("step time: the measurements' features are degenerate")
	}
	var rhs, t mat.VecDense
	rhs.MulVec(x.T(), y)
	t.MulVec(v0inv, m0)
	rhs.AddVec(&rhs, &t)
	mn := mat.NewVecDense(d, nil)
	if err := chol.SolveVecTo(mn, &rhs); err != nil {
		return nil, fmt.Errorf("step time: %w", err)
	}
	cov := mat.NewSymDense(d, nil)
	if err := chol.InverseTo(cov); err != nil {
		return nil, fmt.Errorf("step time: %w", err)
	}
	var pm mat.VecDense
	pm.MulVec(&prec, mn)
	an := a0 + float64(len(obs))/2
	bn := b0 + (mat.Dot(y, y)+mat.Dot(m0, &t)-mat.Dot(mn, &pm))/2
	bn = max(bn, b0/4) // rounding must not make it vanish
	return &Model{f: f, mean: mn, cov: cov, a: an, b: bn, n: len(obs)}, nil
}

// Measurements is how many step times the model learnt from.
func (m *Model) Measurements() int { return m.n }

// Prediction is the forecast step time of one configuration: its log is
// Student's t with location Loc, scale Scale and DoF degrees of freedom.
type Prediction struct {
	Loc, Scale, DoF float64
}

// Predict forecasts the step time of a configuration on res.
func (m *Model) Predict(point map[string]any, res virga.Resources) (Prediction, error) {
	row, err := m.f.vector(point, res)
	if err != nil {
		return Prediction{}, err
	}
	x := mat.NewVecDense(len(row), row)
	var vx mat.VecDense
	vx.MulVec(m.cov, x)
	s2 := m.b / m.a * (1 + mat.Dot(x, &vx))
	return Prediction{Loc: mat.Dot(x, m.mean), Scale: math.Sqrt(s2), DoF: 2 * m.a}, nil
}

// Quantile is the step time below which the forecast puts probability q.
func (p Prediction) Quantile(q float64) time.Duration {
	t := distuv.StudentsT{Mu: p.Loc, Sigma: p.Scale, Nu: p.DoF}
	return seconds(math.Exp(t.Quantile(q)))
}

// Median is the forecast's median step time.
func (p Prediction) Median() time.Duration { return seconds(math.Exp(p.Loc)) }

// Sample is one draw of the model from its posterior: the weights and the
// noise of a possible truth.
type Sample struct {
	f     *features
	w     []float64
	sigma float64
}

// Sample draws weights and noise from the posterior with r.
func (m *Model) Sample(r *rand.Rand) Sample {
	d := m.f.dim()
	// s2 ~ IG(a, b): b / Gamma(a, 1).
	g := distuv.Gamma{Alpha: m.a, Beta: 1, Src: r}
	s2 := m.b / max(g.Rand(), 1e-12)
	// w ~ N(mean, s2 cov).
	var chol mat.Cholesky
	w := make([]float64, d)
	if chol.Factorize(m.cov) {
		var l mat.TriDense
		chol.LTo(&l)
		z := mat.NewVecDense(d, nil)
		for j := range d {
			z.SetVec(j, r.NormFloat64())
		}
		var lz mat.VecDense
		lz.MulVec(&l, z)
		for j := range d {
			w[j] = m.mean.AtVec(j) + math.Sqrt(s2)*lz.AtVec(j)
		}
	} else {
		for j := range d {
			w[j] = m.mean.AtVec(j)
		}
	}
	return Sample{f: m.f, w: w, sigma: math.Sqrt(s2)}
}

// StepTime is the step time this draw gives a configuration on res,
// without noise (the typical step time of such a trial).
func (s Sample) StepTime(point map[string]any, res virga.Resources) (time.Duration, error) {
	row, err := s.f.vector(point, res)
	if err != nil {
		return 0, err
	}
	l := 0.0
	for j, v := range row {
		l += s.w[j] * v
	}
	return seconds(math.Exp(l)), nil
}

// Noisy is StepTime with one trial's noise drawn from r: the variation of
// trials of the same configuration.
func (s Sample) Noisy(point map[string]any, res virga.Resources, r *rand.Rand) (time.Duration, error) {
	st, err := s.StepTime(point, res)
	if err != nil {
		return 0, err
	}
	return seconds(st.Seconds() * math.Exp(s.sigma*r.NormFloat64())), nil
}

func seconds(s float64) time.Duration {
	if s > float64(math.MaxInt64)/float64(time.Second) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(s * float64(time.Second))
}
