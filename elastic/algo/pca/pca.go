// Package pca is streaming principal component analysis in Virga's
// elastic initialize / update / finalize model, by the covariance: every
// mini-batch pushes its row count, column sums and the d×d sums of outer
// products to the shared state (pushes add, so the split across workers
// does not matter), and Finalize forms the covariance and decomposes it
// with a cyclic Jacobi eigenvalue routine, keeping the top K components.
//
// The sums are plain (not centred), so data far from zero relative to its
// spread loses precision; centre or shift such data first. The state holds
// d² numbers: meant for d up to a few hundred.
package pca

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/virga-ml/virga/elastic"
)

// Algorithm is the model's name in a saved model.
const Algorithm = "pca"

// State keys.
const (
	keyN   = "pca.n"   // [1] rows
	keySum = "pca.sum" // [d] column sums
	keyXtX = "pca.xtx" // [d, d] sums of outer products
)

// PCA is the streaming PCA algorithm; it implements elastic.Algorithm. It
// is deterministic: the result depends on the input only (to rounding),
// not on the number of workers or the batch size.
type PCA struct {
	K int // components kept (required; at most the number of features)
}

// Initialize implements elastic.Algorithm (the first push creates the sums).
func (p *PCA) Initialize(context.Context, elastic.State) error {
	if p.K <= 0 {
		return fmt.Errorf("pca: K = %d; want > 0", p.K)
	}
	return nil
}

// Update implements elastic.Algorithm.
func (p *PCA) Update(ctx context.Context, s elastic.State, b *elastic.Batch) error {
	rows, d := b.Rows(), b.Cols
	if rows == 0 {
		return nil
	}
	sum := make(elastic.Tensor, d)
	xtx := make(elastic.Tensor, d*d)
	for i := range rows {
		x := b.Row(i)
		for j, v := range x {
			sum[j] += v
			if v == 0 {
				continue
			}
			row := xtx[j*d : (j+1)*d]
			for l := j; l < d; l++ {
				row[l] += v * x[l]
			}
		}
	}
	for j := range d {
		for l := j + 1; l < d; l++ {
			xtx[l*d+j] = xtx[j*d+l]
		}
	}
	if err := s.Push(ctx, keyN, elastic.Tensor{float64(rows)}); err != nil {
		return err
	}
	if err := s.Push(ctx, keySum, sum); err != nil {
		return err
	}
	return s.Push(ctx, keyXtX, xtx)
}

// Finalize implements elastic.Algorithm. The model holds "mean" [d],
// "components" [K, d] (unit rows, by decreasing variance; the sign makes
// each row's largest element positive), "explained_variance" [K] (with
// the n-1 denominator, as scikit-learn's) and "explained_variance_ratio"
// [K] (each over the total variance).
func (p *PCA) Finalize(ctx context.Context, s elastic.State) (elastic.Model, error) {
	n, err := s.Pull(ctx, keyN)
	if err != nil {
		return nil, err
	}
	sum, err := s.Pull(ctx, keySum)
	if err != nil {
		return nil, err
	}
	xtx, err := s.Pull(ctx, keyXtX)
	if err != nil {
		return nil, err
	}
	if len(n) != 1 || n[0] < 2 {
		return nil, errors.New("pca: fewer than 2 rows")
	}
	d := len(sum)
	if len(xtx) != d*d {
		return nil, fmt.Errorf("pca: state holds %d outer-product sums for %d features", len(xtx), d)
	}
	if p.K > d {
		return nil, fmt.Errorf("pca: K = %d components of %d features", p.K, d)
	}
	mean := make(elastic.Tensor, d)
	for j := range d {
		mean[j] = sum[j] / n[0]
	}
	cov := make([]float64, d*d)
	total := 0.0
	for j := range d {
		for l := range d {
			cov[j*d+l] = (xtx[j*d+l] - n[0]*mean[j]*mean[l]) / (n[0] - 1)
		}
		cov[j*d+j] = max(cov[j*d+j], 0)
		total += cov[j*d+j]
	}
	vals, vecs := Eigen(cov, d)
	order := make([]int, d)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return vals[order[a]] > vals[order[b]] })
	comp := make(elastic.Tensor, p.K*d)
	ev := make(elastic.Tensor, p.K)
	ratio := make(elastic.Tensor, p.K)
	for r := range p.K {
		c := order[r]
		ev[r] = max(vals[c], 0)
		if total > 0 {
			ratio[r] = ev[r] / total
		}
		big := 0
		for j := range d {
			comp[r*d+j] = vecs[j*d+c]
			if math.Abs(comp[r*d+j]) > math.Abs(comp[r*d+big]) {
				big = j
			}
		}
		if comp[r*d+big] < 0 {
			for j := range d {
				comp[r*d+j] = -comp[r*d+j]
			}
		}
	}
	return elastic.Model{"mean": mean, "components": comp, "explained_variance": ev, "explained_variance_ratio": ratio}, nil
}

// Eigen decomposes the symmetric d×d matrix a (row-major; it is not
// changed) by cyclic Jacobi rotations: it returns the eigenvalues and the
// eigenvectors as the columns of v (row-major d×d), in no particular order.
func Eigen(a []float64, d int) (vals []float64, v []float64) {
	m := append([]float64(nil), a...)
	v = make([]float64, d*d)
	for i := range d {
		v[i*d+i] = 1
	}
	scale := 0.0
	for _, x := range m {
		scale += x * x
	}
	for sweep := 0; sweep < 100; sweep++ {
		off := 0.0
		for i := range d {
			for j := i + 1; j < d; j++ {
				off += m[i*d+j] * m[i*d+j]
			}
		}
		if off <= 1e-30*scale || off == 0 {
			break
		}
		for p := range d {
			for q := p + 1; q < d; q++ {
				apq := m[p*d+q]
				if apq == 0 {
					continue
				}
				app, aqq := m[p*d+p], m[q*d+q]
				theta := (aqq - app) / (2 * apq)
				t := 1 / (math.Abs(theta) + math.Sqrt(theta*theta+1))
				if theta < 0 {
					t = -t
				}
				c := 1 / math.Sqrt(t*t+1)
				s := t * c
				// m = Jᵀ m J on rows and columns p and q.
				for k := range d {
					mkp, mkq := m[k*d+p], m[k*d+q]
					m[k*d+p] = c*mkp - s*mkq
					m[k*d+q] = s*mkp + c*mkq
				}
				for k := range d {
					mpk, mqk := m[p*d+k], m[q*d+k]
					m[p*d+k] = c*mpk - s*mqk
					m[q*d+k] = s*mpk + c*mqk
				}
				m[p*d+q], m[q*d+p] = 0, 0
				for k := range d {
					vkp, vkq := v[k*d+p], v[k*d+q]
					v[k*d+p] = c*vkp - s*vkq
					v[k*d+q] = s*vkp + c*vkq
				}
			}
		}
	}
	vals = make([]float64, d)
	for i := range d {
		vals[i] = m[i*d+i]
	}
	return vals, v
}

// Model is a trained PCA model.
type Model struct {
	K, D                   int
	Mean                   []float64 // [D]
	Components             []float64 // [K, D]
	ExplainedVariance      []float64 // [K]
	ExplainedVarianceRatio []float64 // [K]
}

// FromModel returns the model Finalize made.
func FromModel(m elastic.Model) (*Model, error) {
	d, k := len(m["mean"]), len(m["explained_variance"])
	if d == 0 || k == 0 || len(m["components"]) != k*d || len(m["explained_variance_ratio"]) != k {
		return nil, errors.New("pca: not a PCA model")
	}
	return &Model{K: k, D: d, Mean: m["mean"], Components: m["components"], ExplainedVariance: m["explained_variance"], ExplainedVarianceRatio: m["explained_variance_ratio"]}, nil
}

// Saved returns the model in Virga's model file format.
func (m *Model) Saved(params map[string]float64) *elastic.SavedModel {
	t := func(shape []int, data []float64) elastic.SavedTensor {
		return elastic.SavedTensor{Shape: shape, Data: append([]float64(nil), data...)}
	}
	return &elastic.SavedModel{
		Format:    elastic.ModelFormat,
		Algorithm: Algorithm,
		Params:    params,
		Tensors: map[string]elastic.SavedTensor{
			"mean":                     t([]int{m.D}, m.Mean),
			"components":               t([]int{m.K, m.D}, m.Components),
			"explained_variance":       t([]int{m.K}, m.ExplainedVariance),
			"explained_variance_ratio": t([]int{m.K}, m.ExplainedVarianceRatio),
		},
	}
}

// FromSaved reads a saved PCA model.
func FromSaved(s *elastic.SavedModel) (*Model, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if s.Algorithm != Algorithm {
		return nil, fmt.Errorf("pca: the model was made by %q", s.Algorithm)
	}
	c, ok := s.Tensors["components"]
	if !ok || len(c.Shape) != 2 || c.Shape[0] <= 0 || c.Shape[1] <= 0 {
		return nil, errors.New("pca: the model has no components tensor of shape [k, d] with k, d > 0")
	}
	k, d := c.Shape[0], c.Shape[1]
	mean, ev := s.Tensors["mean"], s.Tensors["explained_variance"]
	if len(mean.Data) != d || len(ev.Data) != k {
		return nil, fmt.Errorf("pca: mean of %d and explained_variance of %d for components %v", len(mean.Data), len(ev.Data), c.Shape)
	}
	ratio := s.Tensors["explained_variance_ratio"].Data
	if len(ratio) != k {
		ratio = make([]float64, k)
	}
	return &Model{K: k, D: d, Mean: mean.Data, Components: c.Data, ExplainedVariance: ev.Data, ExplainedVarianceRatio: ratio}, nil
}

// Transform projects the rows of x ([rows, D] row-major) on the
// components: [rows, K].
func (m *Model) Transform(x []float64) []float64 {
	rows := len(x) / m.D
	out := make([]float64, rows*m.K)
	for i := range rows {
		for r := range m.K {
			s := 0.0
			for j := range m.D {
				s += (x[i*m.D+j] - m.Mean[j]) * m.Components[r*m.D+j]
			}
			out[i*m.K+r] = s
		}
	}
	return out
}
