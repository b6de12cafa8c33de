package linear

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/virga-ml/virga/elastic"
	"github.com/virga-ml/virga/elastic/input"
)

const digitsPath = "../../../examples/data/digits.csv.gz" // the same file as ../shared/data/digits

// epochs replays a source's rows several times (a stream of several passes).
type epochs struct {
	x, y     []float64
	cols     int
	batch, n int
	src      *elastic.SliceSource
	shuffle  *rand.Rand
}

func (e *epochs) Next(ctx context.Context) (*elastic.Batch, error) {
	for {
		if e.src == nil {
			if e.n == 0 {
				return nil, io.EOF
			}
			e.n--
			x, y := e.x, e.y
			if e.shuffle != nil { // a new order each pass
				x, y = append([]float64(nil), x...), append([]float64(nil), y...)
				rows := len(y)
				e.shuffle.Shuffle(rows, func(i, j int) {
					y[i], y[j] = y[j], y[i]
					for c := range e.cols {
						x[i*e.cols+c], x[j*e.cols+c] = x[j*e.cols+c], x[i*e.cols+c]
					}
				})
			}
			e.src = &elastic.SliceSource{X: x, Y: y, Cols: e.cols, BatchRows: e.batch}
		}
		b, err := e.src.Next(ctx)
		if errors.Is(err, io.EOF) {
			e.src = nil
			continue
		}
		return b, err
	}
}

func readDigits(t testing.TB) (x, y []float64) {
	x, y, cols, err := input.ReadAll(digitsPath, input.Options{Label: input.LastColumn})
	if err != nil {
		t.Fatalf("digits: %v", err)
	}
	if cols != 64 || len(y) != 1797 {
		t.Fatalf("digits: %d rows of %d pixels; want 1797 of 64", len(y), cols)
	}
	return x, y
}

func sklearnDigits(t *testing.T) map[string]float64 {
	script, _ := filepath.Abs("testdata/sklearn_digits.py")
	cmd := exec.Command("/usr/bin/python3", script, digitsPath)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scikit-learn reference (scripts/test.sh installs python3-sklearn): %v\n%s", err, stderr.String())
	}
	var r map[string]float64
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("scikit-learn reference: %v: %s", err, out)
	}
	return r
}

// TestDigitsMulticlassMatchesSklearn: softmax regression on the digits
// (train rows i%5 != 4, test rows i%5 == 4, as the script splits them) is
// within 1% accuracy of scikit-learn's LogisticRegression, on one worker and
// on two (20 passes over the training rows, 8 under the race detector),
// and its saved model predicts the same through Predict.
func TestDigitsMulticlassMatchesSklearn(t *testing.T) {
	x, y := readDigits(t)
	var xtr, ytr, xte, yte []float64
	for i := range y {
		if i%5 == 4 {
			xte, yte = append(xte, x[i*64:(i+1)*64]...), append(yte, y[i])
		} else {
			xtr, ytr = append(xtr, x[i*64:(i+1)*64]...), append(ytr, y[i])
		}
	}
	ref := sklearnDigits(t)
	want := ref["logistic_regression"]
	passes := 20
	if raceEnabled {
		passes = 8
	}
	for _, workers := range []int{1, 2} {
		l, err := New(Config{Predictor: Multiclass, Features: 64, Classes: 10, LearningRates: []float64{1, 0.5, 0.1, 0.02}, L2: []float64{0, 1e-4}})
		if err != nil {
			t.Fatal(err)
		}
		var srcs []elastic.Source
		rows := len(ytr)
		for w := range workers {
			lo, hi := rows*w/workers, rows*(w+1)/workers
			srcs = append(srcs, &epochs{x: xtr[lo*64 : hi*64], y: ytr[lo:hi], cols: 64, batch: 16, n: passes, shuffle: rand.New(rand.NewPCG(uint64(w), 7))})
		}
		m, _, err := elastic.Local(context.Background(), l, srcs)
		if err != nil {
			t.Fatal(err)
		}
		sm, err := l.Save(m)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := elastic.WriteModel(&buf, sm); err != nil {
			t.Fatal(err)
		}
		sm, err = elastic.ReadModel(&buf)
		if err != nil {
			t.Fatal(err)
		}
		pred, err := Predict(sm, xte)
		if err != nil {
			t.Fatal(err)
		}
		acc := accuracy(pred, yte)
		t.Logf("%d workers: accuracy %.4f (model %v: lr %v l2 %v, validation loss %.4f); sklearn LogisticRegression %.4f, SGDClassifier %.4f",
			workers, acc, sm.Params["model"], sm.Params["learning_rate"], sm.Params["l2"], sm.Params["validation_loss"], want, ref["sgd_classifier"])
		if acc < want-0.01 {
			t.Errorf("%d workers: accuracy %.4f; sklearn %.4f; want within 1%%", workers, acc, want)
		}
	}
}

func accuracy(pred, y []float64) float64 {
	ok := 0
	for i := range y {
		if pred[i] == y[i] {
			ok++
		}
	}
	return float64(ok) / float64(len(y))
}

// synthetic draws rows of d features with assorted means and scales (so the
// standardisation matters) and labels from a known linear model: y = w·x+b
// plus Gaussian noise of sd 0.5 (Regressor), or a Bernoulli draw of
// sigmoid(w·x+b) (Binary).
func synthetic(pred Predictor, rows, d int, seed uint64) (x, y, w []float64, b float64) {
	gen := rand.New(rand.NewPCG(1, 2)) // the same model for every seed
	mean, sd := make([]float64, d), make([]float64, d)
	w = make([]float64, d)
	for j := range d {
		mean[j] = 5 * gen.NormFloat64()
		sd[j] = math.Exp(gen.NormFloat64())
		w[j] = 2 * gen.NormFloat64() / math.Sqrt(float64(d)) / sd[j]
	}
	rng := rand.New(rand.NewPCG(seed, 99))
	x, y = make([]float64, rows*d), make([]float64, rows)
	for j := range d {
		b -= w[j] * mean[j]
	}
	b += 0.3
	for i := range rows {
		z := b
		for j := range d {
			v := mean[j] + sd[j]*rng.NormFloat64()
			x[i*d+j] = v
			z += w[j] * v
		}
		switch pred {
		case Regressor:
			y[i] = z + 0.5*rng.NormFloat64()
		default:
			if rng.Float64() < sigmoid(z) {
				y[i] = 1
			}
		}
	}
	return x, y, w, b
}

// TestSyntheticAgainstTheGeneratingModel: one pass over 200 000 rows (60 000
// under the race detector), on one
// worker and on two, gives test accuracy and log loss (binary) or mean
// squared error (regression) within 1% of the generating model's own.
func TestSyntheticAgainstTheGeneratingModel(t *testing.T) {
	const d = 20
	rows := 200_000
	if raceEnabled {
		rows = 60_000
	}
	for _, pred := range []Predictor{Binary, Regressor} {
		x, y, w, b := synthetic(pred, rows, d, 1)
		xte, yte, _, _ := synthetic(pred, 20_000, d, 2)
		// the generating model's figures on the test rows
		var trueLoss, trueAcc float64
		p := make([]float64, 1)
		for i := range yte {
			z := b + dot(w, xte[i*d:(i+1)*d])
			if pred == Binary {
				p[0] = sigmoid(z)
			} else {
				p[0] = z
			}
			trueLoss += lossOf(pred, p, yte[i]) / float64(len(yte))
			if (p[0] >= 0.5) == (yte[i] == 1) {
				trueAcc += 1 / float64(len(yte))
			}
		}
		for _, workers := range []int{1, 2} {
			l, err := New(Config{Predictor: pred, Features: d})
			if err != nil {
				t.Fatal(err)
			}
			m, _, err := elastic.Local(context.Background(), l, elastic.Shards(x, y, d, workers, 64))
			if err != nil {
				t.Fatal(err)
			}
			sm, err := l.Save(m)
			if err != nil {
				t.Fatal(err)
			}
			lm, err := Load(sm)
			if err != nil {
				t.Fatal(err)
			}
			var loss, acc float64
			for i := range yte {
				s := lm.Scores(xte[i*d : (i+1)*d])
				loss += lossOf(pred, s, yte[i]) / float64(len(yte))
				if (s[0] >= 0.5) == (yte[i] == 1) {
					acc += 1 / float64(len(yte))
				}
			}
			t.Logf("%s, %d workers: loss %.5f (generating model %.5f), accuracy %.4f (%.4f); chose lr %v l2 %v",
				pred, workers, loss, trueLoss, acc, trueAcc, sm.Params["learning_rate"], sm.Params["l2"])
			if loss > trueLoss*1.01 {
				t.Errorf("%s, %d workers: loss %.5f; the generating model's %.5f; want within 1%%", pred, workers, loss, trueLoss)
			}
			if pred == Binary && acc < trueAcc-0.01 {
				t.Errorf("%s, %d workers: accuracy %.4f; the generating model's %.4f; want within 1%%", pred, workers, acc, trueAcc)
			}
		}
	}
}

// TestSeparateValidationSourceAndFile: with a separate validation source
// nothing is held out, every model of the grid is scored, and the model
// saved to a file predicts as before.
func TestSeparateValidationSourceAndFile(t *testing.T) {
	const d = 8
	x, y, _, _ := synthetic(Binary, 20_000, d, 3)
	xv, yv, _, _ := synthetic(Binary, 2_000, d, 4)
	l, err := New(Config{Predictor: Binary, Features: d, LearningRates: []float64{1, 0.01}, L2: []float64{0, 0.1},
		Validation: &elastic.SliceSource{X: xv, Y: yv, Cols: d, BatchRows: 100}})
	if err != nil {
		t.Fatal(err)
	}
	m, st, err := elastic.Local(context.Background(), l, elastic.Shards(x, y, d, 1, 100))
	if err != nil {
		t.Fatal(err)
	}
	if got := m["params"][4]; got != 20_000 {
		t.Errorf("trained on %v rows; want all 20000 (nothing held out)", got)
	}
	if got := st.Pushes(); got != 1+200 {
		t.Errorf("%d pushes; want one per batch and one to initialize", got)
	}
	vl := m["validation_losses"]
	if len(vl) != 4 || vl[0] == vl[3] {
		t.Errorf("validation losses %v; want 4 different", vl)
	}
	sm, err := l.Save(m)
	if err != nil {
		t.Fatal(err)
	}
	if sm.Params["learning_rate"] != l.Models()[int(sm.Params["model"])].LearningRate {
		t.Errorf("params %v disagree with the grid %v", sm.Params, l.Models())
	}
	p := filepath.Join(t.TempDir(), "model.json")
	if err := elastic.SaveModelFile(p, sm); err != nil {
		t.Fatal(err)
	}
	sm2, err := elastic.LoadModelFile(p)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := Predict(sm, xv)
	b, err := Predict(sm2, xv)
	if err != nil {
		t.Fatal(err)
	}
	if acc := accuracy(a, yv); acc < 0.75 || accuracy(b, yv) != acc {
		t.Errorf("accuracy %v before saving, %v after", acc, accuracy(b, yv))
	}
	sm2.Algorithm = "kmeans"
	if _, err := Load(sm2); err == nil {
		t.Error("a kmeans model loaded as a linear learner")
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{Predictor: Binary},
		{Predictor: "svm", Features: 2},
		{Predictor: Multiclass, Features: 2, Classes: 1},
		{Predictor: Binary, Features: 2, LearningRates: []float64{-1}},
		{Predictor: Binary, Features: 2, L2: []float64{math.NaN()}},
		{Predictor: Binary, Features: 2, ValidationFraction: 1},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
	l, _ := New(Config{Predictor: Binary, Features: 2})
	st := elastic.NewMemState(1)
	ctx := context.Background()
	if err := l.Update(ctx, st, &elastic.Batch{X: []float64{1, 2}, Cols: 2, Y: []float64{1}}); err == nil {
		t.Error("an update before initialize was accepted")
	}
	if err := l.Initialize(ctx, st); err != nil {
		t.Fatal(err)
	}
	if err := l.Update(ctx, st, &elastic.Batch{X: []float64{1, 2, 3}, Cols: 3, Y: []float64{1}}); err == nil {
		t.Error("a batch of 3 columns was accepted by a learner of 2")
	}
	if err := l.Update(ctx, st, &elastic.Batch{X: []float64{1, 2}, Cols: 2}); err == nil {
		t.Error("a batch without labels was accepted")
	}
}

// BenchmarkUpdateBinaryGrid: one mini-batch of 1000 rows of 64 features
// through the default grid of 16 binary models (ns/op / 1000 = per row).
func BenchmarkUpdateBinaryGrid(b *testing.B) {
	const d = 64
	x, y, _, _ := synthetic(Binary, 1000, d, 5)
	l, err := New(Config{Predictor: Binary, Features: d})
	if err != nil {
		b.Fatal(err)
	}
	st := elastic.NewMemState(1)
	ctx := context.Background()
	if err := l.Initialize(ctx, st); err != nil {
		b.Fatal(err)
	}
	batch := &elastic.Batch{X: x, Y: y, Cols: d}
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Update(ctx, st, batch); err != nil {
			b.Fatal(err)
		}
	}
}

// TestHoldOutIsAFunctionOfTheRow: the validation rows are the same whatever
// the batch they come in, about ValidationFraction of them.
func TestHoldOutIsAFunctionOfTheRow(t *testing.T) {
	l, err := New(Config{Predictor: Binary, Features: 4, ValidationFraction: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	x, y, _, _ := synthetic(Binary, 50_000, 4, 6)
	held := 0
	for i := range y {
		r := append([]float64(nil), x[i*4:(i+1)*4]...)
		h := l.heldOut(r, y[i])
		if h != l.heldOut(x[i*4:(i+1)*4], y[i]) {
			t.Fatal("the hold-out depends on more than the row")
		}
		if h {
			held++
		}
	}
	if f := float64(held) / float64(len(y)); math.Abs(f-0.2) > 0.01 {
		t.Errorf("held out %.3f of the rows; want 0.2", f)
	}
}

// TestDigitsOnePassMatchesSGDClassifier: one pass over the training digits
// as a stream (mini-batches of 16 in the file's order, on one worker and on
// two), the default grid, is within 1% accuracy of scikit-learn's
// SGDClassifier trained the same way (partial_fit on the same mini-batches,
// after a scaler fitted on all the training rows, which a stream does not
// have).
func TestDigitsOnePassMatchesSGDClassifier(t *testing.T) {
	x, y := readDigits(t)
	var xtr, ytr, xte, yte []float64
	for i := range y {
		if i%5 == 4 {
			xte, yte = append(xte, x[i*64:(i+1)*64]...), append(yte, y[i])
		} else {
			xtr, ytr = append(xtr, x[i*64:(i+1)*64]...), append(ytr, y[i])
		}
	}
	want := sklearnDigits(t)["sgd_one_pass"]
	for _, workers := range []int{1, 2} {
		l, err := New(Config{Predictor: Multiclass, Features: 64, Classes: 10})
		if err != nil {
			t.Fatal(err)
		}
		m, _, err := elastic.Local(context.Background(), l, elastic.Shards(xtr, ytr, 64, workers, 16))
		if err != nil {
			t.Fatal(err)
		}
		sm, err := l.Save(m)
		if err != nil {
			t.Fatal(err)
		}
		pred, err := Predict(sm, xte)
		if err != nil {
			t.Fatal(err)
		}
		acc := accuracy(pred, yte)
		t.Logf("one pass, %d workers: accuracy %.4f (lr %v l2 %v); SGDClassifier one pass %.4f", workers, acc, sm.Params["learning_rate"], sm.Params["l2"], want)
		if acc < want-0.01 {
			t.Errorf("one pass, %d workers: accuracy %.4f; SGDClassifier %.4f; want within 1%%", workers, acc, want)
		}
	}
}
