package curve

import "math"

// A family is a parametric learning curve of the form
//
//	f(u) = a + b·g(u; q)
//
// where u is the step divided by the last observed step (so the observed
// curve lies in (0, 1] and the horizon beyond 1), a is the asymptote, b the
// amplitude and q one or two shape parameters, each the logarithm of a
// positive quantity so that the fit is unconstrained. Separating the linear
// parameters (a, b) from q lets the fit solve them exactly on a grid of q
// before refining everything jointly (variable projection).
//
// The amplitude b is free in sign, so every family can describe a curve that
// goes down as well as one that goes up; Predict rejects fits whose direction
// contradicts the data.
type family struct {
	name string
	// zeroAsymptote fixes a at the raw value 0 (log-power) instead of fitting it.
	zeroAsymptote bool
	// nq is the number of shape parameters, 1 or 2.
	nq int
	// bounds returns the range of q searched by the grid (the refinement may go
	// a little beyond it) and the number of grid points in each dimension.
	bounds func(d *data) (lo, hi [2]float64, pts [2]int)
	// basis sets g[i] = g(u[i]; q) for every i, and when dq0 is not nil the
	// derivatives dq0[i] = ∂g/∂q₀ and dq1[i] = ∂g/∂q₁ (zero for nq = 1).
	// lu[i] is log(u[i]).
	basis func(d *data, q [2]float64, u, lu, g, dq0, dq1 []float64)
}

// families lists the families of the ensemble, after Domhan, Springenberg and
// Hutter (IJCAI 2015), written for a minimised objective. Their vapour
// pressure and log-log-linear families are left out because they are not
// invariant under a shift of the objective (they assume it is positive) or
// have no asymptote; their Weibull, exp4 and Hill families are Janoschek and
// MMF under another parametrisation.
var families = []*family{
	// pow3: a + b·u^(-c), the power law (Domhan's pow3). q = log c.
	{
		name: "pow3", nq: 1,
		bounds: func(*data) (lo, hi [2]float64, pts [2]int) {
			return [2]float64{math.Log(0.02)}, [2]float64{math.Log(6)}, [2]int{12}
		},
		basis: func(_ *data, q [2]float64, _, lu, g, dq0, dq1 []float64) {
			c := math.Exp(q[0])
			for i := range g {
				g[i] = math.Exp(-c * lu[i])
				if dq0 != nil {
					dq0[i], dq1[i] = -c*lu[i]*g[i], 0
				}
			}
		},
	},
	// pow4: a + b·(u + s)^(-c), the power law with a shifted origin, s > -u₁
	// (Domhan's pow4). q = (log c, log(1 + s/u₁)).
	{
		name: "pow4", nq: 2,
		bounds: func(d *data) (lo, hi [2]float64, pts [2]int) {
			return [2]float64{math.Log(0.02), math.Log(0.1)},
				[2]float64{math.Log(6), math.Log(1 + 2/d.u1)}, [2]int{5, 5}
		},
		basis: func(d *data, q [2]float64, u, _, g, dq0, dq1 []float64) {
			c, e := math.Exp(q[0]), math.Exp(q[1])
			shift := d.u1*e - d.u1
			for i := range g {
				v := u[i] + shift
				lv := math.Log(v)
				g[i] = math.Exp(-c * lv)
				if dq0 != nil {
					dq0[i], dq1[i] = -c*lv*g[i], -c*g[i]*d.u1*e/v
				}
			}
		},
	},
	// exp3: a + b·exp(-k·u), the exponential decay. q = log k.
	{
		name: "exp3", nq: 1,
		bounds: func(*data) (lo, hi [2]float64, pts [2]int) {
			return [2]float64{math.Log(0.05)}, [2]float64{math.Log(80)}, [2]int{12}
		},
		basis: func(_ *data, q [2]float64, u, _, g, dq0, dq1 []float64) {
			k := math.Exp(q[0])
			for i := range g {
				g[i] = math.Exp(-k * u[i])
				if dq0 != nil {
					dq0[i], dq1[i] = -k*u[i]*g[i], 0
				}
			}
		},
	},
	// janoschek: a + b·exp(-k·u^δ), which is also Domhan's Weibull and exp4.
	// q = (log k, log δ).
	{
		name: "janoschek", nq: 2,
		bounds: func(*data) (lo, hi [2]float64, pts [2]int) {
			return [2]float64{math.Log(0.05), math.Log(0.25)},
				[2]float64{math.Log(60), math.Log(3)}, [2]int{5, 5}
		},
		basis: func(_ *data, q [2]float64, _, lu, g, dq0, dq1 []float64) {
			delta := math.Exp(q[1])
			for i := range g {
				z := math.Exp(q[0] + delta*lu[i]) // k·u^δ
				g[i] = math.Exp(-z)
				if dq0 != nil {
					dq0[i], dq1[i] = -z*g[i], -z*delta*lu[i]*g[i]
				}
			}
		},
	},
	// mmf: a + b/(1 + (u/k)^δ), the Morgan-Mercer-Flodin curve (also the Hill
	// curve). q = (log k, log δ).
	{
		name: "mmf", nq: 2,
		bounds: mmfBounds,
		basis:  mmfBasis,
	},
	// logpower: b/(1 + (u/k)^δ), Domhan's log-power a/(1 + (x/e^b)^c): the MMF
	// curve whose asymptote is the raw value 0, for a loss that can reach zero.
	{
		name: "logpower", nq: 2, zeroAsymptote: true,
		bounds: mmfBounds,
		basis:  mmfBasis,
	},
	// ilog: a + b/log(1 + u/k), Domhan's ilog2 (a + b/log t) with the origin of
	// the logarithm fitted; it approaches its asymptote very slowly. q = log k.
	{
		name: "ilog", nq: 1,
		bounds: func(d *data) (lo, hi [2]float64, pts [2]int) {
			return [2]float64{math.Log(d.u1) - math.Log(100)}, [2]float64{math.Log(10)}, [2]int{10}
		},
		basis: func(_ *data, q [2]float64, u, _, g, dq0, dq1 []float64) {
			k := math.Exp(q[0])
			for i := range g {
				l := math.Log1p(u[i] / k)
				g[i] = 1 / l
				if dq0 != nil {
					dq0[i], dq1[i] = u[i]/((k+u[i])*l*l), 0
				}
			}
		},
	},
}

func mmfBounds(d *data) (lo, hi [2]float64, pts [2]int) {
	return [2]float64{math.Log(d.u1 / 4), math.Log(0.25)}, [2]float64{math.Log(20), math.Log(5)}, [2]int{5, 5}
}

func mmfBasis(_ *data, q [2]float64, _, lu, g, dq0, dq1 []float64) {
	delta := math.Exp(q[1])
	for i := range g {
		x := lu[i] - q[0]
		s := math.Exp(delta * x) // (u/k)^δ
		g[i] = 1 / (1 + s)
		if dq0 != nil {
			h := g[i] * (1 - g[i]) // g²·s without overflow
			dq0[i], dq1[i] = delta*h, -delta*x*h
		}
	}
}
