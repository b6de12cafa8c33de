package steptime

import (
	"fmt"
	"math"
	"sort"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/spec"
)

// features turns a configuration and its resources into the regression's
// vector: 1 (the intercept), then per int and float hyperparameter its
// place in its range centred on 0 (-1/2 at the low end, 1/2 at the high
// end; on the log scale when the range is positive), per categorical value
// after the first an indicator, then log2 of the CPUs and of 1 + GPUs.
type features struct {
	params []feature
}

type feature struct {
	name   string
	hp     *spec.Hyperparameter
	lo, hi float64 // the range, as logs when log
	log    bool
}

func newFeatures(e *spec.Experiment) (*features, error) {
	names := e.Order
	if len(names) == 0 {
		for n := range e.Hyperparameters {
			names = append(names, n)
		}
		sort.Strings(names)
	}
	f := &features{}
	for _, n := range names {
		hp := e.Hyperparameters[n]
		if hp == nil {
			return nil, fmt.Errorf("hyperparameter %q is not defined", n)
		}
		switch hp.Type {
		case spec.HPInt, spec.HPFloat:
			ft := feature{name: n, hp: hp, lo: hp.Min, hi: hp.Max}
			if hp.Min > 0 {
				ft.log, ft.lo, ft.hi = true, math.Log(hp.Min), math.Log(hp.Max)
			}
			f.params = append(f.params, ft)
		case spec.HPCategorical:
			if len(hp.Values) > 1 {
				f.params = append(f.params, feature{name: n, hp: hp})
			}
		}
	}
	return f, nil
}

// dim is the vector's length.
func (f *features) dim() int {
	d := 1 + 2
	for _, p := range f.params {
		if p.hp.Type == spec.HPCategorical {
			d += len(p.hp.Values) - 1
		} else {
			d++
		}
	}
	return d
}

// vector is the features of point on res.
func (f *features) vector(point map[string]any, res virga.Resources) ([]float64, error) {
	v := make([]float64, 0, f.dim())
	v = append(v, 1)
	for _, p := range f.params {
		x, ok := point[p.name]
		if !ok {
			return nil, fmt.Errorf("no value for hyperparameter %q", p.name)
		}
		if p.hp.Type == spec.HPCategorical {
			found := false
			for i, c := range p.hp.Values {
				if i == 0 {
					found = found || same(c, x)
					continue
				}
				ind := 0.0
				if same(c, x) {
					ind, found = 1, true
				}
				v = append(v, ind)
			}
			if !found {
				return nil, fmt.Errorf("hyperparameter %q: %v is not one of its values", p.name, x)
			}
			continue
		}
		n, ok := number(x)
		if !ok {
			return nil, fmt.Errorf("hyperparameter %q: %v is not a number", p.name, x)
		}
		if p.log {
			if n <= 0 {
				return nil, fmt.Errorf("hyperparameter %q: %v is outside its range [%g, %g]", p.name, x, p.hp.Min, p.hp.Max)
			}
			n = math.Log(n)
		}
		u := 0.0
		if p.hi > p.lo {
			u = (n-p.lo)/(p.hi-p.lo) - 0.5
		}
		v = append(v, u)
	}
	cpu := res.CPU
	if cpu <= 0 {
		cpu = 1
	}
	v = append(v, math.Log2(cpu), math.Log2(1+float64(max(res.GPU, 0))))
	return v, nil
}

func number(x any) (float64, bool) {
	switch n := x.(type) {
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

func same(a, b any) bool {
	fa, an := number(a)
	fb, bn := number(b)
	if an || bn {
		return an && bn && fa == fb
	}
	return a == b
}
