package search

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/virga-ml/virga/internal/spec"
)

// This file is the tpe sampler: the tree-structured Parzen estimator of
// Bergstra et al. (2011), shaped after Optuna 3.1's TPESampler so that the
// two can be compared trial for trial. The observed trials are ranked and
// split into a good group and a bad group; each group becomes a mixture of
// kernels, one per trial plus a broad prior, l(x) for the good and g(x) for
// the bad; candidates are drawn from l and the one with the highest
// l(x)/g(x) is proposed.
//
// Each dimension is modelled in a space of its own:
//   - float: the value, or its logarithm when log is true; truncated normal
//     kernels on [min, max];
//   - int: the same on [lo-0.5, hi+0.5] (its logarithm when log is true), and
//     a kernel's probability of integer k is its mass on k's rounding interval,
//     so that the model is a distribution over the integers;
//   - categorical: each trial's kernel puts weight 1 on its category plus
//     prior_weight/(n+1) on every category; the prior's is uniform;
//   - const, and ranges holding one value: fixed, never drawn.
//
// As in Optuna: kernel bandwidths are the larger distance to the sorted
// neighbours (the outermost kernels look inward only), clipped to
// [range/min(100, n+2), range] ("magic clip"); the prior is a normal at the
// middle of the range as wide as the range, with weight prior_weight; trials
// older than the newest 25 of a group weigh linearly less (1/n up to 1); the
// good group is the best min(ceil(0.1·n), 25) trials. Multivariate mode
// models the dimensions jointly: one kernel per trial over all dimensions,
// bandwidth 0.2·n^(-1/(d+4))·range (Scott's rule, as in BOHB).
//
// Where this departs from Optuna 3.1, it does as later Optuna does:
//   - Optuna 3.1 scores a float kernel without its 1/sigma factor: its
//     truncated normal's logpdf drops log(scale) (fixed in Optuna 3.5,
//     optuna/optuna#5109), so a kernel counts in proportion to its width.
//     Multivariate scoring here uses the true densities; with 3.1's, the
//     prior counts (range/bandwidth)^d times too much, and it found worse
//     values on five of seven test functions. Univariate scoring keeps
//     3.1's on purpose: on five of seven test functions it found better
//     values than the true densities (twice better on a 4-D sphere).
//   - Optuna 3.1 scores a log-scale int by the density at log(k); this
//     scores it by the mass of k's interval [log(k-0.5), log(k+0.5)], as it
//     does linear ints (as Optuna does since optuna/optuna#6258): the
//     probability of drawing k, as the random sampler draws it.

// Defaults of the tpe sampler's settings (Optuna's).
const (
	defaultTPEStartup     = 10
	defaultTPECandidates  = 24
	defaultTPEPriorWeight = 1.0
	// maxTPECandidates bounds the work of one suggestion.
	maxTPECandidates = 100000
)

// Constants of the Parzen estimators.
const (
	// tpeMaxGood caps the good group under the default gamma rule.
	tpeMaxGood = 25
	// tpeFlatWeights is how many of a group's newest trials weigh fully.
	tpeFlatWeights = 25
	// tpeMagicClipMax caps the divisor of the magic clip's least bandwidth.
	tpeMagicClipMax = 100
	// tpeScott is Optuna's SIGMA0_MAGNITUDE, the multivariate bandwidth factor.
	tpeScott = 0.2
	// tpeFar is how many bandwidths from both bounds a kernel's truncation
	// stops mattering: Φ(-8.5) < 1e-17.
	tpeFar = 8.5
	// tpeMaxMemo bounds the ints per dimension for which a joint mixture
	// caches kernel terms.
	tpeMaxMemo = 1 << 14
	// tpeCutoff is the log-ratio below the largest term under which a
	// mixture component is left out of a log-sum-exp: e^-40 ≈ 4e-18, so
	// even 100,000 left-out components change the sum by less than 1e-12.
	tpeCutoff = 40
)

var logSqrt2Pi = 0.5 * math.Log(2*math.Pi)

// tpeSettings are the experiment file's settings for the tpe sampler.
type tpeSettings struct {
	// StartupTrials is how many trials are drawn at random before the model
	// is used (startup_trials, default 10).
	StartupTrials int
	// Candidates is how many candidates are drawn from l(x) per suggestion
	// (candidates, default 24).
	Candidates int
	// Multivariate models the dimensions jointly (multivariate, default false).
	Multivariate bool
	// Gamma is the fraction in (0, 1] of trials counted as good (gamma); 0
	// means Optuna's rule, min(ceil(0.1·n), 25).
	Gamma float64
	// PriorWeight is the weight of the prior kernel (prior_weight, default 1).
	PriorWeight float64
}

// defaultTPESettings returns the settings of a file that sets none.
func defaultTPESettings() tpeSettings {
	return tpeSettings{
		StartupTrials: defaultTPEStartup,
		Candidates:    defaultTPECandidates,
		PriorWeight:   defaultTPEPriorWeight,
	}
}

// check reports a setting out of range, naming it as the file does.
func (st tpeSettings) check() error {
	switch {
	case st.StartupTrials < 0:
		return fmt.Errorf("tpe setting startup_trials: must be >= 0 (got %d)", st.StartupTrials)
	case st.Candidates < 1 || st.Candidates > maxTPECandidates:
		return fmt.Errorf("tpe setting candidates: must be between 1 and %d (got %d)", maxTPECandidates, st.Candidates)
	case math.IsNaN(st.Gamma) || st.Gamma < 0 || st.Gamma > 1:
		return fmt.Errorf("tpe setting gamma: must be a fraction in (0, 1] (got %g)", st.Gamma)
	case math.IsNaN(st.PriorWeight) || math.IsInf(st.PriorWeight, 0) || st.PriorWeight <= 0:
		return fmt.Errorf("tpe setting prior_weight: must be a finite number > 0 (got %g)", st.PriorWeight)
	}
	return nil
}

// tpeSettingsFrom reads the tpe sampler's settings from a searcher's
// settings, applying the defaults for those not set. Keys it does not know
// are left alone: they belong to a stopper paired with the sampler (the
// parser has checked them). A number given as the other kind (2.0 for an
// integer, 1 for a fraction) is accepted when its value fits.
func tpeSettingsFrom(settings map[string]any) (tpeSettings, error) {
	st := defaultTPESettings()
	if v, ok := settings["startup_trials"]; ok {
		n, err := tpeIntSetting("startup_trials", v, 0, math.MaxInt32)
		if err != nil {
			return st, err
		}
		st.StartupTrials = n
	}
	if v, ok := settings["candidates"]; ok {
		n, err := tpeIntSetting("candidates", v, 1, maxTPECandidates)
		if err != nil {
			return st, err
		}
		st.Candidates = n
	}
	if v, ok := settings["multivariate"]; ok {
		b, isBool := v.(bool)
		if !isBool {
			return st, fmt.Errorf("tpe setting multivariate: expected true or false, got %s", describeSetting(v))
		}
		st.Multivariate = b
	}
	if v, ok := settings["gamma"]; ok {
		f, isNum := toFloat(v)
		if !isNum {
			return st, fmt.Errorf("tpe setting gamma: expected a number, got %s", describeSetting(v))
		}
		if math.IsNaN(f) || f <= 0 || f > 1 {
			return st, fmt.Errorf("tpe setting gamma: must be a fraction in (0, 1], the share of trials counted as good (got %g); leave it out for Optuna's rule min(ceil(0.1·n), 25)", f)
		}
		st.Gamma = f
	}
	if v, ok := settings["prior_weight"]; ok {
		f, isNum := toFloat(v)
		if !isNum {
			return st, fmt.Errorf("tpe setting prior_weight: expected a number, got %s", describeSetting(v))
		}
		if math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 {
			return st, fmt.Errorf("tpe setting prior_weight: must be a finite number > 0 (got %g); the default is %g", f, defaultTPEPriorWeight)
		}
		st.PriorWeight = f
	}
	return st, nil
}

// tpeIntSetting reads a whole-number setting within [lo, hi].
func tpeIntSetting(key string, v any, lo, hi int64) (int, error) {
	f, isNum := toFloat(v)
	if !isNum {
		return 0, fmt.Errorf("tpe setting %s: expected an integer, got %s", key, describeSetting(v))
	}
	if f != math.Trunc(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("tpe setting %s: expected an integer, got %g", key, f)
	}
	if f < float64(lo) || f > float64(hi) {
		return 0, fmt.Errorf("tpe setting %s: must be between %d and %d (got %g)", key, lo, hi, f)
	}
	return int(f), nil
}

// describeSetting names a setting value's kind for an error message.
func describeSetting(v any) string {
	switch x := v.(type) {
	case nil:
		return "an empty value"
	case string:
		return fmt.Sprintf("the string %q", x)
	case bool:
		return fmt.Sprintf("%t", x)
	case float64, int64, int:
		return fmt.Sprintf("the number %v", x)
	}
	return fmt.Sprintf("a %T", v)
}

// tpeKind is how the sampler models a dimension.
type tpeKind uint8

const (
	tpeFixed tpeKind = iota // const, or a range holding one value: never drawn
	tpeFloat                // truncated normal kernels
	tpeInt                  // truncated normal kernels, scored by the mass of the rounding interval
	tpeCat                  // categorical kernels
)

// tpeDim is one parameter as the sampler models it.
type tpeDim struct {
	p    param
	kind tpeKind
	log  bool
	// low and high bound the model space: [min, max] for a float, [lo-0.5,
	// hi+0.5] for an int, both in logarithms when log is true.
	low, high float64
	// fmin and fmax bound a float's values; ilo and ihi an int's.
	fmin, fmax float64
	ilo, ihi   int64
	ncat       int // categorical: number of values
	fixed      any // tpeFixed: the value
}

// tpe is the tpe sampler. It keeps no state between calls.
type tpe struct {
	sp    space
	st    tpeSettings
	dims  []tpeDim // in space order
	model []int    // indices into dims of the dimensions that are drawn, in space order
}

var _ sampler = (*tpe)(nil)

// newTPE returns a tpe sampler over sp. Settings out of range are an error
// naming the setting.
func newTPE(sp space, st tpeSettings) (*tpe, error) {
	if err := st.check(); err != nil {
		return nil, err
	}
	t := &tpe{sp: sp, st: st, dims: make([]tpeDim, len(sp))}
	for i, p := range sp {
		if err := p.check(); err != nil {
			return nil, err
		}
		d := tpeDim{p: p, kind: tpeFixed, log: p.hp.Log}
		hp := p.hp
		switch hp.Type {
		case spec.HPConst:
			d.fixed = hp.Value
		case spec.HPFloat:
			d.fmin, d.fmax = hp.Min, hp.Max
			if hp.Min == hp.Max {
				d.fixed = hp.Min
				break
			}
			d.kind, d.low, d.high = tpeFloat, hp.Min, hp.Max
			if hp.Log {
				d.low, d.high = math.Log(hp.Min), math.Log(hp.Max)
			}
		case spec.HPInt:
			lo, hi, _ := p.intBounds()
			d.ilo, d.ihi = lo, hi
			if lo == hi {
				d.fixed = lo
				break
			}
			d.kind, d.low, d.high = tpeInt, float64(lo)-0.5, float64(hi)+0.5
			if hp.Log {
				d.low, d.high = math.Log(float64(lo)-0.5), math.Log(float64(hi)+0.5)
			}
		case spec.HPCategorical:
			if len(hp.Values) == 1 {
				d.fixed = hp.Values[0]
				break
			}
			d.kind, d.ncat = tpeCat, len(hp.Values)
		}
		if d.kind != tpeFixed {
			t.model = append(t.model, i)
		}
		t.dims[i] = d
	}
	return t, nil
}

// next proposes a configuration given the trials so far. Before
// StartupTrials observations it draws like the random sampler; then it draws
// Candidates candidates from the good trials' model and returns the one most
// likelier under it than under the bad trials' model (per parameter, or
// jointly when Multivariate). It reads r only, in space order.
func (t *tpe) next(r *rand.Rand, hist []Observation) (map[string]any, error) {
	out := make(map[string]any, len(t.dims))
	if len(hist) < t.st.StartupTrials {
		for _, p := range t.sp {
			out[p.name] = p.sample(r)
		}
		return out, nil
	}
	for _, d := range t.dims {
		if d.kind == tpeFixed {
			out[d.p.name] = d.fixed
		}
	}
	if len(t.model) == 0 {
		return out, nil
	}

	// 1. Rank the trials and mark the good ones.
	good := tpeSplit(hist, t.nGood(len(hist)))

	// 2. Read each modelled parameter of each trial into model space.
	n := len(hist)
	ws := getTPEWork(n, t.st.Candidates, len(t.model))
	defer tpeWorkPool.Put(ws)
	obs := ws.floats(len(t.model) * n)
	for j, di := range t.model {
		d := &t.dims[di]
		col := obs[j*n : (j+1)*n]
		for i := range hist {
			col[i] = d.modelValue(hist[i].HParams[d.p.name])
		}
	}

	// 3. Fit l and g and choose among candidates drawn from l.
	if t.st.Multivariate {
		t.nextJoint(r, good, obs, ws, out)
	} else {
		for j, di := range t.model {
			t.nextOne(r, &t.dims[di], good, obs[j*n:(j+1)*n], ws, out)
		}
	}
	return out, nil
}

// nGood returns the size of the good group among n trials.
func (t *tpe) nGood(n int) int {
	if n == 0 {
		return 0
	}
	var k int
	if t.st.Gamma == 0 {
		// Optuna's default_gamma, min(ceil(0.1·n), 25); in integers, which
		// agree with its float arithmetic wherever the cap does not apply.
		k = min((n+9)/10, tpeMaxGood)
	} else {
		g := t.st.Gamma * float64(n)
		k = int(math.Ceil(g * (1 - 1e-12))) // a fraction meant exactly stays exact
	}
	return min(max(k, 1), n)
}

// tpeRank returns the indices of hist from best to worst: furthest Step
// first, then lowest Value, then earliest; trials whose Value is NaN last.
// Trials stopped early thus rank after those that went on, as Optuna ranks
// pruned trials after complete ones.
func tpeRank(hist []Observation) []int {
	idx := make([]int, len(hist))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return tpeCompare(hist, a, b) })
	return idx
}

// tpeCompare orders trials a and b of hist as tpeRank does.
func tpeCompare(hist []Observation, a, b int) int {
	va, vb := hist[a].Value, hist[b].Value
	if na, nb := math.IsNaN(va), math.IsNaN(vb); na != nb {
		if na {
			return 1
		}
		return -1
	} else if !na {
		if c := cmp.Compare(hist[b].Step, hist[a].Step); c != 0 {
			return c
		}
		if c := cmp.Compare(va, vb); c != 0 {
			return c
		}
	}
	return cmp.Compare(a, b)
}

// tpeSplit marks the nGood best trials of hist, as ranked by tpeRank.
func tpeSplit(hist []Observation, nGood int) []bool {
	good := make([]bool, len(hist))
	if nGood <= 0 {
		return good
	}
	if nGood > 64 {
		for _, i := range tpeRank(hist)[:nGood] {
			good[i] = true
		}
		return good
	}
	// A few good ones (25 at most by default): keep the best so far sorted.
	best := make([]int, 0, nGood+1)
	for i := range hist {
		if len(best) == nGood && tpeCompare(hist, i, best[nGood-1]) > 0 {
			continue
		}
		j := len(best)
		for j > 0 && tpeCompare(hist, i, best[j-1]) < 0 {
			j--
		}
		best = slices.Insert(best, j, i)
		if len(best) > nGood {
			best = best[:nGood]
		}
	}
	for _, i := range best {
		good[i] = true
	}
	return good
}

// tpeObsWeights fills w with the weights of a group's trials, oldest first:
// 1 for the newest 25 and a ramp from 1/n to 1 for older ones (Optuna's
// default_weights).
func tpeObsWeights(w []float64) {
	m := len(w)
	ramp := m - tpeFlatWeights
	for i := range w {
		switch {
		case i >= ramp:
			w[i] = 1
		case ramp == 1:
			w[i] = 1 / float64(m)
		default:
			lo := 1 / float64(m)
			w[i] = lo + float64(i)*(1-lo)/float64(ramp-1)
		}
	}
}

// modelValue returns a trial's value of the dimension in model space: the
// value (its log when log), an int rounded, a categorical's index. Values
// outside the bounds are clipped; a missing or unreadable value is NaN.
func (d *tpeDim) modelValue(v any) float64 {
	switch d.kind {
	case tpeCat:
		if i := catIndex(d.p.hp.Values, v); i >= 0 {
			return float64(i)
		}
		return math.NaN()
	case tpeFloat:
		f, ok := numericValue(v)
		if !ok {
			return math.NaN()
		}
		f = clampFloat(f, d.fmin, d.fmax)
		if d.log {
			return math.Log(f)
		}
		return f
	case tpeInt:
		f, ok := numericValue(v)
		if !ok {
			return math.NaN()
		}
		k := clampFloat(math.Round(f), float64(d.ilo), float64(d.ihi))
		if d.log {
			return math.Log(k)
		}
		return k
	}
	return math.NaN()
}

// fromModel turns a model-space coordinate of a candidate into its value in
// the candidate's representation: an int's integer, a float's model
// coordinate clipped to the bounds, a categorical's index.
func (d *tpeDim) fromModel(y float64) float64 {
	y = clampFloat(y, d.low, d.high)
	if d.kind != tpeInt {
		return y
	}
	if d.log {
		y = math.Exp(y)
	}
	return clampFloat(math.Round(y), float64(d.ilo), float64(d.ihi))
}

// external returns the parameter value of a candidate coordinate.
func (d *tpeDim) external(x float64) any {
	switch d.kind {
	case tpeCat:
		return d.p.hp.Values[int(x)]
	case tpeInt:
		return int64(x)
	case tpeFloat:
		if d.log {
			return clampFloat(math.Exp(x), d.fmin, d.fmax)
		}
		return clampFloat(x, d.fmin, d.fmax)
	}
	return d.fixed
}

// interval returns the model-space interval of integer candidate k.
func (d *tpeDim) interval(k float64) (lo, hi float64) {
	lo, hi = k-0.5, k+0.5
	if d.log {
		lo, hi = math.Log(lo), math.Log(hi)
	}
	return max(lo, d.low), min(hi, d.high)
}

// numericValue reads a number as stored in a configuration: int64 or
// float64 as Virga writes them, other Go number types, or a json.Number.
func numericValue(v any) (float64, bool) {
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case int64:
		f = float64(x)
	case int:
		f = float64(x)
	case int32:
		f = float64(x)
	case float32:
		f = float64(x)
	case uint64:
		f = float64(x)
	case json.Number:
		g, err := x.Float64()
		if err != nil {
			return 0, false
		}
		f = g
	default:
		return 0, false
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// catIndex returns the index of v among a categorical's values, or -1.
// Numbers match numbers of equal value whatever their Go type, so that a
// configuration read back from JSON (where 3 became 3.0) still matches.
func catIndex(values []any, v any) int {
	switch x := v.(type) {
	case string, bool:
		for i, c := range values {
			if c == x {
				return i
			}
		}
		return -1
	}
	f, ok := numericValue(v)
	if !ok {
		return -1
	}
	for i, c := range values {
		if g, isNum := numericValue(c); isNum && g == f {
			return i
		}
	}
	return -1
}

// tpeMix is a Parzen estimator: a weighted mixture of kernels over some
// dimensions, one kernel per trial of a group and a last one for the prior.
type tpeMix struct {
	n    int       // components
	logw []float64 // log weights, normalised
	cumw []float64 // cumulative weights, for drawing a component
	dims []tpeMixDim
	disc bool // some dimension is an int
}

// tpeMixDim is a mixture's kernels along one dimension.
type tpeMixDim struct {
	d *tpeDim
	// Numeric dimensions: per component, the kernel's centre and bandwidth,
	// 1/sigma, log of its mass within the bounds, and -log(sigma)-logZ.
	mu, sigma, inv, logZ, cc []float64
	// For drawing (the good group's mixture only): per component, the
	// normal's mass below the lower bound and above the upper one.
	pa, qb []float64
	// Int dimensions of a joint mixture, whose trial kernels share one
	// bandwidth, so that a kernel's term at a candidate depends only on its
	// integer: per component, the integer's offset from the lower bound (-1
	// for the prior); memo caches terms by offset for the candidate being
	// scored, valid where memoGen is gen.
	ik            []int32
	memo, memoGen []float64
	gen           float64
	// Categorical dimensions: per component, the trial's category (-1 for
	// the prior); a trial kernel's log-probability of its category and of
	// another; the prior's log-probability of any category.
	cat                   []int32
	logOn, logOff, logUni float64
	on, rowSum            float64 // 1 and K·v+1 of a trial's row, v = prior_weight/(n+1)
	// catLogP is, for a mixture over this one categorical dimension, its
	// log-probability of each category.
	catLogP []float64
}

// tpeWork is one call's scratch space.
type tpeWork struct {
	base, ub, lb []float64 // per component
	idx          []int     // chosen trial indices of a group
	srt, srt2    []tpeComp
	cand         []float64   // candidates × model dims
	score        []float64   // per candidate
	chunks       [][]float64 // what the mixtures' slices are cut from
	chunk        int         // the next chunk to cut from
	arena        []float64   // what is left of the current chunk
	xl, xr, lw   []float64   // a candidate's int intervals and their log-widths, by dimension
	weights      []tpeWeights
}

// tpeWeights are a group's normalised weights and their logarithms.
type tpeWeights struct{ w, logw []float64 }

// tpeComp is a kernel being sorted by its centre.
type tpeComp struct {
	key  uint64 // mu's bits, ordered as mu is
	mu   float64
	w    float64 // weight
	logw float64 // its logarithm
	i    int     // index in the group; the prior's is the group's size
}

// tpeWorkPool keeps scratch space between calls, so that a call allocates
// little. What a call computes never depends on what the space held.
var tpeWorkPool = sync.Pool{New: func() any { return new(tpeWork) }}

// getTPEWork returns scratch space for n trials, cands candidates and dims
// modelled dimensions; tpeWorkPool.Put takes it back.
func getTPEWork(n, cands, dims int) *tpeWork {
	ws := tpeWorkPool.Get().(*tpeWork)
	ws.reset(n, cands, dims)
	return ws
}

// newTPEWork returns new scratch space, as getTPEWork.
func newTPEWork(n, cands, dims int) *tpeWork {
	ws := new(tpeWork)
	ws.reset(n, cands, dims)
	return ws
}

func (ws *tpeWork) reset(n, cands, dims int) {
	if cap(ws.base) < n+1 {
		ws.base, ws.ub, ws.lb = make([]float64, n+1), make([]float64, n+1), make([]float64, n+1)
		ws.idx, ws.srt, ws.srt2 = make([]int, 0, n), make([]tpeComp, 0, n+1), make([]tpeComp, n+1)
	}
	ws.base, ws.ub, ws.lb = ws.base[:n+1], ws.ub[:n+1], ws.lb[:n+1]
	ws.srt2 = ws.srt2[:n+1]
	if cap(ws.cand) < cands*dims {
		ws.cand = make([]float64, cands*dims)
	}
	if cap(ws.score) < cands {
		ws.score = make([]float64, cands)
	}
	if cap(ws.xl) < dims {
		ws.xl, ws.xr, ws.lw = make([]float64, dims), make([]float64, dims), make([]float64, dims)
	}
	ws.xl, ws.xr, ws.lw = ws.xl[:dims], ws.xr[:dims], ws.lw[:dims]
	ws.chunk, ws.arena = 0, nil
	ws.weights = ws.weights[:0]
}

// floats returns a slice of k float64s, of any content, that lives until
// the space is reset.
func (ws *tpeWork) floats(k int) []float64 {
	if len(ws.arena) < k {
		for ws.chunk < len(ws.chunks) && len(ws.chunks[ws.chunk]) < k {
			ws.chunk++
		}
		if ws.chunk == len(ws.chunks) {
			ws.chunks = append(ws.chunks, make([]float64, max(k, 1<<15)))
		}
		ws.arena = ws.chunks[ws.chunk]
		ws.chunk++
	}
	f := ws.arena[:k:k]
	ws.arena = ws.arena[k:]
	return f
}

// group returns the chronological indices of the trials in (or out of, when
// !inGood) the good group whose values are all present in the given
// columns.
func (ws *tpeWork) group(good []bool, inGood bool, cols [][]float64) []int {
	ws.idx = ws.idx[:0]
	for i, g := range good {
		if g != inGood {
			continue
		}
		ok := true
		for _, c := range cols {
			if math.IsNaN(c[i]) {
				ok = false
				break
			}
		}
		if ok {
			ws.idx = append(ws.idx, i)
		}
	}
	return ws.idx
}

// weights returns the normalised weights of a group of m trials and the
// prior, the prior last, and their logarithms. They depend on m only, and
// are computed once per call for each m.
func (t *tpe) weights(m int, ws *tpeWork) (w, logw []float64) {
	for _, c := range ws.weights {
		if len(c.w) == m+1 {
			return c.w, c.logw
		}
	}
	w, logw = ws.floats(m+1), ws.floats(m+1)
	tpeObsWeights(w[:m])
	w[m] = t.st.PriorWeight
	var sum float64
	for _, v := range w {
		sum += v
	}
	logSum := math.Log(sum)
	for i, v := range w {
		w[i] = v / sum
		logw[i] = -logSum
		if v != 1 {
			logw[i] += math.Log(v)
		}
	}
	ws.weights = append(ws.weights, tpeWeights{w, logw})
	return w, logw
}

// newMix returns a mixture with n components of the given weights (and
// their logarithms) over ndims dimensions.
func newMix(w, logw []float64, ndims int, ws *tpeWork) *tpeMix {
	m := &tpeMix{n: len(w), logw: ws.floats(len(w)), cumw: ws.floats(len(w)), dims: make([]tpeMixDim, ndims)}
	copy(m.logw, logw)
	var c float64
	for i, v := range w {
		c += v
		m.cumw[i] = c
	}
	m.cumw[len(w)-1] = math.Inf(1) // no draw falls past the end
	return m
}

// setNumeric fills a numeric dimension's kernels from centres and
// bandwidths (the prior's last) and precomputes what scoring and, when
// sampled, drawing need. With peak, a kernel scores without its 1/sigma:
// every kernel is as high as it would be with bandwidth 1, whatever its
// width (see the top of this file).
func (md *tpeMixDim) setNumeric(mu, sigma []float64, sampled, peak bool, ws *tpeWork) {
	n := len(mu)
	md.mu, md.sigma = mu, sigma
	md.inv, md.logZ, md.cc = ws.floats(n), ws.floats(n), ws.floats(n)
	if sampled {
		md.pa, md.qb = ws.floats(n), ws.floats(n)
	}
	lastSigma, logSigma := math.NaN(), 0.0
	for i := range n {
		a, b := (md.d.low-mu[i])/sigma[i], (md.d.high-mu[i])/sigma[i]
		md.inv[i] = 1 / sigma[i]
		md.logZ[i] = 0 // the mass outside is below 1e-17
		if a > -tpeFar || b < tpeFar {
			md.logZ[i] = logGaussMass(a, b)
		}
		md.cc[i] = -md.logZ[i]
		if !peak {
			if sigma[i] != lastSigma { // bandwidths repeat: the clipped ones, the joint ones
				lastSigma, logSigma = sigma[i], math.Log(sigma[i])
			}
			md.cc[i] -= logSigma
		}
		if sampled {
			md.pa[i] = 0.5 * math.Erfc(-a/math.Sqrt2)
			md.qb[i] = 0.5 * math.Erfc(b/math.Sqrt2)
		}
	}
}

// setCategorical fills a categorical dimension's kernels from the trials'
// categories (the prior's, -1, last), m trials in all.
func (md *tpeMixDim) setCategorical(cat []int32, priorWeight float64) {
	m := len(cat) - 1
	k := float64(md.d.ncat)
	v := priorWeight / float64(m+1)
	md.cat = cat
	md.on, md.rowSum = 1, k*v+1
	md.logOn = math.Log((v + 1) / md.rowSum)
	md.logOff = math.Log(v / md.rowSum)
	md.logUni = -math.Log(k)
}

// uniMix fits the mixture over one dimension for the trials idx whose
// model values are col, as Optuna's univariate estimator does.
func (t *tpe) uniMix(d *tpeDim, col []float64, idx []int, ws *tpeWork, sampled bool) *tpeMix {
	m := len(idx)
	w, logw := t.weights(m, ws)
	if d.kind == tpeCat {
		mix := newMix(w, logw, 1, ws)
		md := &mix.dims[0]
		md.d = d
		cat := make([]int32, m+1)
		for j, i := range idx {
			cat[j] = int32(col[i])
		}
		cat[m] = -1
		md.setCategorical(cat, t.st.PriorWeight)
		// The mixture's probability of each category, for scoring in O(1).
		p := ws.floats(d.ncat)
		for j := range p {
			p[j] = w[m] / float64(d.ncat)
		}
		v := t.st.PriorWeight / float64(m+1)
		var spread float64 // every trial's v on every category
		for j := range m {
			spread += w[j] * v / md.rowSum
			p[cat[j]] += w[j] / md.rowSum
		}
		for c := range p {
			p[c] += spread
		}
		md.catLogP = p
		for c := range p {
			p[c] = math.Log(p[c])
		}
		return mix
	}

	// Sort the centres, the prior's with them, and give each kernel the
	// larger distance to its neighbours; the outermost look inward only.
	srt := ws.srt[:0]
	for j, i := range idx {
		srt = append(srt, tpeComp{mu: col[i], w: w[j], logw: logw[j], i: j})
	}
	srt = append(srt, tpeComp{mu: 0.5 * (d.low + d.high), w: w[m], logw: logw[m], i: m})
	srt = sortComps(srt, ws.srt2[:len(srt)])
	n := m + 1
	mu, sigma := ws.floats(n), ws.floats(n)
	for j, c := range srt {
		mu[j] = c.mu
	}
	span := d.high - d.low
	minSigma := span / min(tpeMagicClipMax, float64(n+1))
	for j := range n {
		left := mu[j] - d.low
		if j > 0 {
			left = mu[j] - mu[j-1]
		}
		right := d.high - mu[j]
		if j < n-1 {
			right = mu[j+1] - mu[j]
		}
		s := max(left, right)
		if n >= 2 && j == 0 {
			s = right
		} else if n >= 2 && j == n-1 {
			s = left
		}
		sigma[j] = clampFloat(s, minSigma, span)
	}
	// Kernels with the same centre and bandwidth, as repeated ints make,
	// merge into one of their summed weight: the mixture is the same.
	sw, slogw := ws.ub[:0], ws.lb[:0] // weights in sorted order
	k := 0
	for j, c := range srt {
		if c.i == m {
			sigma[j] = span // the prior
		}
		if k > 0 && mu[j] == mu[k-1] && sigma[j] == sigma[k-1] {
			sw[k-1] += c.w
			slogw[k-1] = math.NaN() // to compute
			continue
		}
		mu[k], sigma[k] = mu[j], sigma[j]
		sw, slogw = append(sw, c.w), append(slogw, c.logw)
		k++
	}
	for j, v := range slogw {
		if math.IsNaN(v) {
			slogw[j] = math.Log(sw[j])
		}
	}
	mix := newMix(sw, slogw, 1, ws)
	mix.dims[0].d = d
	mix.dims[0].setNumeric(mu[:k], sigma[:k], sampled, d.kind == tpeFloat, ws)
	mix.disc = d.kind == tpeInt
	return mix
}

// jointMix fits the mixture over all modelled dimensions for the trials
// idx, as Optuna's multivariate estimator does.
func (t *tpe) jointMix(cols [][]float64, idx []int, ws *tpeWork, sampled bool) *tpeMix {
	m := len(idx)
	w, logw := t.weights(m, ws)
	mix := newMix(w, logw, len(t.model), ws)
	n := m + 1
	sigma0 := tpeScott * math.Pow(float64(max(m, 1)), -1/float64(len(t.model)+4))
	for j, di := range t.model {
		d := &t.dims[di]
		md := &mix.dims[j]
		md.d = d
		col := cols[j]
		if d.kind == tpeCat {
			cat := make([]int32, n)
			for k, i := range idx {
				cat[k] = int32(col[i])
			}
			cat[m] = -1
			md.setCategorical(cat, t.st.PriorWeight)
			continue
		}
		if d.kind == tpeInt {
			mix.disc = true
		}
		span := d.high - d.low
		s := clampFloat(sigma0*span, span/min(tpeMagicClipMax, float64(n+1)), span)
		mu, sigma := ws.floats(n), ws.floats(n)
		for k, i := range idx {
			mu[k], sigma[k] = col[i], s
		}
		mu[m], sigma[m] = 0.5*(d.low+d.high), span
		md.setNumeric(mu, sigma, sampled, false, ws)
		if d.kind == tpeInt && d.ihi-d.ilo < tpeMaxMemo {
			size := int(d.ihi-d.ilo) + 1
			md.ik = make([]int32, n)
			for k, i := range idx {
				v := col[i]
				if d.log {
					v = math.Round(math.Exp(v))
				}
				md.ik[k] = int32(v - float64(d.ilo))
			}
			md.ik[m] = -1
			md.memo, md.memoGen = ws.floats(size), ws.floats(size)
			clear(md.memoGen)
		}
	}
	return mix
}

// nextOne chooses the value of one dimension.
func (t *tpe) nextOne(r *rand.Rand, d *tpeDim, good []bool, col []float64, ws *tpeWork, out map[string]any) {
	cols := [][]float64{col}
	l := t.uniMix(d, col, ws.group(good, true, cols), ws, true)
	g := t.uniMix(d, col, ws.group(good, false, cols), ws, false)
	x := t.choose(r, l, g, 1, ws)
	out[d.p.name] = d.external(x[0])
}

// nextJoint chooses the values of all modelled dimensions together, from
// the trials that have them all.
func (t *tpe) nextJoint(r *rand.Rand, good []bool, obs []float64, ws *tpeWork, out map[string]any) {
	n := len(good)
	cols := make([][]float64, len(t.model))
	for j := range cols {
		cols[j] = obs[j*n : (j+1)*n]
	}
	l := t.jointMix(cols, ws.group(good, true, cols), ws, true)
	g := t.jointMix(cols, ws.group(good, false, cols), ws, false)
	x := t.choose(r, l, g, len(t.model), ws)
	for j, di := range t.model {
		out[t.dims[di].p.name] = t.dims[di].external(x[j])
	}
}

// choose draws Candidates points from l and returns the one with the
// highest log l(x) - log g(x), the first on ties.
func (t *tpe) choose(r *rand.Rand, l, g *tpeMix, ndims int, ws *tpeWork) []float64 {
	nc := t.st.Candidates
	cand := ws.cand[:nc*ndims]
	for c := range nc {
		l.draw(r, cand[c*ndims:(c+1)*ndims])
	}
	best, bestScore := 0, math.Inf(-1)
	for c := range nc {
		x := cand[c*ndims : (c+1)*ndims]
		score := math.NaN()
		for p := range c { // a candidate drawn before scores the same
			if slices.Equal(cand[p*ndims:(p+1)*ndims], x) {
				score = ws.score[p]
				break
			}
		}
		if math.IsNaN(score) {
			score = l.logPDF(x, ws) - g.logPDF(x, ws)
		}
		ws.score[c] = score
		if score > bestScore {
			best, bestScore = c, score
		}
	}
	return cand[best*ndims : (best+1)*ndims]
}

// draw fills x with a point drawn from the mixture: a component, then its
// kernel along each dimension.
func (m *tpeMix) draw(r *rand.Rand, x []float64) {
	u := r.Float64()
	i, _ := slices.BinarySearch(m.cumw, u)
	i = min(i, m.n-1)
	for j := range m.dims {
		md := &m.dims[j]
		u := r.Float64()
		if md.d.kind == tpeCat {
			k := md.d.ncat
			c := int(md.cat[i])
			if c < 0 {
				x[j] = float64(min(int(u*float64(k)), k-1))
				continue
			}
			// A trial's row: on + v for its category, v for the others.
			s := u * md.rowSum
			if s >= md.on {
				v := (md.rowSum - md.on) / float64(k)
				c = min(int((s-md.on)/v), k-1)
			}
			x[j] = float64(c)
			continue
		}
		// Inverse CDF of the truncated normal, from whichever tail is
		// nearer so that neither loses precision.
		pa, qb := md.pa[i], md.qb[i]
		mass := 1 - pa - qb
		t := u * mass
		var z float64
		if t < 0.5-pa {
			z = -math.Sqrt2 * math.Erfcinv(2*(pa+t))
		} else {
			z = math.Sqrt2 * math.Erfcinv(2*(qb+mass-t))
		}
		x[j] = md.d.fromModel(md.mu[i] + md.sigma[i]*z)
	}
}

// logPDF returns the mixture's log-density at x (the log-probability along
// int and categorical dimensions). Components whose term lies more than
// tpeCutoff below the largest are left out; for int dimensions, whose
// interval masses cost two erfc each, cheap bounds on each term decide
// which components to compute exactly.
func (m *tpeMix) logPDF(x []float64, ws *tpeWork) float64 {
	if len(m.dims) == 1 && m.dims[0].catLogP != nil {
		return m.dims[0].catLogP[int(x[0])]
	}
	n := m.n
	base := ws.base[:n]
	if len(m.dims) == 1 && m.dims[0].d.kind == tpeFloat {
		// The common case, in one pass and the exponentials.
		md := &m.dims[0]
		xv := x[0]
		mx := math.Inf(-1)
		mu, inv, cc, logw := md.mu[:n], md.inv[:n], md.cc[:n], m.logw[:n]
		for i := range base {
			z := (xv - mu[i]) * inv[i]
			v := logw[i] + cc[i] - 0.5*z*z
			base[i] = v
			if v > mx {
				mx = v
			}
		}
		return logSumExpMax(base, mx) - logSqrt2Pi
	}
	copy(base, m.logw)
	var konst float64
	for j := range m.dims {
		md := &m.dims[j]
		xv := x[j]
		switch md.d.kind {
		case tpeFloat:
			konst -= logSqrt2Pi
			mu, inv, cc := md.mu[:n], md.inv[:n], md.cc[:n]
			for i := range base {
				z := (xv - mu[i]) * inv[i]
				base[i] += cc[i] - 0.5*z*z
			}
		case tpeCat:
			c := int32(xv)
			for i, ci := range md.cat[:n] {
				switch ci {
				case c:
					base[i] += md.logOn
				case -1:
					base[i] += md.logUni
				default:
					base[i] += md.logOff
				}
			}
		}
	}
	if !m.disc {
		return konst + logSumExp(base)
	}

	// Int dimensions. Along each, a component's mass on the interval
	// [xl, xr] lies between width·φ(farthest point) and width·φ(nearest).
	ub, lb := ws.ub[:n], ws.lb[:n]
	copy(ub, base)
	copy(lb, base)
	xl, xr, lw := ws.xl[:len(m.dims)], ws.xr[:len(m.dims)], ws.lw[:len(m.dims)]
	for j := range m.dims {
		md := &m.dims[j]
		if md.d.kind != tpeInt {
			continue
		}
		l, r := md.d.interval(x[j])
		xl[j], xr[j], lw[j] = l, r, math.Log(r-l)
		md.gen++ // a new candidate
		logW := lw[j] - logSqrt2Pi
		mu, inv, cc := md.mu[:n], md.inv[:n], md.cc[:n]
		for i := range ub {
			za, zb := (l-mu[i])*inv[i], (r-mu[i])*inv[i]
			var near, far float64
			switch {
			case za > 0:
				near, far = za, zb
			case zb < 0:
				near, far = -zb, -za
			default:
				far = max(-za, zb)
			}
			c := logW + cc[i]
			ub[i] += c - 0.5*near*near
			lb[i] += c - 0.5*far*far
		}
	}
	// The term of the component with the highest upper bound, computed
	// exactly, sets the threshold with the best lower bound.
	top := 0
	for i := range ub {
		if ub[i] > ub[top] {
			top = i
		}
	}
	topExact := m.exactTerm(top, base[top], xl, xr, lw)
	cut := max(maxFloat(lb), topExact) - tpeCutoff
	for i := range base {
		switch {
		case i == top:
			base[i] = topExact
		case ub[i] <= cut:
			base[i] = math.Inf(-1)
		default:
			base[i] = m.exactTerm(i, base[i], xl, xr, lw)
		}
	}
	return konst + logSumExp(base)
}

// exactTerm returns component i's term, v from the other dimensions plus
// the exact log-mass of the int intervals [xl, xr] (logW: log(xr-xl)).
func (m *tpeMix) exactTerm(i int, v float64, xl, xr, logW []float64) float64 {
	for j := range m.dims {
		md := &m.dims[j]
		if md.d.kind != tpeInt {
			continue
		}
		k := int32(-1)
		if md.ik != nil {
			if k = md.ik[i]; k >= 0 && md.memoGen[k] == md.gen {
				v += md.memo[k]
				continue
			}
		}
		var term float64
		za, zb := (xl[j]-md.mu[i])*md.inv[i], (xr[j]-md.mu[i])*md.inv[i]
		if zb-za < tpeNarrow {
			// log(zb-za) = logW - log(sigma), and cc is -log(sigma) - logZ.
			term = logW[j] + md.cc[i] + narrowLogMass(zb-za, 0.5*(za+zb))
		} else {
			term = logGaussMass(za, zb) - md.logZ[i]
		}
		if k >= 0 {
			md.memo[k], md.memoGen[k] = term, md.gen
		}
		v += term
	}
	return v
}

// logSumExp returns log(Σ exp(v)), leaving out terms more than tpeCutoff
// below the largest.
func logSumExp(v []float64) float64 {
	return logSumExpMax(v, maxFloat(v))
}

// logSumExpMax is logSumExp given the largest of v.
func logSumExpMax(v []float64, mx float64) float64 {
	if math.IsInf(mx, 0) {
		return mx
	}
	cut := mx - tpeCutoff
	var s float64
	for _, x := range v {
		if x > cut {
			s += math.Exp(x - mx)
		}
	}
	return mx + math.Log(s)
}

// maxFloat returns the largest of v, which holds no NaN, or -Inf.
func maxFloat(v []float64) float64 {
	mx := math.Inf(-1)
	for _, x := range v {
		if x > mx {
			mx = x
		}
	}
	return mx
}

// logGaussMass returns the log of the standard normal's mass on [a, b],
// a < b, without cancellation in either tail. A narrow interval, as a
// large int's on a log scale, takes the series about its midpoint.
func logGaussMass(a, b float64) float64 {
	if w := b - a; w < tpeNarrow {
		c := 0.5 * (a + b)
		return math.Log(w) + narrowLogMass(w, c)
	}
	switch {
	case b <= 0:
		return logLeftMass(a, b)
	case a >= 0:
		return logLeftMass(-b, -a)
	}
	return math.Log1p(-0.5*math.Erfc(-a/math.Sqrt2) - 0.5*math.Erfc(b/math.Sqrt2))
}

// tpeNarrow is the width in bandwidths under which an interval's mass
// comes from narrowLogMass.
const tpeNarrow = 0.1

// narrowLogMass returns log(mass/w) of the standard normal on the interval
// of width w < tpeNarrow centred on c: the series
// φ(c)·(1 + w²·He2(c)/24 + w⁴·He4(c)/1920 + ...), whose next term is below
// 2e-6 relative for |c| < 9 (beyond, the term is negligible beside the
// prior's).
func narrowLogMass(w, c float64) float64 {
	c2, w2 := c*c, w*w
	return -0.5*c2 - logSqrt2Pi + math.Log1p(w2*(c2-1)/24+w2*w2*(c2*c2-6*c2+3)/1920)
}

// logLeftMass is logGaussMass for a < b <= 0.
func logLeftMass(a, b float64) float64 {
	return math.Log(0.5*math.Erfc(-b/math.Sqrt2) - 0.5*math.Erfc(-a/math.Sqrt2))
}

// sortComps sorts kernels by centre, ties in their order, with a stable
// radix sort on the centres' bits (the kernels' count makes comparison sorts
// the costliest step of a call). It returns whichever of c and tmp holds the
// result.
func sortComps(c, tmp []tpeComp) []tpeComp {
	for i := range c {
		b := math.Float64bits(c[i].mu)
		if b>>63 == 1 {
			b = ^b
		} else {
			b |= 1 << 63
		}
		c[i].key = b
	}
	var count [256]int
	for shift := uint(0); shift < 64; shift += 8 {
		count = [256]int{}
		for i := range c {
			count[byte(c[i].key>>shift)]++
		}
		if count[byte(c[0].key>>shift)] == len(c) {
			continue // every key has this byte
		}
		sum := 0
		for i, k := range count {
			count[i] = sum
			sum += k
		}
		for i := range c {
			b := byte(c[i].key >> shift)
			tmp[count[b]] = c[i]
			count[b]++
		}
		c, tmp = tmp, c
	}
	return c
}
