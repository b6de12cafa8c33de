package algo

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/virga-ml/virga/elastic"
	"github.com/virga-ml/virga/elastic/algo/fm"
	"github.com/virga-ml/virga/elastic/algo/kmeans"
	"github.com/virga-ml/virga/elastic/algo/linear"
	"github.com/virga-ml/virga/elastic/algo/pca"
)

// Builtin is one of Virga's built-in streaming algorithms.
type Builtin struct {
	Name, Summary string
	// Params are the names of its parameters (besides "features", the
	// input's width, which all take).
	Params []string
	// Labelled: it learns from labels.
	Labelled bool
	// Wide: its state's size is the input's width.
	Wide bool
	// Serves: its model predicts, and Virga serves it (a run with a
	// checkpoint directory writes it there as model/ at the end).
	Serves bool
	// Make builds the algorithm from its parameters (see Builtin.Parse) and
	// the input's width (its number of feature columns), and returns how to
	// save its final model.
	Make func(params map[string]float64, width int) (elastic.Algorithm, Saver, error)
}

// Saver turns an algorithm's final model into its saved form.
type Saver func(m elastic.Model) (*elastic.SavedModel, error)

// Builtins are the built-in algorithms by name.
var Builtins = map[string]Builtin{
	"median": {Name: "median", Summary: "the median of the first column, by the SGD of Liberty et al. (steps of at most batch/sqrt(rows) in the data's units: for long inputs)",
		Make: func(ps map[string]float64, _ int) (elastic.Algorithm, Saver, error) {
			return elastic.Median{}, vectors("median", ps), nil
		}},
	"moments": {Name: "moments", Summary: "count, mean and variance of every column (exact, one pass)",
		Make: func(ps map[string]float64, _ int) (elastic.Algorithm, Saver, error) {
			return elastic.Moments{}, vectors("moments", ps), nil
		}},
	"linear-learner": {Name: "linear-learner", Labelled: true, Wide: true, Serves: true, Params: []string{"classes", "learning_rate", "l2", "validation_fraction"}, Summary: "linear or logistic regression by SGD, many learning rates and L2 at once, the best on validation kept (params: classes (0: regression, 2: binary, K: multiclass), learning_rate, l2, validation_fraction)",
		Make: makeLinear},
	"kmeans": {Name: "kmeans", Serves: true, Params: []string{"k", "seed"}, Summary: "streaming mini-batch k-means, the collected centres reduced to k by k-means++ (params: k, seed)",
		Make: func(ps map[string]float64, _ int) (elastic.Algorithm, Saver, error) {
			k := int(ps["k"])
			if k < 1 {
				return nil, nil, errors.New("k: the number of clusters is required (--param k=10)")
			}
			return &kmeans.KMeans{K: k, Seed: uint64(ps["seed"])}, func(m elastic.Model) (*elastic.SavedModel, error) {
				km, err := kmeans.FromModel(m, k)
				if err != nil {
					return nil, err
				}
				return km.Saved(ps), nil
			}, nil
		}},
	"factorization-machines": {Name: "factorization-machines", Labelled: true, Wide: true, Serves: true, Params: []string{"classes", "factors", "learning_rate", "l2_w", "l2_v", "sgd", "seed"}, Summary: "factorization machine by AdaGrad (or SGD), one model (params: classes (0: regression, 2: binary), factors, learning_rate, l2_w, l2_v, sgd (1: plain SGD), seed)",
		Make: makeFM},
	"pca": {Name: "pca", Serves: true, Params: []string{"k"}, Summary: "principal components from the streaming covariance (params: k)",
		Make: func(ps map[string]float64, _ int) (elastic.Algorithm, Saver, error) {
			k := int(ps["k"])
			if k < 1 {
				return nil, nil, errors.New("k: the number of components is required (--param k=10)")
			}
			return &pca.PCA{K: k}, func(m elastic.Model) (*elastic.SavedModel, error) {
				pm, err := pca.FromModel(m)
				if err != nil {
					return nil, err
				}
				return pm.Saved(ps), nil
			}, nil
		}},
}

func makeLinear(ps map[string]float64, width int) (elastic.Algorithm, Saver, error) {
	cfg := linear.Config{Features: width, Predictor: linear.Regressor}
	switch k := int(ps["classes"]); {
	case k == 2:
		cfg.Predictor = linear.Binary
	case k > 2:
		cfg.Predictor, cfg.Classes = linear.Multiclass, k
	case k < 0:
		return nil, nil, fmt.Errorf("classes: want 0 (regression), 2 (binary) or the number of classes (got %d)", k)
	}
	if lr, ok := ps["learning_rate"]; ok {
		cfg.LearningRates = []float64{lr}
	}
	if l2, ok := ps["l2"]; ok {
		cfg.L2 = []float64{l2}
	}
	if v, ok := ps["validation_fraction"]; ok {
		cfg.ValidationFraction = v
	}
	l, err := linear.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	return l, l.Save, nil
}

func makeFM(ps map[string]float64, width int) (elastic.Algorithm, Saver, error) {
	cfg := fm.Config{Features: width, Predictor: fm.Regressor, Factors: int(ps["factors"]),
		LearningRate: ps["learning_rate"], L2W: ps["l2_w"], L2V: ps["l2_v"], Seed: uint64(ps["seed"])}
	switch k := int(ps["classes"]); k {
	case 0:
	case 2:
		cfg.Predictor = fm.Binary
	default:
		return nil, nil, fmt.Errorf("classes: want 0 (regression) or 2 (binary) (got %d)", k)
	}
	if ps["sgd"] > 0 {
		cfg.Optimizer = fm.SGD
	}
	f, err := fm.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	return f, f.Save, nil
}

// vectors saves a model whose tensors are all vectors.
func vectors(algo string, params map[string]float64) Saver {
	return func(m elastic.Model) (*elastic.SavedModel, error) {
		sm := &elastic.SavedModel{Algorithm: algo, Params: params, Tensors: map[string]elastic.SavedTensor{}}
		for k, t := range m {
			sm.Tensors[k] = elastic.SavedTensor{Shape: []int{len(t)}, Data: t}
		}
		return sm, nil
	}
}

// Names are the built-in algorithms' names, sorted.
func Names() []string {
	names := make([]string, 0, len(Builtins))
	for n := range Builtins {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Parse merges parameters given as name=value (flags: --param) with a
// trial's numeric hyperparameters; the flags win. It returns the
// hyperparameters that are not the algorithm's (ignored, sorted) and an
// error for a flag that is malformed or names no parameter of it.
func (b Builtin) Parse(flags []string, hp map[string]any) (ps map[string]float64, ignored []string, err error) {
	known := func(k string) bool { return k == "features" || slices.Contains(b.Params, k) }
	ps = map[string]float64{}
	for k, v := range hp {
		if !known(k) {
			ignored = append(ignored, k)
			continue
		}
		switch x := v.(type) {
		case float64:
			ps[k] = x
		case json.Number:
			if f, err := x.Float64(); err == nil {
				ps[k] = f
			}
		case bool:
			if x {
				ps[k] = 1
			} else {
				ps[k] = 0
			}
		}
	}
	for _, p := range flags {
		k, v, ok := strings.Cut(p, "=")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || k == "" || err != nil {
			return nil, nil, fmt.Errorf("--param %q: want name=number", p)
		}
		if !known(k) {
			names := "none but features"
			if len(b.Params) > 0 {
				names = strings.Join(b.Params, ", ") + ", features"
			}
			return nil, nil, fmt.Errorf("--param %s: %s has no parameter %q (its parameters: %s)", p, b.Name, k, names)
		}
		ps[k] = f
	}
	sort.Strings(ignored)
	return ps, ignored, nil
}
