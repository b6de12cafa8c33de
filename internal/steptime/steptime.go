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
// linear regression: the weights of the features a priori small until
// measured (a factor of e over a whole range is one prior standard
// deviation), the intercept left to the data, the noise's variance inverse
// gamma about 10%. With few measurements the prior keeps the unmeasured
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
	weightSD = 1.0
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
	cov  *mat.SymDense // posterior covariance of the weights
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

	// Prior: w ~ N(m0, L0^-1) with L0 fixed (a weight's standard deviation
	// is weightSD whatever the noise: the conjugate prior, whose weights
	// scale with the noise, lets a few disagreeing measurements make every
	// weight enormous), s2 ~ IG(a0, b0). The posterior is found by fixed
	// point: the weights' Gaussian posterior given s2, then s2's posterior
	// scale given the weights' (expected) residuals.
	m0 := mat.NewVecDense(d, nil)
	m0.SetVec(0, ybar)
	l0 := make([]float64, d)
	l0[0] = 1 / (interceptSD * interceptSD)
	for j := 1; j < d; j++ {
		l0[j] = 1 / (weightSD * weightSD)
	}
	a0 := priorDoF / 2
	b0 := a0 * noiseSD * noiseSD
	an := a0 + float64(len(obs))/2
	s2 := noiseSD * noiseSD
	var xtx mat.SymDense
	xtx.SymOuterK(1, x.T())
	var xty mat.VecDense
	xty.MulVec(x.T(), y)
	mn := mat.NewVecDense(d, nil)
	cov := mat.NewSymDense(d, nil)
	var bn float64
	for range 50 {
		// Vn = (L0 + X'X/s2)^-1, mn = Vn (L0 m0 + X'y/s2).
		prec := mat.NewSymDense(d, nil)
		prec.ScaleSym(1/s2, &xtx)
		rhs := mat.NewVecDense(d, nil)
		rhs.ScaleVec(1/s2, &xty)
		for j := range d {
			prec.SetSym(j, j, prec.At(j, j)+l0[j])
			rhs.SetVec(j, rhs.AtVec(j)+l0[j]*m0.AtVec(j))
		}
		var chol mat.Cholesky
		if !chol.Factorize(prec) {
			return nil, errors.New("step time: the measurements' features are degenerate")
		}
		if err := chol.SolveVecTo(mn, rhs); err != nil {
			return nil, fmt.Errorf("step time: %w", err)
		}
		if err := chol.InverseTo(cov); err != nil {
			return nil, fmt.Errorf("step time: %w", err)
		}
		// E[|y - Xw|^2] = |y - X mn|^2 + tr(X'X Vn).
		var fit mat.VecDense
		fit.MulVec(x, mn)
		fit.SubVec(y, &fit)
		var xv mat.Dense
		xv.Mul(&xtx, cov)
		bn = b0 + (mat.Dot(&fit, &fit)+mat.Trace(&xv))/2
		next := bn / an
		if math.Abs(next-s2) <= 1e-9*s2 {
			s2 = next
			break
		}
		s2 = next
	}
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
	// The noise's part is Student's t (its variance is uncertain), the
	// weights' Gaussian: their sum as one t whose degrees of freedom are
	// Welch-Satterthwaite's.
	noise, weights := m.b/m.a, mat.Dot(x, &vx)
	dof := 2 * m.a * math.Pow((noise+weights)/noise, 2)
	return Prediction{Loc: mat.Dot(x, m.mean), Scale: math.Sqrt(noise + weights), DoF: dof}, nil
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

// Sample draws weights and the noise's scale from their posteriors with r.
func (m *Model) Sample(r *rand.Rand) Sample {
	d := m.f.dim()
	// s2 ~ IG(a, b): b / Gamma(a, 1).
	g := distuv.Gamma{Alpha: m.a, Beta: 1, Src: r}
	s2 := m.b / max(g.Rand(), 1e-12)
	w := make([]float64, d)
	var chol mat.Cholesky
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
			w[j] = m.mean.AtVec(j) + lz.AtVec(j)
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
