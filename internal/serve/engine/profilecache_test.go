package engine

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/runtime"
	"github.com/virga-ml/virga/internal/serve/runtime/mlp"
)

// countingLoader is the MLP runtime counting the calls of the models it
// loads and its memory estimates.
type countingLoader struct {
	runs, estimates, loads atomic.Int64
}

func (c *countingLoader) Estimate(dir string, m serve.Manifest) (int64, error) {
	c.estimates.Add(1)
	return mlp.Loader{}.Estimate(dir, m)
}

func (c *countingLoader) Load(dir string, m serve.Manifest) (runtime.Model, error) {
	c.loads.Add(1)
	model, err := mlp.Loader{}.Load(dir, m)
	if err != nil {
		return nil, err
	}
	return &countingModel{Model: model, runs: &c.runs}, nil
}

type countingModel struct {
	runtime.Model
	runs *atomic.Int64
}

func (m *countingModel) Run(ctx context.Context, in []serve.Tensor) ([]serve.Tensor, error) {
	m.runs.Add(1)
	return m.Model.Run(ctx, in)
}

// loadRuns loads name (unloading it first) and returns the model calls the
// load made.
func loadRuns(t *testing.T, e *Engine, c *countingLoader, name string) int64 {
	t.Helper()
	if err := e.Unload(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	before := c.runs.Load()
	if err := e.Load(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	return c.runs.Load() - before
}

// TestReloadReusesTheProfile: a model loaded again with the same files and
// settings is only warmed up (two calls), not profiled (a call and five
// timed calls per batch size); after a restart too, from the cache
// directory. A changed model file, or other runtime settings (instances),
// is profiled again.
func TestReloadReusesTheProfile(t *testing.T) {
	root := t.TempDir()
	cache := filepath.Join(t.TempDir(), "profiles")
	dir := writeMLP(t, root, "m", "1", 3, 1)
	c := &countingLoader{}
	newE := func(instances int) *Engine {
		return newEngine(t, Options{Source: DirSource{Root: root}, Runtimes: map[string]runtime.Loader{mlp.Format: c},
			ProfileCache: cache, Instances: instances})
	}
	// writeMLP's models batch up to 8 rows: sizes 1, 2, 4, 8.
	const profiled = 4 * (1 + profileRuns)
	const warmed = 2

	e := newE(1)
	if got := loadRuns(t, e, c, "m"); got != profiled {
		t.Fatalf("first load: %d calls, want %d (a profile)", got, profiled)
	}
	if got := loadRuns(t, e, c, "m"); got != warmed {
		t.Fatalf("second load: %d calls, want %d (a warm-up only)", got, warmed)
	}
	resp, err := e.Infer(context.Background(), request("m", 1))
	if err != nil {
		t.Fatal(err)
	}
	if l := labelOf(t, resp); l != 3 {
		t.Fatalf("label %d after a reload, want 3", l)
	}
	e.Close()

	// A restart reads the record from the cache directory.
	e = newE(1)
	if got := loadRuns(t, e, c, "m"); got != warmed {
		t.Fatalf("first load after a restart: %d calls, want %d (the profile from %s)", got, warmed, cache)
	}
	// Other settings: another profile.
	e.Close()
	e = newE(2)
	if got := loadRuns(t, e, c, "m"); got != profiled {
		t.Fatalf("load with 2 instances: %d calls, want %d (a profile)", got, profiled)
	}

	// A changed file (its size and time changed: its digest is taken
	// again).
	f, err := os.ReadFile(filepath.Join(dir, "mlp.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file mlp.File
	if err := json.Unmarshal(f, &file); err != nil {
		t.Fatal(err)
	}
	file.Params[0] += 0.5
	writeJSON(t, filepath.Join(dir, "mlp.json"), file)
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(dir, "mlp.json"), later, later); err != nil {
		t.Fatal(err)
	}
	if got := loadRuns(t, e, c, "m"); got != profiled {
		t.Fatalf("load of a changed file: %d calls, want %d (a profile)", got, profiled)
	}
}

// TestRefusedLoadsDoNotDecode: a model refused admission again and again
// has its memory estimated once (the MLP runtime's estimate decodes the
// whole file: at every refused request, that took the CPU from the loaded
// models).
func TestRefusedLoadsDoNotDecode(t *testing.T) {
	for _, costAware := range []bool{false, true} {
		root := t.TempDir()
		a := writeMLP(t, root, "popular", "1", 0, 1)
		writeMLP(t, root, "rare", "1", 1, 2)
		c := &countingLoader{}
		e := newEngine(t, Options{Source: DirSource{Root: root}, Runtimes: map[string]runtime.Loader{mlp.Format: c},
			MemoryBudget: modelMemory(t, a) + 1, Admission: !costAware, CostAware: costAware})
		for range 10 {
			if _, err := e.Infer(context.Background(), request("popular", 1)); err != nil {
				t.Fatal(err)
			}
		}
		estimates, loads := c.estimates.Load(), c.loads.Load()
		for range 5 {
			_, err := e.Infer(context.Background(), request("rare", 1))
			var refused *serve.RefusedError
			if !errors.As(err, &refused) || refused.Reason != "NotAdmitted" {
				t.Fatalf("cost-aware %v: rare: %v, want NotAdmitted", costAware, err)
			}
		}
		if got := c.estimates.Load() - estimates; got > 1 {
			t.Errorf("cost-aware %v: 5 refused requests estimated the model's memory %d times, want at most once", costAware, got)
		}
		if got := c.loads.Load() - loads; got != 0 {
			t.Errorf("cost-aware %v: 5 refused requests loaded the model %d times, want none", costAware, got)
		}
	}
}

// TestOneLoadAtATime: while one model loads, another's load waits for the
// slot (Options.MaxLoads, 1 by default) and starts once the first ends.
func TestOneLoadAtATime(t *testing.T) {
	root := t.TempDir()
	a := writeMLP(t, root, "a", "1", 0, 1)
	b := writeMLP(t, root, "b", "1", 1, 2)
	g := newGatedLoader()
	gateA, gateB := g.gateLoad(a), g.gateLoad(b)
	var openA, openB sync.Once
	open := func(dir string) {
		if dir == a {
			openA.Do(func() { close(gateA) })
		} else {
			openB.Do(func() { close(gateB) })
		}
	}
	e := newEngine(t, Options{Source: DirSource{Root: root}, Runtimes: map[string]runtime.Loader{mlp.Format: g}})
	t.Cleanup(func() { open(a); open(b) }) // before the engine closes
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, name := range []string{"a", "b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.Infer(context.Background(), &serve.Request{Model: name, Timeout: time.Minute, Inputs: []serve.Tensor{pixels(1)}})
			errs <- err
		}()
	}
	first := <-g.loading
	select {
	case second := <-g.loading:
		t.Fatalf("%s started loading while %s was loading", second, first)
	case <-time.After(200 * time.Millisecond):
	}
	open(first)
	second := <-g.loading // the other starts once the first ended
	if second == first {
		t.Fatalf("%s loaded twice", first)
	}
	open(second)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestLoadTooSlowIsRefusedAtOnce: a request for a model whose load is
// expected (from its last load) to end after the request's deadline is
// refused at once, not at the deadline, and the load goes on: the next
// request finds the model loaded.
func TestLoadTooSlowIsRefusedAtOnce(t *testing.T) {
	root := t.TempDir()
	dir := writeMLP(t, root, "m", "1", 2, 1)
	g := newGatedLoader()
	e := newEngine(t, Options{Source: DirSource{Root: root}, Runtimes: map[string]runtime.Loader{mlp.Format: g}})
	if err := e.Load(context.Background(), "m"); err != nil {
		t.Fatal(err)
	}
	if err := e.Unload(context.Background(), "m"); err != nil {
		t.Fatal(err)
	}
	// Its last load took a second.
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	key, err := e.profiles.key(dir, m, g, 1)
	if err != nil {
		t.Fatal(err)
	}
	rec, ok := e.profiles.get(key)
	if !ok {
		t.Fatal("no record of the first load")
	}
	rec.Load = time.Second
	e.profiles.put(key, rec, false)

	gate := g.gateLoad(dir)
	first := make(chan error, 1)
	go func() {
		_, err := e.Infer(context.Background(), &serve.Request{Model: "m", Timeout: time.Minute, Inputs: []serve.Tensor{pixels(1)}})
		first <- err
	}()
	<-g.loading
	start := time.Now()
	_, err = e.Infer(context.Background(), &serve.Request{Model: "m", Timeout: 500 * time.Millisecond, Inputs: []serve.Tensor{pixels(1)}})
	var refused *serve.RefusedError
	if !errors.As(err, &refused) || refused.Reason != "LoadTooSlow" {
		t.Fatalf("a request with 500ms left for a load expected to take 1s: %v, want LoadTooSlow", err)
	}
	if took := time.Since(start); took > 250*time.Millisecond {
		t.Errorf("refused after %v, want at once (before half its deadline)", took)
	}
	close(gate)
	if err := <-first; err != nil {
		t.Fatalf("the request with a minute left: %v", err)
	}
}

// TestDecodeLoadRecordChecksTheProfile: a record file that does not hold
// a usable profile is refused (the model is profiled again).
func TestDecodeLoadRecordChecksTheProfile(t *testing.T) {
	for _, bad := range []string{
		`{}`,
		`{"profile":{"Points":[],"Max":1}}`,
		`{"profile":{"Points":[{"Rows":0,"Took":1}],"Max":1}}`,
		`{"profile":{"Points":[{"Rows":2,"Took":1},{"Rows":2,"Took":1}],"Max":2}}`,
		`{"profile":{"Points":[{"Rows":1,"Took":-1}],"Max":1}}`,
		`{"profile":{"Points":[{"Rows":1,"Took":1},{"Rows":4,"Took":2}],"Max":2}}`,
		`{"profile":{"Points":[{"Rows":1,"Took":1}],"Max":1},"memory":-1}`,
		`not json`,
	} {
		if _, err := decodeLoadRecord([]byte(bad)); err == nil {
			t.Errorf("%s: decoded, want an error", bad)
		}
	}
	rec, err := decodeLoadRecord([]byte(`{"profile":{"Points":[{"Rows":1,"Took":1000},{"Rows":8,"Took":5000}],"Max":8},"memory":100,"load":20}`))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Profile.Latency(8) != 5*time.Microsecond || rec.Memory != 100 {
		t.Errorf("decoded %+v", rec)
	}
}

// FuzzDecodeLoadRecord: whatever a record file holds, a record that
// decodes gives a profile the policies can use.
func FuzzDecodeLoadRecord(f *testing.F) {
	f.Add([]byte(`{"profile":{"Points":[{"Rows":1,"Took":1000},{"Rows":8,"Took":5000}],"Max":8},"memory":100,"load":20}`))
	f.Add([]byte(`{"profile":{"Points":[{"Rows":1,"Took":1}],"Max":1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := decodeLoadRecord(data)
		if err != nil {
			return
		}
		p := rec.Profile
		for _, rows := range []int{1, p.MaxRows(), p.MaxRows() + 1} {
			if p.Latency(rows) < 0 {
				t.Fatalf("latency of %d rows %v < 0", rows, p.Latency(rows))
			}
		}
	})
}
