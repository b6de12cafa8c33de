package spec

import (
	"math"
)

const (
	// DefaultFloatPoints is the number of grid points of a float parameter
	// without count (and of an int parameter without count whose range holds
	// more than MaxImplicitIntPoints integers, which Parse rejects under the
	// grid searcher).
	DefaultFloatPoints = 5
	// MaxImplicitIntPoints is the largest number of integers an int parameter
	// without count may span for the grid to take every one of them.
	MaxImplicitIntPoints = 100
	// MaxCount is the largest count a parameter may ask for.
	MaxCount = 10000
)

// GridValues returns the points the grid searcher tries for h, in ascending
// order for numbers and file order for categorical values:
//   - const: the one value;
//   - categorical: the values;
//   - float: count points (DefaultFloatPoints without count) from min to max
//     inclusive, spaced evenly, or evenly in log space when log is true;
//   - int: every integer from min to max when there are at most count of them
//     (at most MaxImplicitIntPoints without count); otherwise count points
//     spaced as for float, rounded to integers, duplicates dropped (so a log
//     grid over a small range may hold fewer than count points).
//
// Int points are int64 and float points float64.
func (h *Hyperparameter) GridValues() []any {
	switch h.Type {
	case HPConst:
		return []any{h.Value}
	case HPCategorical:
		return append([]any(nil), h.Values...)
	case HPFloat:
		pts := h.points(h.pointCount())
		out := make([]any, len(pts))
		for i, p := range pts {
			out[i] = p
		}
		return out
	case HPInt:
		lo, hi := math.Ceil(h.Min), math.Floor(h.Max)
		if !(lo <= hi) || math.Abs(lo) > maxExactInt || math.Abs(hi) > maxExactInt {
			return nil
		}
		span := hi - lo + 1
		limit := float64(MaxImplicitIntPoints)
		if h.Count > 0 {
			limit = float64(min(h.Count, MaxCount))
		}
		if span <= limit {
			// Count in int64: past 2^53, v++ on a float64 may not move.
			out := make([]any, 0, int(span))
			for v, end := int64(lo), int64(hi); v <= end; v++ {
				out = append(out, v)
			}
			return out
		}
		var out []any
		last := int64(math.MinInt64)
		for _, p := range h.points(h.pointCount()) {
			v := int64(math.Round(p))
			if v != last {
				out = append(out, v)
				last = v
			}
		}
		return out
	}
	return nil
}

// pointCount is the number of spaced points for a numeric parameter.
func (h *Hyperparameter) pointCount() int {
	if h.Count <= 0 {
		return DefaultFloatPoints
	}
	return min(h.Count, MaxCount)
}

// points returns n points from Min to Max inclusive, evenly spaced (in log
// space when Log is set and Min > 0).
func (h *Hyperparameter) points(n int) []float64 {
	if n <= 1 || h.Min == h.Max {
		return []float64{h.Min}
	}
	lo, hi := h.Min, h.Max
	logScale := h.Log && lo > 0 && hi > 0
	if logScale {
		lo, hi = math.Log(lo), math.Log(hi)
	}
	out := make([]float64, n)
	for i := range out {
		v := lo + (hi-lo)*float64(i)/float64(n-1)
		if logScale {
			v = math.Exp(v)
		}
		out[i] = v
	}
	// Keep the ends exact whatever the rounding did on the way.
	out[0], out[n-1] = h.Min, h.Max
	return out
}

// GridSize returns the number of points in the full grid: the product of
// every hyperparameter's len(GridValues()), saturating at math.MaxInt. An
// experiment without hyperparameters has a grid of one point.
func (e *Experiment) GridSize() int {
	size := 1
	for _, h := range e.Hyperparameters {
		n := len(h.GridValues())
		if n == 0 {
			return 0
		}
		if size > math.MaxInt/n {
			size = math.MaxInt
			continue
		}
		size *= n
	}
	return size
}

// DriveByAPI reports whether the experiment has no entrypoint, so that its
// trials are asked for and told of through the API instead of being run.
func (e *Experiment) DriveByAPI() bool {
	return len(e.Entrypoint.Argv) == 0
}
