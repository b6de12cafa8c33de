// Package replay runs Virga's searchers against a tabular benchmark: every
// configuration of a small search space trained once to the end, its
// validation curve and epoch times recorded (bench/search/FORMAT.md). A run
// takes virtual time only: W workers each train one trial an epoch at a
// time, every epoch taking the time the table recorded, and the searcher
// sees the same calls, in the same order, as under the control loop:
// Propose, Created, Observe after every epoch, Ended. Hundreds of trials
// replay in milliseconds, so a search policy is judged over many seeds.
package replay

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"

	"github.com/virga-ml/virga/internal/search"
	"github.com/virga-ml/virga/internal/spec"
)

// Table is a tabular benchmark.
type Table struct {
	Name      string   `json:"name"`
	Model     string   `json:"model,omitempty"`
	Dataset   string   `json:"dataset,omitempty"`
	Command   string   `json:"command,omitempty"`
	Metric    string   `json:"metric"`
	Direction string   `json:"direction"`
	Epochs    int      `json:"epochs"`
	Space     []Dim    `json:"space"`
	Configs   []Config `json:"configs"`

	// Continuous, when set, presents each int or float dimension to the
	// searcher as a float parameter over [first, last value] (log-scaled
	// when the dimension is), and a proposal names the configuration of
	// the grid values nearest to it (see Index): a continuous search space,
	// as a user's float hyperparameters are, over the same curves.
	Continuous bool `json:"-"`
}

// Dim is one dimension of a table's space: its grid values, ascending for
// int and float dimensions.
type Dim struct {
	Name   string `json:"name"`
	Type   string `json:"type"` // int, float or categorical
	Log    bool   `json:"log,omitempty"`
	Values []any  `json:"values"`
}

// Config is one trained configuration.
type Config struct {
	HParams map[string]any `json:"hparams"`
	Curve   []float64      `json:"curve"`   // objective after epoch 1..Epochs
	Seconds []float64      `json:"seconds"` // time of epoch 1..Epochs
}

// Load reads a gzipped table and checks it.
func Load(path string) (*Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t, err := Read(zr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Read decodes a table from JSON and checks it.
func Read(r io.Reader) (*Table, error) {
	var t Table
	if err := json.NewDecoder(r).Decode(&t); err != nil {
		return nil, err
	}
	if err := t.Check(); err != nil {
		return nil, err
	}
	return &t, nil
}

// Check verifies the table's contract: configurations are the grid of the
// space in order, the last dimension varying fastest, with a finite curve
// and positive epoch times.
func (t *Table) Check() error {
	if t.Epochs < 1 {
		return fmt.Errorf("table %q: epochs must be >= 1, got %d", t.Name, t.Epochs)
	}
	if t.Direction != string(spec.Minimize) && t.Direction != string(spec.Maximize) {
		return fmt.Errorf("table %q: direction must be minimize or maximize, got %q", t.Name, t.Direction)
	}
	size := 1
	for _, d := range t.Space {
		if len(d.Values) == 0 {
			return fmt.Errorf("table %q: dimension %q has no values", t.Name, d.Name)
		}
		switch d.Type {
		case "int", "float":
			for i, v := range d.Values {
				f, ok := v.(float64)
				if !ok || (i > 0 && f <= d.Values[i-1].(float64)) || (d.Log && f <= 0) {
					return fmt.Errorf("table %q: dimension %q: values must be increasing numbers (positive when log)", t.Name, d.Name)
				}
			}
		case "categorical":
			seen := map[string]bool{}
			for _, v := range d.Values {
				if seen[fmt.Sprint(v)] {
					return fmt.Errorf("table %q: dimension %q: value %v appears twice", t.Name, d.Name, v)
				}
				seen[fmt.Sprint(v)] = true
			}
		default:
			return fmt.Errorf("table %q: dimension %q: unknown type %q", t.Name, d.Name, d.Type)
		}
		size *= len(d.Values)
	}
	if len(t.Configs) != size {
		return fmt.Errorf("table %q: %d configurations, but the grid of the space has %d", t.Name, len(t.Configs), size)
	}
	for i, c := range t.Configs {
		if len(c.Curve) != t.Epochs || len(c.Seconds) != t.Epochs {
			return fmt.Errorf("table %q: configuration %d: want %d curve points and epoch times", t.Name, i, t.Epochs)
		}
		for e := range c.Curve {
			if math.IsNaN(c.Curve[e]) || math.IsInf(c.Curve[e], 0) || !(c.Seconds[e] > 0) {
				return fmt.Errorf("table %q: configuration %d, epoch %d: values must be finite and times positive", t.Name, i, e+1)
			}
		}
		j := i
		for d := len(t.Space) - 1; d >= 0; d-- {
			dim := t.Space[d]
			want := dim.Values[j%len(dim.Values)]
			j /= len(dim.Values)
			if got, ok := c.HParams[dim.Name]; !ok || fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("table %q: configuration %d: %s = %v, but the grid order puts %v there", t.Name, i, dim.Name, got, want)
			}
		}
	}
	return nil
}

// Experiment returns the experiment a searcher is made from: its objective,
// the given searcher and max_trials, and the table's space as the searcher
// sees it: each int or float dimension as an int parameter over the indices
// of its grid values (0..n-1, so a log-spaced grid is searched on a log
// scale), each categorical dimension as a categorical parameter. Proposals
// then name table entries exactly, and a searcher can tell a repeated
// configuration from a new one.
func (t *Table) Experiment(s spec.Searcher, maxTrials int) *spec.Experiment {
	e := &spec.Experiment{
		Name:            t.Name,
		Hyperparameters: map[string]*spec.Hyperparameter{},
		Searcher:        s,
		Objective:       spec.Objective{Metric: t.Metric, Direction: spec.Direction(t.Direction)},
		MaxTrials:       maxTrials,
		MaxConcurrent:   1,
	}
	for _, d := range t.Space {
		h := &spec.Hyperparameter{Name: d.Name, Type: spec.HPCategorical, Values: d.Values}
		switch {
		case d.Type == "categorical":
		case t.Continuous:
			lo, _ := number(d.Values[0])
			hi, _ := number(d.Values[len(d.Values)-1])
			h = &spec.Hyperparameter{Name: d.Name, Type: spec.HPFloat, Min: lo, Max: hi, Log: d.Log}
			if lo == hi {
				h = &spec.Hyperparameter{Name: d.Name, Type: spec.HPConst, Value: lo}
			}
		default:
			h = &spec.Hyperparameter{Name: d.Name, Type: spec.HPInt, Min: 0, Max: float64(len(d.Values) - 1)}
		}
		e.Hyperparameters[d.Name] = h
		e.Order = append(e.Order, d.Name)
	}
	return e
}

// Index returns the configuration a proposal names: the grid index of each
// int or float dimension (rounded and clamped to the grid; when Continuous,
// the index of the nearest grid value, on the log scale when the dimension
// is log, ties to the lower value), the value of each categorical dimension.
func (t *Table) Index(hp map[string]any) (int, error) {
	idx := 0
	for _, d := range t.Space {
		v, ok := hp[d.Name]
		if !ok {
			return 0, fmt.Errorf("proposal has no %s", d.Name)
		}
		k := -1
		if d.Type == "categorical" {
			for i, c := range d.Values {
				if fmt.Sprint(c) == fmt.Sprint(v) {
					k = i
					break
				}
			}
		} else if x, ok := number(v); ok && !math.IsNaN(x) && t.Continuous {
			k = nearest(d, x)
		} else if ok {
			k = int(min(max(math.Round(x), 0), float64(len(d.Values)-1)))
		}
		if k < 0 {
			return 0, fmt.Errorf("%s = %v is not in the table", d.Name, v)
		}
		idx = idx*len(d.Values) + k
	}
	return idx, nil
}

// nearest returns the index of d's grid value nearest to x (in logarithms
// when d is log-scaled), the lower one on a tie, as optuna_replay.py's
// --suggest float snaps.
func nearest(d Dim, x float64) int {
	key := func(v float64) float64 {
		if d.Log {
			return math.Log(v)
		}
		return v
	}
	if d.Log && x <= 0 {
		return 0
	}
	kx, best, bestDist := key(x), 0, math.Inf(1)
	for i, v := range d.Values {
		f, _ := number(v)
		if dist := math.Abs(key(f) - kx); dist < bestDist {
			best, bestDist = i, dist
		}
	}
	return best
}

// Point returns the proposal that names configuration i, as Experiment's
// space writes it.
func (t *Table) Point(i int) map[string]any {
	p := make(map[string]any, len(t.Space))
	for d := len(t.Space) - 1; d >= 0; d-- {
		dim := t.Space[d]
		k := i % len(dim.Values)
		i /= len(dim.Values)
		if dim.Type == "categorical" {
			p[dim.Name] = dim.Values[k]
		} else if t.Continuous {
			p[dim.Name], _ = number(dim.Values[k])
		} else {
			p[dim.Name] = int64(k)
		}
	}
	return p
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	case int:
		return float64(x), true
	}
	return 0, false
}

// Final returns configuration i's value at the last epoch.
func (t *Table) Final(i int) float64 { return t.Configs[i].Curve[t.Epochs-1] }

// BestFinal returns the best final value of the table.
func (t *Table) BestFinal() float64 {
	best := t.Final(0)
	for i := range t.Configs {
		if f := t.Final(i); t.better(f, best) {
			best = f
		}
	}
	return best
}

func (t *Table) better(a, b float64) bool {
	if t.Direction == string(spec.Maximize) {
		return a > b
	}
	return a < b
}

// Options shape a run.
type Options struct {
	// Workers is the number of trials that train at once.
	Workers int
	// BudgetEpochs ends the run once that many epochs were trained.
	BudgetEpochs int
	// RestartEvery, when positive, replaces the searcher every that many
	// epochs by a new one made by Remake and restored from a snapshot of
	// the old one, as a server restart does.
	RestartEvery int
	Remake       func() (search.Searcher, error)
}

// Epoch is one epoch trained.
type Epoch struct {
	Config int     // index of the configuration
	Epoch  int     // 1-based
	Time   float64 // virtual wall clock at its end, in seconds
	Trial  int64
}

// Result is a run's trace and what its trials did.
type Result struct {
	Trace    []Epoch
	Trials   int // trials created
	Stopped  int // trials stopped early
	Paused   int // pauses (promote mode)
	Restarts int // searcher restarts
}

// trial is a trial under replay.
type trial struct {
	id     int64
	config int
	epoch  int     // epochs done
	end    float64 // virtual time its current epoch ends
	worker int
}

// Run replays a search. The searcher must be fresh.
func Run(t *Table, s search.Searcher, opt Options) (*Result, error) {
	if opt.Workers < 1 {
		return nil, errors.New("replay: workers must be >= 1")
	}
	if opt.BudgetEpochs < 1 {
		return nil, errors.New("replay: budget must be >= 1 epoch")
	}
	res := &Result{}
	trials := map[int64]*trial{}
	var runningT []*trial
	free := make([]bool, opt.Workers)
	for i := range free {
		free[i] = true
	}
	now := 0.0
	exhausted := false
	var nextID int64
	start := func(tr *trial, w int) {
		tr.worker = w
		tr.end = now + t.Configs[tr.config].Seconds[tr.epoch]
		free[w] = false
		runningT = append(runningT, tr)
	}
	fill := func() error {
		for w := range free {
			if !free[w] || exhausted {
				continue
			}
			p, err := s.Propose()
			switch {
			case errors.Is(err, search.ErrExhausted):
				exhausted = true
				return nil
			case errors.Is(err, search.ErrWait):
				return nil
			case err != nil:
				return err
			}
			if p.Resume != 0 {
				tr := trials[p.Resume]
				if tr == nil || tr.worker >= 0 {
					return fmt.Errorf("replay: searcher resumes trial %d, which is not paused", p.Resume)
				}
				start(tr, w)
				continue
			}
			c, err := t.Index(p.HParams)
			if err != nil {
				return fmt.Errorf("replay: %w", err)
			}
			nextID++
			tr := &trial{id: nextID, config: c, worker: -1}
			if p.Parent != 0 {
				if parent := trials[p.Parent]; parent != nil {
					tr.epoch = parent.epoch // continues from the parent's checkpoint
				}
			}
			trials[tr.id] = tr
			res.Trials++
			s.Created(p.ID, tr.id)
			if tr.epoch >= t.Epochs {
				s.Ended(tr.id, search.Completed)
				continue
			}
			start(tr, w)
		}
		return nil
	}
	for len(res.Trace) < opt.BudgetEpochs {
		if err := fill(); err != nil {
			return nil, err
		}
		if len(runningT) == 0 {
			break
		}
		sort.SliceStable(runningT, func(i, j int) bool {
			if runningT[i].end != runningT[j].end {
				return runningT[i].end < runningT[j].end
			}
			return runningT[i].worker < runningT[j].worker
		})
		tr := runningT[0]
		runningT = runningT[1:]
		now = tr.end
		tr.epoch++
		res.Trace = append(res.Trace, Epoch{Config: tr.config, Epoch: tr.epoch, Time: now, Trial: tr.id})
		d := s.Observe(tr.id, int64(tr.epoch), t.Configs[tr.config].Curve[tr.epoch-1])
		switch {
		case d == search.Continue && tr.epoch < t.Epochs:
			tr.end = now + t.Configs[tr.config].Seconds[tr.epoch]
			runningT = append(runningT, tr)
		case d == search.Pause && tr.epoch < t.Epochs:
			free[tr.worker], tr.worker = true, -1
			res.Paused++
			if pa, ok := s.(search.PauseAware); ok {
				pa.Paused(tr.id) // its process has exited at once
			}
		default:
			free[tr.worker], tr.worker = true, -1
			out := search.Completed
			if tr.epoch < t.Epochs {
				out = search.Stopped
				res.Stopped++
			}
			s.Ended(tr.id, out)
		}
		if opt.RestartEvery > 0 && len(res.Trace)%opt.RestartEvery == 0 {
			snap, err := s.Snapshot()
			if err != nil {
				return nil, err
			}
			ns, err := opt.Remake()
			if err != nil {
				return nil, err
			}
			if err := ns.Restore(snap); err != nil {
				return nil, err
			}
			s = ns
			res.Restarts++
		}
	}
	return res, nil
}

// Regret returns, after each epoch of the trace, the regret of the
// incumbent: the best configuration among those trained to the last epoch
// so far, scored by how far its final value is from the table's best final
// value. Before any configuration completes, it is the worst final's regret.
func (t *Table) Regret(trace []Epoch) []float64 {
	out := make([]float64, len(trace))
	best, worst := t.BestFinal(), t.BestFinal()
	for i := range t.Configs {
		if f := t.Final(i); t.better(worst, f) {
			worst = f
		}
	}
	reg := math.Abs(worst - best)
	for i, e := range trace {
		if e.Epoch == t.Epochs {
			reg = min(reg, math.Abs(t.Final(e.Config)-best))
		}
		out[i] = reg
	}
	return out
}
