package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/batch"
	"github.com/virga-ml/virga/internal/serve/runtime"
)

// Profile is a model's latency measured at load: one call's time at
// batches of 1, 2, 4, ... rows and at its largest batch, linearly
// interpolated between them (and extended past the last along the last
// segment).
type Profile struct {
	Points []Point // by increasing Rows; at least one
	Max    int     // the largest batch (1 for a model that does not batch)
}

// Point is one measured batch size.
type Point struct {
	Rows int
	Took time.Duration
}

var _ batch.Profile = (*Profile)(nil)

// MaxRows implements batch.Profile.
func (p *Profile) MaxRows() int { return p.Max }

// Latency implements batch.Profile.
func (p *Profile) Latency(rows int) time.Duration {
	pts := p.Points
	if len(pts) == 1 || rows <= pts[0].Rows {
		return pts[0].Took
	}
	i, _ := slices.BinarySearchFunc(pts, rows, func(pt Point, r int) int { return pt.Rows - r })
	if i < len(pts) && pts[i].Rows == rows {
		return pts[i].Took
	}
	if i == len(pts) {
		i = len(pts) - 1
	}
	a, b := pts[i-1], pts[i]
	d := a.Took + time.Duration(float64(b.Took-a.Took)*float64(rows-a.Rows)/float64(b.Rows-a.Rows))
	return max(d, 0)
}

// profileRuns is the timed calls per batch size (after one warm-up call);
// the median is kept.
const profileRuns = 5

// Measure warms the model up and profiles it, as the engine does at load:
// batches of 1, 2, 4, ... rows of zeros up to its largest (a variable
// dimension past the first is 1), the median of a few timed calls each.
// A model whose calls take long gets fewer timed calls.
func Measure(ctx context.Context, m runtime.Model, now func() time.Time) (*Profile, error) {
	maxRows := max(m.MaxBatch(), 1)
	sizes := []int{}
	for r := 1; r < maxRows; r *= 2 {
		sizes = append(sizes, r)
	}
	sizes = append(sizes, maxRows)
	p := &Profile{Max: maxRows}
	runs := profileRuns
	for _, rows := range sizes {
		inputs, err := zeroInputs(m.Signature(), rows, m.MaxBatch() > 0)
		if err != nil {
			return nil, err
		}
		if _, err := m.Run(ctx, inputs); err != nil { // warm-up
			return nil, fmt.Errorf("warm-up call with %d rows of zeros: %w", rows, err)
		}
		took := make([]time.Duration, 0, runs)
		for range runs {
			start := now()
			if _, err := m.Run(ctx, inputs); err != nil {
				return nil, fmt.Errorf("profiling call with %d rows of zeros: %w", rows, err)
			}
			took = append(took, now().Sub(start))
		}
		slices.Sort(took)
		med := took[len(took)/2]
		p.Points = append(p.Points, Point{Rows: rows, Took: med})
		if med > 50*time.Millisecond {
			runs = 1
		}
	}
	return p, nil
}

func zeroInputs(sig serve.Signature, rows int, batched bool) ([]serve.Tensor, error) {
	var ins []serve.Tensor
	for _, s := range sig.Inputs {
		shape := append([]int64(nil), s.Shape...)
		for i, d := range shape {
			if d < 0 {
				shape[i] = 1
			}
		}
		if batched && len(shape) > 0 {
			shape[0] = int64(rows)
		}
		t, err := runtime.Zeros(s.Name, s.Datatype, shape)
		if err != nil {
			return nil, err
		}
		ins = append(ins, t)
	}
	return ins, nil
}
