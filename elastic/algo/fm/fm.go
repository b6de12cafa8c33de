// Package fm is Virga's factorization machine in the streaming model of
// package elastic, after Amazon SageMaker's factorization-machines
// algorithm: a binary classifier (logistic loss) or a regressor (squared
// loss) over
//
//	z(x) = w0 + Σ_i w_i x_i + Σ_{i<j} <v_i, v_j> x_i x_j
//
// with one factor vector v_i of Config.Factors numbers per feature (Rendle,
// "Factorization Machines", ICDM 2010). It owns the training arithmetic, the
// layout of its one state tensor and its saved model; it never reads input
// itself (the runtime hands it batches) and never keeps anything between
// batches outside the shared state, so any worker may take any batch.
//
// # Arithmetic
//
// The pairwise term is computed in O(K·nnz) per row, nnz the row's non-zero
// features, with the identity
//
//	Σ_{i<j} <v_i, v_j> x_i x_j = ½ Σ_f [(Σ_i v_if x_i)² - Σ_i v_if² x_i²]
//
// and its gradient ∂z/∂v_if = x_i (Σ_j v_jf x_j - v_if x_i). Zero features
// are skipped: a batch is dense, but its rows are scanned eight zeros at a
// time, and the arithmetic of sparse rows (libsvm input, one-hot encodings)
// is that of their non-zeros. For the regressor the loss is ½(z-y)², for the
// binary classifier the log loss of sigmoid(z) against y > 0.5.
//
// # State and workers
//
// Everything lives in one tensor of the shared elastic.State, key "fm": the
// rows trained, the sum of the progressive loss (each row's loss at the
// weights it was trained from), w0, w, v and the optimizer's squared
// gradient sums. Update pulls it once at the start, computes the gradient of
// the mini-batch at the pulled weights and pushes one delta (asynchronous
// SGD against a parameter server, as package linear). A mini-batch costs
// one pull and one push of 8·(4+2·(1+D+D·K)) bytes each.
//
// # Optimizer
//
// The default optimizer is AdaGrad: the step of parameter θ is
// LearningRate·g/sqrt(G), g its mini-batch gradient and G the sum of the
// squares of its gradients so far, this batch's included; the squares are
// pushed with the step (they add, so workers need not agree on an order).
// It is the default because one rate suits more inputs. On the tests'
// synthetic machines, one pass of 200 000 rows with AdaGrad at its default
// rate 0.05 ends within 1.5% of the generating model's loss on dense-ish rows
// (20 features, 30% non-zero) for both predictors and on sparse binary rows
// (120 features, 5% non-zero), while plain SGD's best rate moves tenfold
// between them (0.1 to 0.2 for the dense regressor, 0.5 for the dense
// classifier, 2 for the sparse one, where rate 0.2 ends 36% off): the
// factors of features that rarely meet grow from their small start only
// with large steps, which AdaGrad gives rare parameters by itself. It is
// not better everywhere: on sparse regression rows SGD at its best rate
// ended 2% off the generating model, AdaGrad 6%. Optimizer SGD is plain
// mini-batch SGD with the step LearningRate/sqrt(1+n/DecayRows), n the rows
// trained by all workers, as in package linear.
//
// Unlike package linear, an FM trains one model, not a grid of rates: a
// grid would multiply the arithmetic, which is the cost of a row here, and
// tuning the rate is what a Virga experiment over the trial's
// hyperparameters is for.
//
// # Regularisation
//
// L2W and L2V are the L2 penalties of w and v (w0 is not regularised). A
// feature is regularised by the rows it occurs in: the gradient
// of a row adds L2W·w_i and L2V·v_i for each of its non-zero features i
// only, so on sparse data a rare feature is not shrunk by the rows that do
// not have it (on dense data this is the usual L2).
//
// # Initialisation, checkpoints, incremental training
//
// Initialize pushes w0 = w = 0 and v drawn from N(0, InitSD²) by a
// generator seeded with Config.Seed, so the run starts from the same point
// whatever the number of workers. It runs once per job; over a state that
// already holds the tensor (a restored checkpoint, or a finished model's
// state for incremental training) it does nothing, so training continues
// from it. Since the whole machine is the one tensor under Key, a snapshot
// of the state is a checkpoint.
//
// # Features
//
// Features are used as they come: no standardisation. FM inputs are
// usually sparse or binary (one-hot categories, counts), where
// standardising would turn the zeros into non-zeros and cost the sparsity.
// Dense features of very different scales should be scaled by the caller.
package fm

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"

	"github.com/virga-ml/virga/elastic"
)

// Predictor is the kind of model.
type Predictor string

const (
	// Regressor predicts a value with squared loss.
	Regressor Predictor = "regressor"
	// Binary predicts the probability of label 1 with logistic loss (a
	// label > 0.5 is 1, any other 0: labels 0/1 and -1/+1 both work).
	Binary Predictor = "binary_classifier"
)

// Optimizer is the update rule.
type Optimizer string

const (
	// AdaGrad scales each parameter's step by its squared gradient sums
	// (the default).
	AdaGrad Optimizer = "adagrad"
	// SGD is mini-batch SGD with a step decaying in the rows trained.
	SGD Optimizer = "sgd"
)

// Algorithm is the name models are saved under.
const Algorithm = "factorization-machines"

// Key is the state key of the machine's one tensor.
const Key = "fm"

// maxStateFloats bounds the state tensor (1 GiB of float64).
const maxStateFloats = 1 << 27

// Config sets up an FM. Zero values take the defaults.
type Config struct {
	Predictor Predictor
	Features  int // D, the number of feature columns
	Factors   int // K, the dimension of the factors; default 8

	Optimizer    Optimizer // default AdaGrad
	LearningRate float64   // default 0.05 (AdaGrad), 0.2 (SGD)
	DecayRows    float64   // SGD's step decay; default 5000

	L2W float64 // L2 penalty of the linear weights w; default 0
	L2V float64 // L2 penalty of the factors v; default 0

	InitSD float64 // standard deviation of the initial factors; default 0.01
	Seed   uint64  // seed of the initial factors
}

// FM is the factorization machine, an elastic.Algorithm. Its methods are
// safe for concurrent use by many workers.
type FM struct {
	cfg  Config
	d, k int
	// layout of the state tensor: [rows trained, loss sum, inits, unused],
	// then the parameters w0, w (D), v (D×K), then their squared gradient
	// sums in the same order (AdaGrad).
	offW0, offW, offV, offG, size int
	pool                          sync.Pool
}

var _ elastic.Algorithm = (*FM)(nil)

// Header slots of the state tensor.
const (
	hRows  = 0 // rows trained, by all workers
	hLoss  = 1 // sum of the progressive losses of those rows
	hInits = 2 // number of Initialize pushes (must be 1)
	header = 4
)

// adagradEps keeps AdaGrad's first step finite.
const adagradEps = 1e-10

// New checks cfg, fills in the defaults and returns an FM.
func New(cfg Config) (*FM, error) {
	switch cfg.Predictor {
	case Regressor, Binary:
	case "":
		return nil, fmt.Errorf("fm: Predictor is empty; want %q or %q", Binary, Regressor)
	default:
		return nil, fmt.Errorf("fm: unknown predictor %q; want %q or %q", cfg.Predictor, Binary, Regressor)
	}
	if cfg.Features <= 0 {
		return nil, fmt.Errorf("fm: Features = %d; want the number of feature columns (> 0)", cfg.Features)
	}
	if cfg.Factors == 0 {
		cfg.Factors = 8
	}
	if cfg.Factors < 0 {
		return nil, fmt.Errorf("fm: Factors = %d; want the dimension of the factors (> 0, default 8)", cfg.Factors)
	}
	if per := 2 * (1 + cfg.Factors); cfg.Features > (maxStateFloats-header)/per {
		return nil, fmt.Errorf("fm: %d features × %d factors need a state of more than %d numbers; want fewer features or factors", cfg.Features, cfg.Factors, maxStateFloats)
	}
	switch cfg.Optimizer {
	case "":
		cfg.Optimizer = AdaGrad
	case AdaGrad, SGD:
	default:
		return nil, fmt.Errorf("fm: unknown optimizer %q; want %q or %q", cfg.Optimizer, AdaGrad, SGD)
	}
	if cfg.LearningRate == 0 {
		cfg.LearningRate = 0.05
		if cfg.Optimizer == SGD {
			cfg.LearningRate = 0.2
		}
	}
	if !(cfg.LearningRate > 0) || math.IsInf(cfg.LearningRate, 0) {
		return nil, fmt.Errorf("fm: LearningRate = %v; want a positive number", cfg.LearningRate)
	}
	if cfg.DecayRows == 0 {
		cfg.DecayRows = 5000
	}
	if !(cfg.DecayRows > 0) || math.IsInf(cfg.DecayRows, 0) {
		return nil, fmt.Errorf("fm: DecayRows = %v; want a positive number of rows", cfg.DecayRows)
	}
	if !(cfg.L2W >= 0) || math.IsInf(cfg.L2W, 0) {
		return nil, fmt.Errorf("fm: L2W = %v; want 0 (none) or a positive penalty", cfg.L2W)
	}
	if !(cfg.L2V >= 0) || math.IsInf(cfg.L2V, 0) {
		return nil, fmt.Errorf("fm: L2V = %v; want 0 (none) or a positive penalty", cfg.L2V)
	}
	if cfg.InitSD == 0 {
		cfg.InitSD = 0.01
	}
	if !(cfg.InitSD > 0) || math.IsInf(cfg.InitSD, 0) {
		return nil, fmt.Errorf("fm: InitSD = %v; want a positive standard deviation (default 0.01)", cfg.InitSD)
	}
	f := &FM{cfg: cfg, d: cfg.Features, k: cfg.Factors}
	params := 1 + f.d + f.d*f.k
	f.offW0 = header
	f.offW = f.offW0 + 1
	f.offV = f.offW + f.d
	f.offG = f.offW0 + params
	f.size = f.offG + params
	return f, nil
}

// Config returns the configuration with its defaults filled in.
func (f *FM) Config() Config { return f.cfg }

// StateFloats is the length of the state tensor (what one pull or one push
// moves, in float64s).
func (f *FM) StateFloats() int { return f.size }

// Initialize implements elastic.Algorithm: w0 = w = 0 and v from N(0,
// InitSD²) seeded by Config.Seed. Over a state that already holds the
// machine (a restored checkpoint or a base model) it does nothing; a state
// holding another configuration's tensor is an error.
func (f *FM) Initialize(ctx context.Context, s elastic.State) error {
	t, err := s.Pull(ctx, Key)
	if err != nil {
		return err
	}
	if t != nil {
		if len(t) != f.size {
			return fmt.Errorf("fm: the state holds %d numbers under %q; %d features × %d factors want %d (a state of another configuration)", len(t), Key, f.d, f.k, f.size)
		}
		return nil
	}
	t = make(elastic.Tensor, f.size)
	t[hInits] = 1
	rng := rand.New(rand.NewPCG(f.cfg.Seed, 0x666d)) // "fm"
	for i := range f.d * f.k {
		t[f.offV+i] = f.cfg.InitSD * rng.NormFloat64()
	}
	return s.Push(ctx, Key, t)
}

type scratch struct {
	delta   elastic.Tensor
	sum     []float64 // Σ_i v_if x_i of the row
	idx     []int     // the row's non-zero features
	count   []int32   // rows of the batch in which each feature is non-zero
	touched []int     // features with count > 0
}

func (f *FM) scratch() *scratch {
	if s, ok := f.pool.Get().(*scratch); ok {
		clear(s.delta)
		return s
	}
	return &scratch{delta: make(elastic.Tensor, f.size), sum: make([]float64, f.k), idx: make([]int, 0, f.d), count: make([]int32, f.d)}
}

// pull reads the state tensor and checks it.
func (f *FM) pull(ctx context.Context, s elastic.State) (elastic.Tensor, error) {
	t, err := s.Pull(ctx, Key)
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, fmt.Errorf("fm: no %q tensor in the state; Initialize must run before the first batch", Key)
	}
	if len(t) != f.size {
		return nil, fmt.Errorf("fm: the state holds %d numbers under %q; %d features × %d factors want %d (a state of another configuration)", len(t), Key, f.d, f.k, f.size)
	}
	if t[hInits] != 1 {
		return nil, fmt.Errorf("fm: the state was initialized %v times; want once (Initialize pushed over itself)", t[hInits])
	}
	return t, nil
}

// Update implements elastic.Algorithm.
func (f *FM) Update(ctx context.Context, s elastic.State, b *elastic.Batch) error {
	rows := b.Rows()
	if rows == 0 {
		return nil
	}
	if b.Cols != f.d {
		return fmt.Errorf("fm: a batch of %d feature columns; the machine has %d (Config.Features)", b.Cols, f.d)
	}
	if len(b.Y) != rows {
		return fmt.Errorf("fm: batch of %d rows has %d labels; want one label per row", rows, len(b.Y))
	}
	t, err := f.pull(ctx, s)
	if err != nil {
		return err
	}
	sc := f.scratch()
	defer f.pool.Put(sc)
	d, k, delta := f.d, f.k, sc.delta
	w, v := t[f.offW:f.offV], t[f.offV:f.offG]
	gw, gv := delta[f.offW:f.offV], delta[f.offV:f.offG]
	sum := sc.sum
	touched := sc.touched[:0]

	// 1. Row by row: the score at the pulled weights, the loss, and the
	// loss gradient added into the delta (non-zero features only).
	var lossSum, gw0 float64
	for i := range rows {
		x := b.Row(i)
		idx := nonZeros(x, sc.idx[:0])
		sc.idx = idx
		z := score(t[f.offW0], w, v, k, x, idx, sum)
		if math.IsNaN(z) || math.IsInf(z, 0) {
			return fmt.Errorf("fm: the model diverged (score %v after %v rows); want a lower LearningRate (now %v) or scaled features", z, t[hRows], f.cfg.LearningRate)
		}
		if yi := b.Y[i]; math.IsNaN(yi) || math.IsInf(yi, 0) {
			return fmt.Errorf("fm: the label of row %d of the batch is %v; want a finite number", i, yi)
		}
		l, e := lossGrad(f.cfg.Predictor, z, b.Y[i])
		lossSum += l
		gw0 += e
		for _, j := range idx {
			if sc.count[j] == 0 {
				touched = append(touched, j)
			}
			sc.count[j]++
			xj := x[j]
			ex := e * xj
			gw[j] += ex
			vj := v[j*k : (j+1)*k]
			gvj, sj := gv[j*k : (j+1)*k][:len(vj)], sum[:len(vj)] // one bounds check
			for c, vc := range vj {
				gvj[c] += ex * (sj[c] - vc*xj)
			}
		}
	}
	sc.touched = touched

	// 2. The mean gradient plus the L2 of the features the batch has, then
	// the step (the AdaGrad sums of the same parameters grow by g²).
	n := t[hRows]
	delta[hRows] = float64(rows)
	delta[hLoss] = lossSum
	inv := 1 / float64(rows)
	adagrad := f.cfg.Optimizer == AdaGrad
	lr := f.cfg.LearningRate
	if !adagrad {
		lr /= math.Sqrt(1 + n/f.cfg.DecayRows)
	}
	g := t[f.offG:f.size]
	gg := delta[f.offG:f.size]
	// step turns gradient gr of parameter p (index into the parameters)
	// into its delta.
	step := func(p int, gr float64) float64 {
		if !adagrad {
			return -lr * gr
		}
		gsq := gr * gr
		gg[p] = gsq
		return -lr * gr / math.Sqrt(g[p]+gsq+adagradEps)
	}
	delta[f.offW0] = step(0, gw0*inv)
	for _, j := range touched {
		c := float64(sc.count[j]) * inv
		sc.count[j] = 0
		gw[j] = step(1+j, gw[j]*inv+f.cfg.L2W*c*w[j])
		vj, gvj := v[j*k:(j+1)*k], gv[j*k:(j+1)*k]
		for q := range k {
			gvj[q] = step(1+d+j*k+q, gvj[q]*inv+f.cfg.L2V*c*vj[q])
		}
	}
	return s.Push(ctx, Key, delta)
}

// nonZeros appends the indices of x's non-zero elements to idx. It skips
// runs of eight zeros with one test of their bits (a negative zero is kept,
// which adds nothing to a score), which makes wide sparse rows cheap.
func nonZeros(x []float64, idx []int) []int {
	j := 0
	for ; j+8 <= len(x); j += 8 {
		r := x[j : j+8 : j+8]
		if math.Float64bits(r[0])|math.Float64bits(r[1])|math.Float64bits(r[2])|math.Float64bits(r[3])|
			math.Float64bits(r[4])|math.Float64bits(r[5])|math.Float64bits(r[6])|math.Float64bits(r[7]) == 0 {
			continue
		}
		for q, v := range r {
			if v != 0 {
				idx = append(idx, j+q)
			}
		}
	}
	for ; j < len(x); j++ {
		if x[j] != 0 {
			idx = append(idx, j)
		}
	}
	return idx
}

// score is z(x) for the parameters w0, w (D) and v (D×k), over the
// non-zero features idx of x; it leaves Σ_i v_if x_i in sum.
func score(w0 float64, w, v []float64, k int, x []float64, idx []int, sum []float64) float64 {
	clear(sum)
	z := w0
	var sq float64
	for _, j := range idx {
		xj := x[j]
		z += w[j] * xj
		vj := v[j*k : (j+1)*k]
		sj := sum[:len(vj)] // one bounds check
		for c, vc := range vj {
			a := vc * xj
			sj[c] += a
			sq += a * a
		}
	}
	var s2 float64
	for _, s := range sum {
		s2 += s * s
	}
	return z + 0.5*(s2-sq)
}

func sigmoid(z float64) float64 {
	if z >= 0 {
		return 1 / (1 + math.Exp(-z))
	}
	e := math.Exp(z)
	return e / (1 + e)
}

// logLoss is the log loss of score z against label y (1 if y > 0.5),
// computed without forming the probability (no log of 0).
func logLoss(z, y float64) float64 {
	if y <= 0.5 {
		z = -z
	}
	// -log sigmoid(z) = log(1 + e^-z)
	if z > 0 {
		return math.Log1p(math.Exp(-z))
	}
	return -z + math.Log1p(math.Exp(z))
}

// lossGrad is the loss of score z against label y and its derivative in z.
func lossGrad(pred Predictor, z, y float64) (loss, dz float64) {
	if pred == Regressor {
		e := z - y
		return 0.5 * e * e, e
	}
	t := 0.0
	if y > 0.5 {
		t = 1
	}
	return logLoss(z, y), sigmoid(z) - t
}

// Finalize implements elastic.Algorithm. The returned elastic.Model holds
// "w0" (1), "w" (D), "v" (D×K, row-major) and "params": [rows trained,
// mean progressive loss (½ squared error or log loss; 0 before any row)].
func (f *FM) Finalize(ctx context.Context, s elastic.State) (elastic.Model, error) {
	t, err := f.pull(ctx, s)
	if err != nil {
		return nil, err
	}
	prog := 0.0
	if t[hRows] > 0 {
		prog = t[hLoss] / t[hRows]
	}
	return elastic.Model{
		"w0":     {t[f.offW0]},
		"w":      append(elastic.Tensor(nil), t[f.offW:f.offV]...),
		"v":      append(elastic.Tensor(nil), t[f.offV:f.offG]...),
		"params": {t[hRows], prog},
	}, nil
}

// Save turns what Finalize returned into the saved form: algorithm
// "factorization-machines", tensors w0 [1], w [D], v [D, K], params
// (features, factors, learning_rate, l2_w, l2_v, init_sd, seed,
// rows_trained, progressive_loss) and meta predictor and optimizer.
func (f *FM) Save(m elastic.Model) (*elastic.SavedModel, error) {
	want := map[string]int{"w0": 1, "w": f.d, "v": f.d * f.k, "params": 2}
	for _, name := range []string{"w0", "w", "v", "params"} {
		if len(m[name]) != want[name] {
			return nil, fmt.Errorf("fm: model tensor %q of %d numbers; want %d (a model of this FM's Finalize)", name, len(m[name]), want[name])
		}
	}
	p := m["params"]
	return &elastic.SavedModel{
		Format:    elastic.ModelFormat,
		Algorithm: Algorithm,
		Params: map[string]float64{
			"features": float64(f.d), "factors": float64(f.k),
			"learning_rate": f.cfg.LearningRate, "l2_w": f.cfg.L2W, "l2_v": f.cfg.L2V,
			"init_sd": f.cfg.InitSD, "seed": float64(f.cfg.Seed),
			"rows_trained": p[0], "progressive_loss": finite(p[1]),
		},
		Tensors: map[string]elastic.SavedTensor{
			"w0": {Shape: []int{1}, Data: m["w0"]},
			"w":  {Shape: []int{f.d}, Data: m["w"]},
			"v":  {Shape: []int{f.d, f.k}, Data: m["v"]},
		},
		Meta: map[string]string{"predictor": string(f.cfg.Predictor), "optimizer": string(f.cfg.Optimizer), "factors": strconv.Itoa(f.k)},
	}, nil
}

func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return -1
	}
	return v
}

// Loaded is a SavedModel of a factorization machine, checked and ready to
// predict.
type Loaded struct {
	Predictor Predictor
	D, K      int
	w0        float64
	w, v      []float64
}

// Load checks a SavedModel of a factorization machine.
func Load(sm *elastic.SavedModel) (*Loaded, error) {
	if sm.Algorithm != Algorithm {
		return nil, fmt.Errorf("fm: a model of %q; want %q", sm.Algorithm, Algorithm)
	}
	if err := sm.Validate(); err != nil {
		return nil, err
	}
	pred := Predictor(sm.Meta["predictor"])
	if pred != Regressor && pred != Binary {
		return nil, fmt.Errorf("fm: model meta predictor %q; want %q or %q", pred, Binary, Regressor)
	}
	w0, w, v := sm.Tensors["w0"], sm.Tensors["w"], sm.Tensors["v"]
	if len(w0.Shape) != 1 || len(w.Shape) != 1 || len(v.Shape) != 2 {
		return nil, fmt.Errorf("fm: model tensors w0 %v, w %v, v %v; want w0 [1], w [D] and v [D, K]", w0.Shape, w.Shape, v.Shape)
	}
	d, k := w.Shape[0], v.Shape[1]
	if w0.Shape[0] != 1 || d == 0 || v.Shape[0] != d || k == 0 {
		return nil, fmt.Errorf("fm: model tensors w0 %v, w %v, v %v disagree; want w0 [1], w [D] and v [D, K] with D, K > 0", w0.Shape, w.Shape, v.Shape)
	}
	return &Loaded{Predictor: pred, D: d, K: k, w0: w0.Data[0], w: w.Data, v: v.Data}, nil
}

// Score returns z(x) for one row x of D features (the raw score: the
// prediction of a Regressor, the log-odds of a Binary classifier).
func (lm *Loaded) Score(x []float64) float64 {
	x = x[:lm.D]
	idx := nonZeros(x, make([]int, 0, lm.D))
	return score(lm.w0, lm.w, lm.v, lm.K, x, idx, make([]float64, lm.K))
}

// Scores returns the outputs for one row x of D features: [prediction]
// (Regressor) or [probability of 1] (Binary).
func (lm *Loaded) Scores(x []float64) []float64 {
	z := lm.Score(x)
	if lm.Predictor == Binary {
		z = sigmoid(z)
	}
	return []float64{z}
}

// Predict returns one prediction per row of X (row-major, D columns): the
// value (Regressor) or 0 or 1 (Binary).
func (lm *Loaded) Predict(X []float64) ([]float64, error) {
	pred, _, err := lm.predict(X, false)
	return pred, err
}

// PredictScores is Predict that also returns every row's Scores: the
// prediction of a Regressor, the probability of 1 of a Binary classifier.
func (lm *Loaded) PredictScores(X []float64) (pred, scores []float64, err error) {
	return lm.predict(X, true)
}

func (lm *Loaded) predict(X []float64, keep bool) (out, all []float64, err error) {
	if len(X)%lm.D != 0 {
		return nil, nil, fmt.Errorf("fm: %d numbers are not rows of %d features", len(X), lm.D)
	}
	out = make([]float64, len(X)/lm.D)
	if keep {
		all = make([]float64, len(out))
	}
	idx := make([]int, 0, lm.D)
	sum := make([]float64, lm.K)
	for i := range out {
		x := X[i*lm.D : (i+1)*lm.D]
		idx = nonZeros(x, idx[:0])
		z := score(lm.w0, lm.w, lm.v, lm.K, x, idx, sum)
		switch lm.Predictor {
		case Regressor:
			out[i] = z
			if keep {
				all[i] = z
			}
		default:
			if z >= 0 { // sigmoid(z) >= 0.5
				out[i] = 1
			}
			if keep {
				all[i] = sigmoid(z)
			}
		}
	}
	return out, all, nil
}

// Predict loads sm and predicts the rows of X (see Loaded.Predict).
func Predict(sm *elastic.SavedModel, X []float64) ([]float64, error) {
	lm, err := Load(sm)
	if err != nil {
		return nil, err
	}
	return lm.Predict(X)
}
