package elastic

import (
	"context"
	"errors"
	"math"
)

// Median estimates the median of a stream of numbers (the first column of
// each batch) by stochastic gradient descent on the absolute loss, the
// first example of the streaming model in the literature:
//
//	initialize: median = 0, n = 0
//	update:     pull median and n; inc = #(x > median) - #(x <= median);
//	            push n += batch size; push median += inc / sqrt(n + batch size)
//	finalize:   pull median
//
// The step shrinks as 1/sqrt(n), so the estimate settles to within a few
// steps of the median, whatever the order the workers' pushes land in.
type Median struct{}

const (
	keyMedian = "median"
	keyCount  = "n"
)

// Initialize implements Algorithm.
func (Median) Initialize(ctx context.Context, s State) error {
	if err := s.Push(ctx, keyMedian, Tensor{0}); err != nil {
		return err
	}
	return s.Push(ctx, keyCount, Tensor{0})
}

// Update implements Algorithm.
func (Median) Update(ctx context.Context, s State, b *Batch) error {
	rows := b.Rows()
	if rows == 0 {
		return nil
	}
	m, err := s.Pull(ctx, keyMedian)
	if err != nil {
		return err
	}
	n, err := s.Pull(ctx, keyCount)
	if err != nil {
		return err
	}
	if len(m) != 1 || len(n) != 1 {
		return errors.New("median: the state was not initialized")
	}
	inc := 0.0
	for i := range rows {
		if b.X[i*b.Cols] > m[0] {
			inc++
		} else {
			inc--
		}
	}
	if err := s.Push(ctx, keyCount, Tensor{float64(rows)}); err != nil {
		return err
	}
	return s.Push(ctx, keyMedian, Tensor{inc / math.Sqrt(n[0]+float64(rows))})
}

// Finalize implements Algorithm.
func (Median) Finalize(ctx context.Context, s State) (Model, error) {
	m, err := s.Pull(ctx, keyMedian)
	if err != nil {
		return nil, err
	}
	n, err := s.Pull(ctx, keyCount)
	if err != nil {
		return nil, err
	}
	return Model{keyMedian: m, keyCount: n}, nil
}

// Moments computes the count, mean and variance of every column exactly,
// in one pass (a sanity check of the runtime: the result does not depend
// on how the input is split).
type Moments struct{}

// Initialize implements Algorithm: nothing to do, the first push creates
// the sums.
func (Moments) Initialize(context.Context, State) error { return nil }

// Update implements Algorithm: it pushes the batch's count, sums and sums
// of squares (plain sums: for data far from zero relative to its spread,
// center it first).
func (Moments) Update(ctx context.Context, s State, b *Batch) error {
	rows := b.Rows()
	if rows == 0 {
		return nil
	}
	sum := make(Tensor, b.Cols)
	sq := make(Tensor, b.Cols)
	for i := range rows {
		for j, v := range b.Row(i) {
			sum[j] += v
			sq[j] += v * v
		}
	}
	if err := s.Push(ctx, "moments.n", Tensor{float64(rows)}); err != nil {
		return err
	}
	if err := s.Push(ctx, "moments.sum", sum); err != nil {
		return err
	}
	return s.Push(ctx, "moments.sumsq", sq)
}

// Finalize implements Algorithm.
func (Moments) Finalize(ctx context.Context, s State) (Model, error) {
	n, err := s.Pull(ctx, "moments.n")
	if err != nil {
		return nil, err
	}
	if len(n) != 1 || n[0] == 0 {
		return nil, errors.New("moments: no input")
	}
	sum, err := s.Pull(ctx, "moments.sum")
	if err != nil {
		return nil, err
	}
	sq, err := s.Pull(ctx, "moments.sumsq")
	if err != nil {
		return nil, err
	}
	mean := make(Tensor, len(sum))
	variance := make(Tensor, len(sum))
	for j := range sum {
		mean[j] = sum[j] / n[0]
		variance[j] = max(sq[j]/n[0]-mean[j]*mean[j], 0)
	}
	return Model{"count": n, "mean": mean, "variance": variance}, nil
}
