package engine

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/runtime"
	"github.com/virga-ml/virga/internal/serve/runtime/mlp"
)

// writeMLP writes a virga.mlp/v1 model directory <root>/<name>/<version>
// whose network always predicts label (its last bias dominates) and
// returns the directory.
func writeMLP(t testing.TB, root, name, version string, label int, seed uint64) string {
	t.Helper()
	dir := filepath.Join(root, name, version)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const hidden = 8
	f := mlp.File{Inputs: 64, Hidden: hidden, Classes: 10, InputScale: 1.0 / 16}
	rng := rand.New(rand.NewPCG(seed, 1))
	f.Params = make([]float64, hidden*64+hidden+10*hidden+10)
	for i := range f.Params {
		f.Params[i] = rng.Float64()*0.02 - 0.01
	}
	f.Params[len(f.Params)-10+label] = 100
	writeJSON(t, filepath.Join(dir, "mlp.json"), f)
	writeJSON(t, filepath.Join(dir, serve.ManifestFile), serve.Manifest{Format: mlp.Format, File: "mlp.json", MaxBatch: 8, Signature: f.Signature()})
	return dir
}

func writeJSON(t testing.TB, path string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// modelMemory is what one model of writeMLP holds.
func modelMemory(t testing.TB, dir string) int64 {
	t.Helper()
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	model, err := mlp.Loader{}.Load(dir, m)
	if err != nil {
		t.Fatal(err)
	}
	return model.Memory()
}

func pixels(rows int) serve.Tensor {
	return serve.Tensor{Name: "pixels", Datatype: serve.FP32, Shape: []int64{int64(rows), 64}, Data: make([]float32, rows*64)}
}

func request(model string, rows int) *serve.Request {
	return &serve.Request{Model: model, Inputs: []serve.Tensor{pixels(rows)}}
}

func newEngine(t testing.TB, opts Options) *Engine {
	t.Helper()
	e, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// labelOf is the one label a response of rows 1 holds.
func labelOf(t testing.TB, resp *serve.Response) int64 {
	t.Helper()
	for _, o := range resp.Outputs {
		if o.Name == "label" {
			return o.Data.([]int64)[0]
		}
	}
	t.Fatalf("response %+v has no label", resp)
	return -1
}

// fakeClock is a Clock tests advance by hand.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Time
	f       func()
	stopped bool
}

var _ Clock = (*fakeClock)(nil)

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// Advance moves the time on and fires the timers that come due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.stopped {
			continue
		}
		if !t.at.After(c.now) {
			t.stopped = true
			due = append(due, t)
		} else {
			kept = append(kept, t)
		}
	}
	c.timers = kept
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		t.f()
	}
}

// gatedLoader is a real runtime whose loads of chosen directories wait for
// a gate, and whose runs of chosen directories wait for another: for
// holding a load or a batch under way while a test looks at the engine.
type gatedLoader struct {
	runtime.Loader
	mu       sync.Mutex
	loadGate map[string]chan struct{} // by directory
	runGate  map[string]chan struct{}
	loading  chan string // a gated load has started
	running  chan string // a gated run has started
}

func newGatedLoader() *gatedLoader {
	return &gatedLoader{Loader: mlp.Loader{}, loadGate: map[string]chan struct{}{}, runGate: map[string]chan struct{}{},
		loading: make(chan string, 16), running: make(chan string, 16)}
}

func (g *gatedLoader) gateLoad(dir string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	ch := make(chan struct{})
	g.loadGate[dir] = ch
	return ch
}

func (g *gatedLoader) gateRun(dir string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	ch := make(chan struct{})
	g.runGate[dir] = ch
	return ch
}

func (g *gatedLoader) Estimate(dir string, m serve.Manifest) (int64, error) {
	return g.Loader.(runtime.Estimator).Estimate(dir, m)
}

func (g *gatedLoader) Load(dir string, m serve.Manifest) (runtime.Model, error) {
	g.mu.Lock()
	gate := g.loadGate[dir]
	g.mu.Unlock()
	if gate != nil {
		g.loading <- dir
		<-gate
	}
	model, err := g.Loader.Load(dir, m)
	if err != nil {
		return nil, err
	}
	return &gatedModel{Model: model, g: g, dir: dir}, nil
}

type gatedModel struct {
	runtime.Model
	g      *gatedLoader
	dir    string
	warmed bool
}

func (m *gatedModel) Run(ctx context.Context, in []serve.Tensor) ([]serve.Tensor, error) {
	m.g.mu.Lock()
	gate := m.g.runGate[m.dir]
	m.g.mu.Unlock()
	if gate != nil {
		select {
		case m.g.running <- m.dir:
		default: // nobody is counting runs any more
		}
		<-gate
	}
	return m.Model.Run(ctx, in)
}
