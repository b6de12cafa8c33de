package elastic

import (
	"context"
	"fmt"
	"io"
)

// SliceSource yields the rows of an in-memory matrix in batches.
type SliceSource struct {
	X         []float64
	Y         []float64 // optional, one per row
	Cols      int
	BatchRows int
	pos       int // next row
}

// Next implements Source.
func (s *SliceSource) Next(ctx context.Context) (*Batch, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rows := len(s.X) / s.Cols
	if s.pos >= rows {
		return nil, io.EOF
	}
	end := min(s.pos+max(s.BatchRows, 1), rows)
	b := &Batch{X: s.X[s.pos*s.Cols : end*s.Cols], Cols: s.Cols}
	if s.Y != nil {
		b.Y = s.Y[s.pos:end]
	}
	s.pos = end
	return b, nil
}

// Skip discards the next n rows.
func (s *SliceSource) Skip(n int64) error {
	rows := len(s.X) / s.Cols
	if int64(rows-s.pos) < n {
		return fmt.Errorf("skipping %d rows: only %d left", n, rows-s.pos)
	}
	s.pos += int(n)
	return nil
}

// Pos is the number of rows read so far (a shard's read position, for a
// checkpoint).
func (s *SliceSource) Pos() int { return s.pos }

// Shards splits a matrix into n SliceSources of consecutive rows.
func Shards(x []float64, y []float64, cols, n, batchRows int) []Source {
	rows := len(x) / cols
	out := make([]Source, 0, n)
	for i := range n {
		lo, hi := rows*i/n, rows*(i+1)/n
		s := &SliceSource{X: x[lo*cols : hi*cols], Cols: cols, BatchRows: batchRows}
		if y != nil {
			s.Y = y[lo:hi]
		}
		out = append(out, s)
	}
	return out
}

// SliceOpener opens shard k of n of an in-memory matrix (see Shards) at a
// row position.
func SliceOpener(x, y []float64, cols, n, batchRows int) Opener {
	return func(_ context.Context, k int, pos int64) (Source, error) {
		s := Shards(x, y, cols, n, batchRows)[k].(*SliceSource)
		if err := s.Skip(pos); err != nil {
			return nil, err
		}
		return s, nil
	}
}
