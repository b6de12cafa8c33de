package fm

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virga-ml/virga/elastic"
	"github.com/virga-ml/virga/elastic/algo/linear"
)

// truth is a generating factorization machine.
type truth struct {
	w0   float64
	w, v []float64 // v: D×k
	k    int
}

func (tr truth) score(x []float64) float64 {
	idx := make([]int, 0, len(x))
	for j, xj := range x {
		if xj != 0 {
			idx = append(idx, j)
		}
	}
	return score(tr.w0, tr.w, tr.v, tr.k, x, idx, make([]float64, tr.k))
}

// synthetic draws rows of d sparse features (each non-zero with probability
// 0.3: the even ones 1, the odd ones N(0, 1)) and labels from a known FM of
// 4 factors whose pairwise term carries much of the signal: z plus Gaussian
// noise of sd 0.5 (Regressor), or a Bernoulli draw of sigmoid(z) (Binary).
func synthetic(pred Predictor, rows, d int, seed uint64) (x, y []float64, tr truth) {
	return syntheticDensity(pred, rows, d, 0.3, seed)
}

// syntheticDensity is synthetic with features non-zero with probability
// density.
func syntheticDensity(pred Predictor, rows, d int, density float64, seed uint64) (x, y []float64, tr truth) {
	const k = 4
	gen := rand.New(rand.NewPCG(1, 2)) // the same model for every seed
	tr = truth{w0: -0.3, w: make([]float64, d), v: make([]float64, d*k), k: k}
	for j := range d {
		tr.w[j] = 0.5 * gen.NormFloat64()
	}
	for i := range tr.v {
		tr.v[i] = 0.5 * gen.NormFloat64()
	}
	rng := rand.New(rand.NewPCG(seed, 99))
	x, y = make([]float64, rows*d), make([]float64, rows)
	for i := range rows {
		r := x[i*d : (i+1)*d]
		for j := range d {
			if rng.Float64() >= density {
				continue
			}
			if j%2 == 0 {
				r[j] = 1
			} else {
				r[j] = rng.NormFloat64()
			}
		}
		z := tr.score(r)
		switch pred {
		case Regressor:
			y[i] = z + 0.5*rng.NormFloat64()
		default:
			if rng.Float64() < sigmoid(z) {
				y[i] = 1
			}
		}
	}
	return x, y, tr
}

var lossName = map[Predictor]string{Binary: "log loss", Regressor: "MSE"}

// testLoss is the figure the tests compare: mean log loss of the
// probability p (Binary) or mean squared error of the prediction p
// (Regressor).
func testLoss(pred Predictor, p, y float64) float64 {
	if pred == Regressor {
		return (p - y) * (p - y)
	}
	q := p
	if y <= 0.5 {
		q = 1 - p
	}
	return -math.Log(max(q, 1e-15))
}

// meanLoss scores the rows of x (d columns) with scores and returns the
// mean test loss and the accuracy (Binary; 0 for Regressor).
func meanLoss(pred Predictor, x, y []float64, d int, scores func(x []float64) float64) (loss, acc float64) {
	for i := range y {
		p := scores(x[i*d : (i+1)*d])
		loss += testLoss(pred, p, y[i])
		if pred == Binary && (p >= 0.5) == (y[i] > 0.5) {
			acc++
		}
	}
	return loss / float64(len(y)), acc / float64(len(y))
}

func train(t testing.TB, cfg Config, x, y []float64, workers int) (*FM, elastic.Model) {
	t.Helper()
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := elastic.Local(context.Background(), f, elastic.Shards(x, y, cfg.Features, workers, 64))
	if err != nil {
		t.Fatal(err)
	}
	return f, m
}

// TestSyntheticAgainstTheGeneratingModel: one pass over 200 000 rows (also
// under the race detector: the pairwise term needs them, and the detector
// costs this test a few seconds), on one worker and on two, gives a test
// log loss (binary) or mean squared error (regression) within 2% of the
// generating model's own, while the linear learner on the same rows, which
// cannot express the pairwise term, stays far from it: the factors work.
func TestSyntheticAgainstTheGeneratingModel(t *testing.T) {
	const d = 20
	const rows = 200_000
	for _, pred := range []Predictor{Binary, Regressor} {
		x, y, tr := synthetic(pred, rows, d, 1)
		xte, yte, _ := synthetic(pred, 20_000, d, 2)
		trueLoss, trueAcc := meanLoss(pred, xte, yte, d, func(x []float64) float64 {
			z := tr.score(x)
			if pred == Binary {
				return sigmoid(z)
			}
			return z
		})

		// the linear learner's figure
		lpred := linear.Regressor
		if pred == Binary {
			lpred = linear.Binary
		}
		ll, err := linear.New(linear.Config{Predictor: lpred, Features: d})
		if err != nil {
			t.Fatal(err)
		}
		lmod, _, err := elastic.Local(context.Background(), ll, elastic.Shards(x, y, d, 1, 64))
		if err != nil {
			t.Fatal(err)
		}
		lsm, err := ll.Save(lmod)
		if err != nil {
			t.Fatal(err)
		}
		lin, err := linear.Load(lsm)
		if err != nil {
			t.Fatal(err)
		}
		linLoss, linAcc := meanLoss(pred, xte, yte, d, func(x []float64) float64 { return lin.Scores(x)[0] })

		for _, workers := range []int{1, 2} {
			f, m := train(t, Config{Predictor: pred, Features: d}, x, y, workers)
			sm, err := f.Save(m)
			if err != nil {
				t.Fatal(err)
			}
			lm, err := Load(sm)
			if err != nil {
				t.Fatal(err)
			}
			loss, acc := meanLoss(pred, xte, yte, d, func(x []float64) float64 { return lm.Scores(x)[0] })
			accs := ""
			if pred == Binary {
				accs = fmt.Sprintf(", accuracy %.4f (generating model %.4f, linear learner %.4f)", acc, trueAcc, linAcc)
			}
			t.Logf("%s, %d workers, %d rows: FM test %s %.5f (generating model %.5f, %+.2f%%; linear learner %.5f, %+.1f%%)%s",
				pred, workers, rows, lossName[pred], loss, trueLoss, 100*(loss/trueLoss-1), linLoss, 100*(linLoss/trueLoss-1), accs)
			if loss > trueLoss*1.02 {
				t.Errorf("%s, %d workers: loss %.5f; the generating model's %.5f; want within 2%%", pred, workers, loss, trueLoss)
			}
			if linLoss < loss*1.1 || linLoss-trueLoss < 10*(loss-trueLoss) {
				t.Errorf("%s, %d workers: the linear learner's loss %.5f is within 10%% of the FM's %.5f, or its excess over the generating model's %.5f not 10 times the FM's; the pairwise term should matter", pred, workers, linLoss, loss, trueLoss)
			}
			if pred == Binary && acc < trueAcc-0.01 {
				t.Errorf("%s, %d workers: accuracy %.4f; the generating model's %.4f; want within 1%%", pred, workers, acc, trueAcc)
			}
		}
	}
}

// TestAdaGradOnSparseRows: on sparse rows (120 features, each non-zero with
// probability 0.05) one pass of AdaGrad at its default rate, the rate that
// also suits the dense rows of TestSyntheticAgainstTheGeneratingModel, ends
// within 2% of the generating model's log loss, where SGD at its default
// rate (the best for dense regression) stays more than 10% off and needs a
// rate ten times larger: the factors of features that rarely meet grow from
// their small start only with large steps, which AdaGrad gives the rare
// parameters by itself. This is why AdaGrad is the default.
func TestAdaGradOnSparseRows(t *testing.T) {
	const d, rows = 120, 200_000
	x, y, tr := syntheticDensity(Binary, rows, d, 0.05, 1)
	xte, yte, _ := syntheticDensity(Binary, 20_000, d, 0.05, 2)
	trueLoss, _ := meanLoss(Binary, xte, yte, d, func(x []float64) float64 { return sigmoid(tr.score(x)) })
	loss := func(cfg Config) float64 {
		f, m := train(t, cfg, x, y, 1)
		sm, err := f.Save(m)
		if err != nil {
			t.Fatal(err)
		}
		lm, err := Load(sm)
		if err != nil {
			t.Fatal(err)
		}
		l, _ := meanLoss(Binary, xte, yte, d, func(x []float64) float64 { return lm.Scores(x)[0] })
		return l
	}
	ada := loss(Config{Predictor: Binary, Features: d})
	sgd := loss(Config{Predictor: Binary, Features: d, Optimizer: SGD})
	sgd10 := loss(Config{Predictor: Binary, Features: d, Optimizer: SGD, LearningRate: 2})
	t.Logf("log loss: AdaGrad at its default rate %.5f (%+.2f%%), SGD at its default rate %.5f (%+.2f%%), SGD at rate 2 %.5f (%+.2f%%); generating model %.5f",
		ada, 100*(ada/trueLoss-1), sgd, 100*(sgd/trueLoss-1), sgd10, 100*(sgd10/trueLoss-1), trueLoss)
	if ada > trueLoss*1.02 {
		t.Errorf("AdaGrad: log loss %.5f; the generating model's %.5f; want within 2%%", ada, trueLoss)
	}
	if sgd < trueLoss*1.1 {
		t.Errorf("SGD at its default rate: log loss %.5f within 10%% of the generating model's %.5f; the package doc says it falls behind on sparse rows", sgd, trueLoss)
	}
}

// TestSavedModelPredictsAsTheModel: the model saved, written, read back
// (and through a file) predicts exactly what the in-memory model computes,
// for both predictors.
func TestSavedModelPredictsAsTheModel(t *testing.T) {
	const d = 20
	for _, pred := range []Predictor{Binary, Regressor} {
		x, y, _ := synthetic(pred, 20_000, d, 3)
		xte, _, _ := synthetic(pred, 2_000, d, 4)
		f, m := train(t, Config{Predictor: pred, Features: d, Factors: 5, L2W: 1e-4, L2V: 1e-4, Seed: 7}, x, y, 2)
		// the in-memory model's predictions, from Finalize's tensors
		want := make([]float64, len(xte)/d)
		sum := make([]float64, 5)
		for i := range want {
			r := xte[i*d : (i+1)*d]
			var idx []int
			for j, v := range r {
				if v != 0 {
					idx = append(idx, j)
				}
			}
			z := score(m["w0"][0], m["w"], m["v"], 5, r, idx, sum)
			switch {
			case pred == Regressor:
				want[i] = z
			case sigmoid(z) >= 0.5:
				want[i] = 1
			}
		}
		sm, err := f.Save(m)
		if err != nil {
			t.Fatal(err)
		}
		if sm.Algorithm != Algorithm || sm.Meta["predictor"] != string(pred) || sm.Params["rows_trained"] != 20_000 || sm.Params["factors"] != 5 {
			t.Errorf("%s: saved algorithm %q, meta %v, params %v", pred, sm.Algorithm, sm.Meta, sm.Params)
		}
		var buf bytes.Buffer
		if err := elastic.WriteModel(&buf, sm); err != nil {
			t.Fatal(err)
		}
		read, err := elastic.ReadModel(&buf)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "model.json")
		if err := elastic.SaveModelFile(path, sm); err != nil {
			t.Fatal(err)
		}
		file, err := elastic.LoadModelFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for name, s := range map[string]*elastic.SavedModel{"in memory": sm, "read back": read, "from a file": file} {
			got, err := Predict(s, xte)
			if err != nil {
				t.Fatal(err)
			}
			diff := 0
			for i := range want {
				if got[i] != want[i] {
					diff++
				}
			}
			if diff > 0 {
				t.Errorf("%s, %s: %d of %d predictions differ from the in-memory model's", pred, name, diff, len(want))
			}
		}
		ones := 0.0
		for _, p := range want {
			ones += p
		}
		t.Logf("%s: %d predictions identical after saving, writing and reading (mean prediction %.4f)", pred, len(want), ones/float64(len(want)))
	}
}

// TestInitializeIsSeededAndLeavesAStateAlone: the initial factors depend on
// the seed only; Initialize over a state that holds the machine (run twice,
// or over a restored snapshot) changes nothing, so training continues from
// the snapshot; a state of another configuration is refused.
func TestInitializeIsSeededAndLeavesAStateAlone(t *testing.T) {
	const d = 20
	ctx := context.Background()
	initial := func(seed uint64) elastic.Tensor {
		f, err := New(Config{Predictor: Binary, Features: d, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		st := elastic.NewMemState(1)
		if err := f.Initialize(ctx, st); err != nil {
			t.Fatal(err)
		}
		v, _ := st.Pull(ctx, Key)
		return v[f.offV:f.offG]
	}
	a, b, c := initial(1), initial(1), initial(2)
	var ss float64
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seed 1 twice: factor %d is %v, then %v", i, a[i], b[i])
		}
		ss += a[i] * a[i]
	}
	if a[0] == c[0] && a[1] == c[1] {
		t.Errorf("seeds 1 and 2 give the same factors %v", a[:2])
	}
	if sd := math.Sqrt(ss / float64(len(a))); sd < 0.008 || sd > 0.012 {
		t.Errorf("initial factors of sd %.4f; want about 0.01", sd)
	}

	// train on the first half of a stream; snapshot the state
	x, y, tr := synthetic(Binary, 100_000, d, 5)
	xte, yte, _ := synthetic(Binary, 20_000, d, 6)
	trueLoss, _ := meanLoss(Binary, xte, yte, d, func(x []float64) float64 { return sigmoid(tr.score(x)) })
	half := len(y) / 2
	f, err := New(Config{Predictor: Binary, Features: d})
	if err != nil {
		t.Fatal(err)
	}
	lossOf := func(m elastic.Model) float64 {
		sm, err := f.Save(m)
		if err != nil {
			t.Fatal(err)
		}
		lm, err := Load(sm)
		if err != nil {
			t.Fatal(err)
		}
		l, _ := meanLoss(Binary, xte, yte, d, func(x []float64) float64 { return lm.Scores(x)[0] })
		return l
	}
	m1, st, err := elastic.Local(ctx, f, elastic.Shards(x[:half*d], y[:half], d, 1, 64))
	if err != nil {
		t.Fatal(err)
	}
	snap := st.Snapshot()
	if err := f.Initialize(ctx, st); err != nil {
		t.Fatal(err)
	}
	if again := st.Snapshot(); !equal(again[Key], snap[Key]) {
		t.Fatal("Initialize over a trained state changed it")
	}

	// resume from the snapshot on the second half: Initialize, then updates
	st2 := elastic.NewMemState(1)
	st2.Restore(snap)
	if err := f.Initialize(ctx, st2); err != nil {
		t.Fatal(err)
	}
	src := &elastic.SliceSource{X: x[half*d:], Y: y[half:], Cols: d, BatchRows: 64}
	for {
		bt, err := src.Next(ctx)
		if err != nil {
			break
		}
		if err := f.Update(ctx, st2, bt); err != nil {
			t.Fatal(err)
		}
	}
	m2, err := f.Finalize(ctx, st2)
	if err != nil {
		t.Fatal(err)
	}
	_, all := train(t, Config{Predictor: Binary, Features: d}, x, y, 1)
	l1, l2, lall := lossOf(m1), lossOf(m2), lossOf(all)
	t.Logf("log loss after the first half %.5f, after resuming on the second %.5f, one run over both %.5f (generating model %.5f); rows trained %v",
		l1, l2, lall, trueLoss, m2["params"][0])
	if m2["params"][0] != float64(len(y)) {
		t.Errorf("rows trained %v after resuming; want %d", m2["params"][0], len(y))
	}
	if l2 >= l1 || math.Abs(l2/lall-1) > 0.002 {
		t.Errorf("resumed log loss %.5f; want below the first half's %.5f and within 0.2%% of one run's %.5f", l2, l1, lall)
	}

	g, err := New(Config{Predictor: Binary, Features: d, Factors: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Initialize(ctx, st2); err == nil || !strings.Contains(err.Error(), "another configuration") {
		t.Errorf("Initialize of 3 factors over a state of 8: %v; want an error naming another configuration", err)
	}
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string // in the error
	}{
		{Config{Features: 2}, `Predictor is empty; want "binary_classifier" or "regressor"`},
		{Config{Predictor: "multiclass_classifier", Features: 2}, `unknown predictor "multiclass_classifier"; want "binary_classifier" or "regressor"`},
		{Config{Predictor: Binary}, "Features = 0; want the number of feature columns"},
		{Config{Predictor: Binary, Features: 2, Factors: -1}, "Factors = -1; want the dimension of the factors (> 0"},
		{Config{Predictor: Binary, Features: 1 << 26, Factors: 64}, "want fewer features or factors"},
		{Config{Predictor: Binary, Features: 2, Optimizer: "adam"}, `unknown optimizer "adam"; want "adagrad" or "sgd"`},
		{Config{Predictor: Binary, Features: 2, LearningRate: -0.1}, "LearningRate = -0.1; want a positive number"},
		{Config{Predictor: Binary, Features: 2, LearningRate: math.Inf(1)}, "LearningRate = +Inf"},
		{Config{Predictor: Binary, Features: 2, DecayRows: -5}, "DecayRows = -5"},
		{Config{Predictor: Binary, Features: 2, L2W: -1e-3}, "L2W = -0.001; want 0 (none) or a positive penalty"},
		{Config{Predictor: Regressor, Features: 2, L2V: math.NaN()}, "L2V = NaN; want 0 (none) or a positive penalty"},
		{Config{Predictor: Regressor, Features: 2, InitSD: -1}, "InitSD = -1; want a positive standard deviation"},
	} {
		_, err := New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v): %v; want an error with %q", c.cfg, err, c.want)
		}
	}
	f, err := New(Config{Predictor: Binary, Features: 2})
	if err != nil {
		t.Fatal(err)
	}
	if c := f.Config(); c.Factors != 8 || c.Optimizer != AdaGrad || c.LearningRate != 0.05 || c.InitSD != 0.01 {
		t.Errorf("defaults %+v; want 8 factors, AdaGrad at 0.05, InitSD 0.01", c)
	}
	ctx := context.Background()
	st := elastic.NewMemState(1)
	for _, u := range []struct {
		b    *elastic.Batch
		want string
	}{
		{&elastic.Batch{X: []float64{1, 2}, Cols: 2, Y: []float64{1}}, "Initialize must run before the first batch"},
		{&elastic.Batch{X: []float64{1, 2, 3}, Cols: 3, Y: []float64{1}}, "a batch of 3 feature columns; the machine has 2"},
		{&elastic.Batch{X: []float64{1, 2}, Cols: 2}, "batch of 1 rows has 0 labels"},
		{&elastic.Batch{X: []float64{1, 2, 3, 4}, Cols: 2, Y: []float64{1, math.NaN()}}, "the label of row 1 of the batch is NaN; want a finite number"},
	} {
		if err := f.Update(ctx, st, u.b); err == nil || !strings.Contains(err.Error(), u.want) {
			t.Errorf("Update(%+v): %v; want an error with %q", u.b, err, u.want)
		}
		if err := f.Initialize(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	// a second push of the initial tensor (two Initialize over one fresh
	// state at once) is caught
	twice := make(elastic.Tensor, f.StateFloats())
	twice[hInits] = 1
	if err := st.Push(ctx, Key, twice); err != nil {
		t.Fatal(err)
	}
	if err := f.Update(ctx, st, &elastic.Batch{X: []float64{1, 2}, Cols: 2, Y: []float64{1}}); err == nil || !strings.Contains(err.Error(), "initialized") {
		t.Errorf("Update over a state initialized twice: %v; want an error", err)
	}

	// a learning rate far too large is reported, not trained on
	x, y, _ := synthetic(Regressor, 5_000, 20, 8)
	g, err := New(Config{Predictor: Regressor, Features: 20, Optimizer: SGD, LearningRate: 1e6})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = elastic.Local(ctx, g, elastic.Shards(x, y, 20, 1, 64))
	if err == nil || !strings.Contains(err.Error(), "diverged") || !strings.Contains(err.Error(), "lower LearningRate") {
		t.Errorf("SGD at rate 1e6: %v; want a divergence error asking for a lower rate", err)
	}
}

// TestLoadRejectsMalformedModels: each defect of a saved model is named.
func TestLoadRejectsMalformedModels(t *testing.T) {
	f, err := New(Config{Predictor: Binary, Features: 3, Factors: 2})
	if err != nil {
		t.Fatal(err)
	}
	good := func() *elastic.SavedModel {
		sm, err := f.Save(elastic.Model{"w0": {0.1}, "w": {1, 2, 3}, "v": {1, 2, 3, 4, 5, 6}, "params": {10, 0.5}})
		if err != nil {
			t.Fatal(err)
		}
		return sm
	}
	if p, err := Predict(good(), []float64{1, 0, 1, 0, 0, 0}); err != nil || len(p) != 2 || p[0] != 1 || p[1] != 1 {
		t.Fatalf("the good model predicts %v, %v; want [1 1]", p, err)
	}
	for _, c := range []struct {
		name   string
		break_ func(sm *elastic.SavedModel)
		want   string
	}{
		{"another algorithm", func(sm *elastic.SavedModel) { sm.Algorithm = "linear-learner" }, `a model of "linear-learner"; want "factorization-machines"`},
		{"another format", func(sm *elastic.SavedModel) { sm.Format = "v0" }, "model format"},
		{"no predictor", func(sm *elastic.SavedModel) { delete(sm.Meta, "predictor") }, `meta predictor ""; want "binary_classifier" or "regressor"`},
		{"no v", func(sm *elastic.SavedModel) { delete(sm.Tensors, "v") }, "want w0 [1], w [D] and v [D, K]"},
		{"v of 3 features", func(sm *elastic.SavedModel) {
			sm.Tensors["v"] = elastic.SavedTensor{Shape: []int{2, 3}, Data: []float64{1, 2, 3, 4, 5, 6}}
		}, "disagree"},
		{"v flat", func(sm *elastic.SavedModel) {
			sm.Tensors["v"] = elastic.SavedTensor{Shape: []int{6}, Data: []float64{1, 2, 3, 4, 5, 6}}
		}, "v [6]"},
		{"w0 of 2", func(sm *elastic.SavedModel) {
			sm.Tensors["w0"] = elastic.SavedTensor{Shape: []int{2}, Data: []float64{1, 2}}
		}, "disagree"},
		{"shape and data disagree", func(sm *elastic.SavedModel) {
			sm.Tensors["w"] = elastic.SavedTensor{Shape: []int{3}, Data: []float64{1, 2}}
		}, "holds 3 numbers, data has 2"},
		{"not finite", func(sm *elastic.SavedModel) { sm.Tensors["w"].Data[1] = math.NaN() }, "element 1 is NaN"},
	} {
		sm := good()
		c.break_(sm)
		_, err := Load(sm)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Load: %v; want an error with %q", c.name, err, c.want)
		}
	}
	lm, err := Load(good())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lm.Predict([]float64{1, 2}); err == nil || !strings.Contains(err.Error(), "not rows of 3 features") {
		t.Errorf("Predict of 2 numbers: %v; want an error", err)
	}
	if _, err := f.Save(elastic.Model{"w0": {0}, "w": {1, 2}, "v": {1, 2, 3, 4, 5, 6}, "params": {0, 0}}); err == nil || !strings.Contains(err.Error(), `"w" of 2 numbers; want 3`) {
		t.Errorf("Save of a short w: %v", err)
	}
}

// BenchmarkUpdate: one mini-batch of 256 rows through Update on one worker
// (pull, gradient, push), 8 factors: dense rows of 64 features, and sparse
// rows of 1000 features with 10 non-zero (a libsvm-like input).
func BenchmarkUpdate(b *testing.B) {
	const batch = 256
	for _, c := range []struct {
		name    string
		d       int
		density float64
	}{{"dense64", 64, 1}, {"sparse1000x10", 1000, 0.01}} {
		b.Run(c.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(3, 4))
			x, y := make([]float64, batch*c.d), make([]float64, batch)
			for i := range x {
				if rng.Float64() < c.density {
					x[i] = rng.NormFloat64()
				}
			}
			for i := range y {
				y[i] = float64(rng.IntN(2))
			}
			f, err := New(Config{Predictor: Binary, Features: c.d})
			if err != nil {
				b.Fatal(err)
			}
			st := elastic.NewMemState(1)
			ctx := context.Background()
			if err := f.Initialize(ctx, st); err != nil {
				b.Fatal(err)
			}
			bt := &elastic.Batch{X: x, Y: y, Cols: c.d}
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				if err := f.Update(ctx, st, bt); err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.ReportMetric(float64(n*batch)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// TestNonZeros: the fast scan finds the non-zero elements of rows of every
// length and density, in order.
func TestNonZeros(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for n := range 40 {
		for _, density := range []float64{0, 0.05, 0.5, 1} {
			x := make([]float64, n)
			var want []int
			for j := range x {
				if rng.Float64() < density {
					x[j] = rng.NormFloat64()
					want = append(want, j)
				}
			}
			if got := nonZeros(x, nil); !equalInts(got, want) {
				t.Errorf("nonZeros(%v) = %v; want %v", x, got, want)
			}
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
