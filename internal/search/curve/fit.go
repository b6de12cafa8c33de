package curve

import "math"

// A family is fitted by variable projection: a grid over its one or two
// shape parameters, the linear parameters (asymptote and amplitude) solved
// exactly at each grid point, then a small hand-written Levenberg–Marquardt
// over the shape parameters alone from the best grid points. A
// general-purpose optimiser (gonum's optimize) would add a dependency,
// allocate on every call and ignore the separable least-squares structure
// that makes this fast and robust: a family converges in a handful of
// iterations, seven families on 30 points in a fraction of a millisecond.

// data is a normalised curve: steps divided by the last one, values shifted
// and scaled to [-1, 1], with scratch space for the fits.
type data struct {
	n     int
	u, lu []float64 // normalised steps and their logarithms
	y     []float64 // normalised values
	w     []float64 // weights, summing to n
	u1    float64   // the first normalised step
	zero  float64   // the normalised value of the raw value 0

	grid   []float64     // scratch: a basis on the grid
	ev     [2]evaluation // scratch: the current and the trial point of a fit
	single evaluation    // scratch: one step
	su     [2][]float64  // scratch: one step and its logarithm
}

// evaluation is a family's basis, its derivatives and the residuals at some
// parameters, over all points.
type evaluation struct {
	g, dq0, dq1, r []float64
}

func newEvaluation(n int) evaluation {
	return evaluation{make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)}
}

// A fit is one family fitted to the data.
type fit struct {
	fam *family
	p   [4]float64 // a, b, q₀, q₁
	act []int      // the indices of p that were fitted
	rss float64    // weighted residual sum of squares
	// cov is the parameters' covariance, over p's indices (zero where not
	// fitted), for a unit noise variance.
	cov [4][4]float64
}

// jac returns ∂f/∂p[k] at point i of e.
func (f *fit) jac(e *evaluation, i, k int) float64 {
	switch k {
	case 0:
		return 1
	case 1:
		return e.g[i]
	case 2:
		return f.p[1] * e.dq0[i]
	}
	return f.p[1] * e.dq1[i]
}

// evaluate fills e at f.p and returns the weighted residual sum of squares
// (+Inf when not finite).
func (d *data) evaluate(f *fit, e *evaluation) float64 {
	f.fam.basis(d, [2]float64{f.p[2], f.p[3]}, d.u, d.lu, e.g, e.dq0, e.dq1)
	rss := 0.0
	for i := range d.n {
		e.r[i] = d.y[i] - f.p[0] - f.p[1]*e.g[i]
		rss += d.w[i] * e.r[i] * e.r[i]
	}
	if math.IsNaN(rss) {
		return math.Inf(1)
	}
	return rss
}

// at returns f(u) and its gradient with respect to p.
func (d *data) at(f *fit, u float64) (float64, [4]float64) {
	d.su[0][0], d.su[1][0] = u, math.Log(u)
	e := &d.single
	f.fam.basis(d, [2]float64{f.p[2], f.p[3]}, d.su[0], d.su[1], e.g, e.dq0, e.dq1)
	grad := [4]float64{1, e.g[0], f.p[1] * e.dq0[0], f.p[1] * e.dq1[0]}
	return f.p[0] + f.p[1]*e.g[0], grad
}

// fitFamily fits fam to d and reports whether the fit is usable (finite).
// The fit has 1. a grid search over the shape parameters with the linear
// parameters solved exactly at each point, then 2. a Levenberg–Marquardt
// refinement of the shape parameters from the best grid point and, for two
// shape parameters, from the best one that is not its neighbour when that is
// nearly as good, then 3. the parameters' covariance.
func (d *data) fitFamily(fam *family) (fit, bool) {
	lo, hi, pts := fam.bounds(d)
	if fam.nq == 1 {
		lo[1], hi[1], pts[1] = 0, 0, 1
	}
	act := []int{0, 1, 2, 3}
	if fam.zeroAsymptote {
		act = act[1:]
	}
	if fam.nq == 1 {
		act = act[:len(act)-1]
	}
	if len(act) > d.n {
		return fit{}, false
	}

	// 1. Grid search.
	type cand struct {
		rss  float64
		i, j int
		a, b float64
	}
	best := [2]cand{{rss: math.Inf(1)}, {rss: math.Inf(1)}}
	qAt := func(k, i int) float64 {
		if pts[k] == 1 {
			return lo[k]
		}
		return lo[k] + (hi[k]-lo[k])*float64(i)/float64(pts[k]-1)
	}
	for i := range pts[0] {
		for j := range pts[1] {
			fam.basis(d, [2]float64{qAt(0, i), qAt(1, j)}, d.u, d.lu, d.grid, nil, nil)
			a, b, rss := d.linear(fam.zeroAsymptote, d.grid)
			if !(rss < best[1].rss) {
				continue
			}
			c := cand{rss, i, j, a, b}
			near := abs(best[0].i-i) <= 1 && abs(best[0].j-j) <= 1
			switch {
			case rss < best[0].rss && near:
				best[0] = c
			case rss < best[0].rss:
				best[1], best[0] = best[0], c
			case !near:
				best[1] = c
			}
		}
	}

	// 2. Refinement.
	starts := best[:fam.nq]
	var out fit
	out.rss = math.Inf(1)
	for k, c := range starts {
		// A second start only where its grid point is nearly as good as the
		// refined first.
		if math.IsInf(c.rss, 1) || k > 0 && c.rss > 2*out.rss {
			continue
		}
		f := fit{fam: fam, act: act, p: [4]float64{c.a, c.b, qAt(0, c.i), qAt(1, c.j)}}
		d.levenbergMarquardt(&f, lo, hi)
		if f.rss < out.rss {
			out = f
		}
	}
	if !(out.rss < math.Inf(1)) {
		return fit{}, false
	}
	// 3. Covariance.
	d.covariance(&out)
	return out, true
}

// linear solves the weighted least squares for a and b in a + b·g (a fixed at
// d.zero when zeroAsymptote) and returns them with the residual sum of squares.
func (d *data) linear(zeroAsymptote bool, g []float64) (a, b, rss float64) {
	if zeroAsymptote {
		var sgg, sgy, syy float64
		for i := range d.n {
			r := d.y[i] - d.zero
			sgg += d.w[i] * g[i] * g[i]
			sgy += d.w[i] * g[i] * r
			syy += d.w[i] * r * r
		}
		if !(sgg > 0) || math.IsInf(sgg, 0) {
			return d.zero, 0, math.Inf(1)
		}
		b = sgy / sgg
		return d.zero, b, math.Max(syy-b*sgy, 0)
	}
	var sw, sg, sy float64
	for i := range d.n {
		sw += d.w[i]
		sg += d.w[i] * g[i]
		sy += d.w[i] * d.y[i]
	}
	gm, ym := sg/sw, sy/sw
	var sgg, sgy, syy float64
	for i := range d.n {
		gc, yc := g[i]-gm, d.y[i]-ym
		sgg += d.w[i] * gc * gc
		sgy += d.w[i] * gc * yc
		syy += d.w[i] * yc * yc
	}
	if math.IsNaN(sgg) || math.IsInf(sgg, 0) {
		return 0, 0, math.Inf(1)
	}
	if !(sgg > 1e-300) {
		return ym, 0, syy
	}
	b = sgy / sgg
	return ym - b*gm, b, math.Max(syy-b*sgy, 0)
}

// profile evaluates fam at the shape parameters q with a and b solved
// exactly, filling e (basis, derivatives, residuals), and returns the
// parameters and the weighted residual sum of squares (+Inf if not finite).
func (d *data) profile(fam *family, q [2]float64, e *evaluation) (p [4]float64, rss float64) {
	fam.basis(d, q, d.u, d.lu, e.g, e.dq0, e.dq1)
	a, b, _ := d.linear(fam.zeroAsymptote, e.g)
	for i := range d.n {
		e.r[i] = d.y[i] - a - b*e.g[i]
		rss += d.w[i] * e.r[i] * e.r[i]
	}
	if math.IsNaN(rss) {
		rss = math.Inf(1)
	}
	return [4]float64{a, b, q[0], q[1]}, rss
}

// project replaces c by its weighted residual after regression on the
// linear parameters' columns (1 and g, or g alone with a fixed asymptote).
func (d *data) project(zeroAsymptote bool, g, c []float64) {
	if zeroAsymptote {
		var sgg, sgc float64
		for i := range d.n {
			sgg += d.w[i] * g[i] * g[i]
			sgc += d.w[i] * g[i] * c[i]
		}
		if sgg > 0 {
			k := sgc / sgg
			for i := range d.n {
				c[i] -= k * g[i]
			}
		}
		return
	}
	var sw, sg, sc float64
	for i := range d.n {
		sw += d.w[i]
		sg += d.w[i] * g[i]
		sc += d.w[i] * c[i]
	}
	gm, cm := sg/sw, sc/sw
	var sgg, sgc float64
	for i := range d.n {
		sgg += d.w[i] * (g[i] - gm) * (g[i] - gm)
		sgc += d.w[i] * (g[i] - gm) * (c[i] - cm)
	}
	k := 0.0
	if sgg > 1e-300 {
		k = sgc / sgg
	}
	for i := range d.n {
		c[i] -= cm + k*(g[i]-gm)
	}
}

// levenbergMarquardt refines the shape parameters of f by variable
// projection: a Levenberg–Marquardt over q alone, the linear parameters
// solved exactly at every q, with Kaufman's approximation of the Jacobian
// (the model's derivatives projected off the linear parameters' columns).
// q stays within two (log units) of the grid's bounds. It sets f.p and f.rss.
func (d *data) levenbergMarquardt(f *fit, lo, hi [2]float64) {
	const (
		maxIter = 30
		margin  = 2
	)
	fam := f.fam
	m := fam.nq
	cur, next := &d.ev[0], &d.ev[1]
	f.p, f.rss = d.profile(fam, [2]float64{f.p[2], f.p[3]}, cur)
	if math.IsInf(f.rss, 1) {
		return
	}
	lambda := 1e-3
	for range maxIter {
		if f.rss == 0 {
			return
		}
		// Normal equations JᵀWJ·δ = JᵀWr in q.
		cols := [2][]float64{cur.dq0, cur.dq1}
		for k := range m {
			for i := range d.n {
				cols[k][i] *= f.p[1]
			}
			d.project(fam.zeroAsymptote, cur.g, cols[k])
		}
		var A [4][4]float64
		var v [4]float64
		for x := range m {
			for i := range d.n {
				v[x] += d.w[i] * cols[x][i] * cur.r[i]
			}
			for y := 0; y <= x; y++ {
				for i := range d.n {
					A[x][y] += d.w[i] * cols[x][i] * cols[y][i]
				}
				A[y][x] = A[x][y]
			}
		}
		improved := false
		for lambda < 1e12 {
			B := A
			for x := range m {
				B[x][x] += lambda*A[x][x] + 1e-12*A[x][x] + 1e-300
			}
			delta, ok := cholSolve(B, v, m)
			// A parameter at its bound that the step pushes outwards stays
			// where it is; the others are solved for without it.
			for k := range m {
				qk := f.p[2+k]
				if ok && (qk <= lo[k]-margin && delta[k] < 0 || qk >= hi[k]+margin && delta[k] > 0) {
					for j := range m {
						B[k][j], B[j][k] = 0, 0
					}
					B[k][k], v[k] = 1, 0
					delta, ok = cholSolve(B, v, m)
				}
			}
			if !ok {
				lambda *= 8
				continue
			}
			var q [2]float64
			moved := false
			for k := range m {
				q[k] = math.Min(math.Max(f.p[2+k]+delta[k], lo[k]-margin), hi[k]+margin)
				moved = moved || q[k] != f.p[2+k]
			}
			if !moved { // pinned at a bound
				break
			}
			p, rss := d.profile(fam, q, next)
			if rss < f.rss {
				gain := f.rss - rss
				f.p, f.rss = p, rss
				cur, next = next, cur
				lambda = math.Max(lambda/4, 1e-9)
				improved = gain > 1e-7*rss
				break
			}
			lambda *= 8
		}
		if !improved {
			return
		}
	}
}

// covariance sets f.cov to (JᵀWJ)⁻¹ at f.p over f.act. Directions the data do
// not determine get a large but finite variance.
func (d *data) covariance(f *fit) {
	m := len(f.act)
	e := &d.ev[0]
	d.evaluate(f, e)
	var A [4][4]float64
	for i := range d.n {
		for x, px := range f.act {
			for y, py := range f.act {
				A[x][y] += d.w[i] * f.jac(e, i, px) * f.jac(e, i, py)
			}
		}
	}
	// Scale to unit diagonal, invert through the eigen-decomposition with the
	// eigenvalues floored, scale back.
	var s [4]float64
	for x := range m {
		s[x] = math.Sqrt(A[x][x])
		if !(s[x] > 0) || math.IsInf(s[x], 0) {
			s[x] = 0
		}
	}
	for x := range m {
		for y := range m {
			if s[x] > 0 && s[y] > 0 {
				A[x][y] /= s[x] * s[y]
			} else {
				A[x][y] = 0
			}
		}
	}
	vals, vecs := symEigen(A, m)
	top := 0.0
	for x := range m {
		top = math.Max(top, vals[x])
	}
	floor := math.Max(top*1e-9, 1e-300)
	f.cov = [4][4]float64{}
	for x := range m {
		for y := range m {
			if s[x] == 0 || s[y] == 0 {
				continue
			}
			c := 0.0
			for k := range m {
				c += vecs[x][k] * vecs[y][k] / math.Max(vals[k], floor)
			}
			f.cov[f.act[x]][f.act[y]] = c / (s[x] * s[y])
		}
	}
}

// cholSolve solves B·x = v for a symmetric positive definite m×m B.
func cholSolve(B [4][4]float64, v [4]float64, m int) ([4]float64, bool) {
	var L [4][4]float64
	for i := range m {
		for j := 0; j <= i; j++ {
			s := B[i][j]
			for k := range j {
				s -= L[i][k] * L[j][k]
			}
			if i == j {
				if !(s > 0) {
					return v, false
				}
				L[i][i] = math.Sqrt(s)
			} else {
				L[i][j] = s / L[j][j]
			}
		}
	}
	var x [4]float64
	for i := range m {
		s := v[i]
		for k := range i {
			s -= L[i][k] * x[k]
		}
		x[i] = s / L[i][i]
	}
	for i := m - 1; i >= 0; i-- {
		s := x[i]
		for k := i + 1; k < m; k++ {
			s -= L[k][i] * x[k]
		}
		x[i] = s / L[i][i]
	}
	for i := range m {
		if math.IsNaN(x[i]) || math.IsInf(x[i], 0) {
			return x, false
		}
	}
	return x, true
}

// symEigen returns the eigenvalues and eigenvectors (columns) of the
// symmetric m×m matrix A by cyclic Jacobi rotations.
func symEigen(A [4][4]float64, m int) (vals [4]float64, V [4][4]float64) {
	for i := range m {
		V[i][i] = 1
	}
	for range 30 {
		off := 0.0
		for i := range m {
			for j := i + 1; j < m; j++ {
				off += A[i][j] * A[i][j]
			}
		}
		if !(off > 1e-30) {
			break
		}
		for p := range m {
			for q := p + 1; q < m; q++ {
				if A[p][q] == 0 {
					continue
				}
				theta := (A[q][q] - A[p][p]) / (2 * A[p][q])
				t := 1 / (math.Abs(theta) + math.Sqrt(theta*theta+1))
				if theta < 0 {
					t = -t
				}
				if math.IsInf(theta, 0) {
					t = 0
				}
				c := 1 / math.Sqrt(t*t+1)
				s := t * c
				for k := range m {
					akp, akq := A[k][p], A[k][q]
					A[k][p], A[k][q] = c*akp-s*akq, s*akp+c*akq
				}
				for k := range m {
					apk, aqk := A[p][k], A[q][k]
					A[p][k], A[q][k] = c*apk-s*aqk, s*apk+c*aqk
				}
				for k := range m {
					vkp, vkq := V[k][p], V[k][q]
					V[k][p], V[k][q] = c*vkp-s*vkq, s*vkp+c*vkq
				}
			}
		}
	}
	for i := range m {
		vals[i] = A[i][i]
	}
	return vals, V
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
