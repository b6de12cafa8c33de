package sim

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/virga-ml/virga/internal/search/replay"
	"github.com/virga-ml/virga/internal/spec"
)

// Curves gives a simulated experiment's trials their step times and metric
// values from a learning-curve table (bench/search/FORMAT.md): each trial's
// hyperparameters name one configuration of the table, whose recorded
// validation curve the trial reports, one value per step, and whose epoch
// times, times Scale, its steps take on a node.
//
// The mapping, by name (NewCurves checks it before the run):
//   - every dimension of the table must be a hyperparameter of the
//     experiment (a const picks one value of it);
//   - a number goes to the nearest value of the table's grid for that
//     dimension, on a log scale when the table's dimension is log-spaced
//     (so lr 0.05 in a grid of 0.036 and 0.083 is 0.036, the nearer in
//     ratio); a number outside the grid goes to its end;
//   - a categorical value, or a const, must be one of the table's values;
//   - other hyperparameters do not change the curve, except epochs, which,
//     when it is set and shorter than the table's, ends each trial there;
//   - the experiment's objective must be the table's metric and direction.
type Curves struct {
	Table *replay.Table
	// Scale multiplies the table's epoch times (seconds on the machine that
	// made it) into the time a step takes on a pool's node.
	Scale float64
	dims  []curveDim
}

type curveDim struct {
	name    string
	numeric bool
	log     bool
	grid    []float64 // numeric grid values (log when log)
	values  []string  // categorical values as text
}

// NewCurves checks that e's hyperparameters map onto t (see Curves) and
// returns the mapping. file and data are the experiment file's name and
// bytes, for positions in errors (data may be nil); an error is a
// *spec.Error naming the field.
func NewCurves(t *replay.Table, e *spec.Experiment, file string, data []byte) (*Curves, error) {
	c := &Curves{Table: t, Scale: 1}
	var probs []spec.Problem
	problem := func(keys []string, format string, args ...any) {
		line, col := locate(data, keys...)
		probs = append(probs, spec.Problem{File: file, Line: line, Col: col, Path: strings.Join(keys, "."), Msg: fmt.Sprintf(format, args...)})
	}
	if e.Objective.Metric != t.Metric {
		problem([]string{"objective", "metric"}, "the table %s records %s, not %s; simulate with the table's metric", t.Name, t.Metric, e.Objective.Metric)
	}
	if string(e.Objective.Direction) != t.Direction {
		problem([]string{"objective", "direction"}, "the table %s's %s is to %s, not to %s", t.Name, t.Metric, t.Direction, e.Objective.Direction)
	}
	for _, d := range t.Space {
		h := e.Hyperparameters[d.Name]
		cd := curveDim{name: d.Name, numeric: d.Type != "categorical", log: d.Log}
		for _, v := range d.Values {
			if cd.numeric {
				f := v.(float64)
				if d.Log {
					f = math.Log(f)
				}
				cd.grid = append(cd.grid, f)
			} else {
				cd.values = append(cd.values, fmt.Sprint(v))
			}
		}
		if h == nil {
			problem([]string{"hyperparameters"}, "the table %s varies %s (%s); define it (a const picks one value)", t.Name, d.Name, fmtValues(d.Values))
			continue
		}
		switch {
		case h.Type == spec.HPConst:
			if _, ok := cd.index(h.Value); !ok {
				problem([]string{"hyperparameters", d.Name}, "%v is not a value the table %s has for %s (%s)", spec.FormatValue(h.Value), t.Name, d.Name, fmtValues(d.Values))
			}
		case h.Type == spec.HPCategorical:
			for _, v := range h.Values {
				if _, ok := cd.index(v); !ok {
					problem([]string{"hyperparameters", d.Name, "values"}, "%v is not a value the table %s has for %s (%s)", spec.FormatValue(v), t.Name, d.Name, fmtValues(d.Values))
					break
				}
			}
		case !cd.numeric:
			problem([]string{"hyperparameters", d.Name, "type"}, "the table %s has categorical values for %s (%s); make it categorical", t.Name, d.Name, fmtValues(d.Values))
		}
		c.dims = append(c.dims, cd)
	}
	if len(probs) > 0 {
		sort.SliceStable(probs, func(i, j int) bool {
			if probs[i].Line != probs[j].Line {
				return probs[i].Line < probs[j].Line
			}
			return probs[i].Col < probs[j].Col
		})
		return nil, &spec.Error{Problems: probs}
	}
	return c, nil
}

// index returns the grid index of value v in the dimension.
func (d *curveDim) index(v any) (int, bool) {
	if !d.numeric {
		s := fmt.Sprint(v)
		i := slices.Index(d.values, s)
		return i, i >= 0
	}
	var x float64
	switch n := v.(type) {
	case int64:
		x = float64(n)
	case float64:
		x = n
	case int:
		x = float64(n)
	default:
		return 0, false
	}
	if d.log {
		if x <= 0 {
			return 0, true
		}
		x = math.Log(x)
	}
	if math.IsNaN(x) {
		return 0, false
	}
	i, _ := slices.BinarySearch(d.grid, x)
	switch {
	case i == 0:
		return 0, true
	case i == len(d.grid):
		return len(d.grid) - 1, true
	case x-d.grid[i-1] <= d.grid[i]-x:
		return i - 1, true
	}
	return i, true
}

// Config returns the table configuration hyperparameters hp name.
func (c *Curves) Config(hp map[string]any) (int, error) {
	idx := 0
	for _, d := range c.dims {
		v, ok := hp[d.name]
		if !ok {
			return 0, fmt.Errorf("the trial has no %s", d.name)
		}
		k, ok := d.index(v)
		if !ok {
			return 0, fmt.Errorf("%s = %v is not in the table %s", d.name, v, c.Table.Name)
		}
		idx = idx*c.gridLen(d) + k
	}
	return idx, nil
}

func (c *Curves) gridLen(d curveDim) int {
	if d.numeric {
		return len(d.grid)
	}
	return len(d.values)
}

// Steps returns how many steps a trial with hyperparameters hp runs: the
// table's epochs, or its epochs hyperparameter when that is shorter.
func (c *Curves) Steps(hp map[string]any) int {
	n := c.Table.Epochs
	switch v := hp["epochs"].(type) {
	case int64:
		if v >= 1 && v < int64(n) {
			n = int(v)
		}
	case float64:
		if v >= 1 && v < float64(n) {
			n = int(v)
		}
	}
	return n
}

// StepTime returns the time step (1-based) of configuration cfg takes.
func (c *Curves) StepTime(cfg, step int) time.Duration {
	return time.Duration(c.Table.Configs[cfg].Seconds[step-1] * c.Scale * float64(time.Second))
}

// Value returns the metric configuration cfg reports at step (1-based).
func (c *Curves) Value(cfg, step int) float64 { return c.Table.Configs[cfg].Curve[step-1] }

// MedianEpoch returns the median epoch time of the table, scaled.
func (c *Curves) MedianEpoch() time.Duration {
	var all []float64
	for _, cf := range c.Table.Configs {
		all = append(all, cf.Seconds...)
	}
	slices.Sort(all)
	if len(all) == 0 {
		return 0
	}
	return time.Duration(all[len(all)/2] * c.Scale * float64(time.Second))
}

// MeanEpoch returns the mean epoch time of the table, scaled.
func (c *Curves) MeanEpoch() time.Duration {
	sum, n := 0.0, 0
	for _, cf := range c.Table.Configs {
		for _, s := range cf.Seconds {
			sum += s
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return time.Duration(sum / float64(n) * c.Scale * float64(time.Second))
}

// ScaleTo sets Scale so that the table's median epoch takes d.
func (c *Curves) ScaleTo(d time.Duration) {
	c.Scale = 1
	if m := c.MedianEpoch(); m > 0 {
		c.Scale = float64(d) / float64(m)
	}
}

func fmtValues(vs []any) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = spec.FormatValue(v)
	}
	return strings.Join(parts, ", ")
}

// locate returns the line and column of the value at keys in a YAML
// mapping document, or of the deepest key found; 0, 0 when data is nil or
// not YAML.
func locate(data []byte, keys ...string) (int, int) {
	if len(data) == 0 {
		return 0, 0
	}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return 0, 0
	}
	n := doc.Content[0]
	line, col := 0, 0
	for _, k := range keys {
		if n.Kind != yaml.MappingNode {
			break
		}
		found := false
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				line, col = n.Content[i].Line, n.Content[i].Column
				n = n.Content[i+1]
				found = true
				break
			}
		}
		if !found {
			break
		}
	}
	return line, col
}
