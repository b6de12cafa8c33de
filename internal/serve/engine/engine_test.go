package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/runtime"
)

func TestInferServesTheModel(t *testing.T) {
	root := t.TempDir()
	writeMLP(t, root, "digits", "1", 3, 1)
	writeMLP(t, root, "digits", "2", 7, 2)
	e := newEngine(t, Options{Source: DirSource{Root: root}})

	resp, err := e.Infer(context.Background(), &serve.Request{ID: "a", Model: "digits", Inputs: []serve.Tensor{pixels(2)}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.ID != "a" || resp.ModelName != "digits" || resp.ModelVersion != "2" {
		t.Errorf("response %s %s %s, want id a, digits version 2 (the latest)", resp.ID, resp.ModelName, resp.ModelVersion)
	}
	if len(resp.Outputs) != 2 || resp.Outputs[0].Name != "probabilities" || resp.Outputs[1].Name != "label" {
		t.Fatalf("outputs %+v, want probabilities and label", resp.Outputs)
	}
	if got := resp.Outputs[1].Data.([]int64); len(got) != 2 || got[0] != 7 || got[1] != 7 {
		t.Errorf("labels %v, want [7 7]", got)
	}
	resp, err = e.Infer(context.Background(), &serve.Request{Model: "digits", Version: "1", Inputs: []serve.Tensor{pixels(1)}, Outputs: []string{"label"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Outputs) != 1 || labelOf(t, resp) != 3 || resp.ModelVersion != "1" {
		t.Errorf("version 1, outputs [label]: %+v, want only label 3", resp.Outputs)
	}

	md, err := e.ModelMetadata(context.Background(), "digits", "")
	if err != nil {
		t.Fatal(err)
	}
	if md.Platform != "virga.mlp/v1" || len(md.Inputs) != 1 || md.Inputs[0].Name != "pixels" || strings.Join(md.Versions, ",") != "1,2" {
		t.Errorf("metadata %+v", md)
	}
	if _, err := e.Infer(context.Background(), request("nope", 1)); !errors.Is(err, serve.ErrModelNotFound) {
		t.Errorf("unknown model: %v, want ErrModelNotFound", err)
	}
	if _, err := e.Infer(context.Background(), &serve.Request{Model: "digits", Version: "9", Inputs: []serve.Tensor{pixels(1)}}); !errors.Is(err, serve.ErrModelNotFound) {
		t.Errorf("unknown version: %v, want ErrModelNotFound", err)
	}
}

func TestInputErrorsNameTheField(t *testing.T) {
	root := t.TempDir()
	writeMLP(t, root, "m", "1", 0, 1)
	e := newEngine(t, Options{Source: DirSource{Root: root}})
	bad := func(change func(*serve.Request)) *serve.Request {
		r := &serve.Request{Model: "m", Inputs: []serve.Tensor{pixels(2)}}
		change(r)
		return r
	}
	for _, tc := range []struct {
		name      string
		req       *serve.Request
		wantField string
		wantMsg   string
	}{
		{"unknown input", bad(func(r *serve.Request) { r.Inputs[0].Name = "image" }), "inputs[0].name", `"image": the model has no such input (it takes pixels FP32[-1 64])`},
		{"twice", bad(func(r *serve.Request) { r.Inputs = append(r.Inputs, pixels(2)) }), "inputs[1].name", `"pixels" given twice`},
		{"missing", bad(func(r *serve.Request) { r.Inputs = nil }), "inputs", "missing pixels"},
		{"datatype", bad(func(r *serve.Request) { r.Inputs[0].Datatype = serve.FP64 }), "inputs[0].datatype", "FP64, want FP32"},
		{"rank", bad(func(r *serve.Request) { r.Inputs[0].Shape = []int64{128} }), "inputs[0].shape", "[128] has 1 dimensions, want 2"},
		{"width", bad(func(r *serve.Request) { r.Inputs[0].Shape = []int64{4, 32} }), "inputs[0].shape", "[4 32]: dimension 1 is 32, want 64"},
		{"negative", bad(func(r *serve.Request) { r.Inputs[0].Shape = []int64{-2, 64} }), "inputs[0].shape", "dimension 0 is negative"},
		{"data length", bad(func(r *serve.Request) { r.Inputs[0].Shape = []int64{3, 64} }), "inputs[0].data", "128 elements, shape [3 64] holds 192"},
		{"go type", bad(func(r *serve.Request) { r.Inputs[0].Data = make([]float64, 128) }), "inputs[0].data", "Go type []float64, want []float32 for FP32"},
		{"too many rows", bad(func(r *serve.Request) { r.Inputs[0] = pixels(9) }), "inputs[0].shape", "9 rows, the model takes at most 8"},
		{"no rows", bad(func(r *serve.Request) { r.Inputs[0] = pixels(0) }), "inputs[0].shape", "no rows"},
		{"output", bad(func(r *serve.Request) { r.Outputs = []string{"label", "logits"} }), "outputs[1].name", `"logits": the model has no such output`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.Infer(context.Background(), tc.req)
			var ie *serve.InputError
			if !errors.As(err, &ie) || ie.Field != tc.wantField || !strings.Contains(ie.Msg, tc.wantMsg) {
				t.Fatalf("got %v, want an InputError on %s containing %q", err, tc.wantField, tc.wantMsg)
			}
		})
	}
	// The references the refused requests took are all released.
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, ent := range e.models {
		if ent.refs != 0 {
			t.Errorf("%s holds %d references after the requests ended", k, ent.refs)
		}
	}
}

// 30 models, room for 5, a Zipf mix of requests from many goroutines: the
// budget is never exceeded, models are evicted, and no request fails.
func TestMemoryBudgetUnderZipfLoad(t *testing.T) {
	root := t.TempDir()
	const models = 30
	var per int64
	for i := range models {
		dir := writeMLP(t, root, fmt.Sprintf("m%02d", i), "1", i%10, uint64(i))
		per = modelMemory(t, dir)
	}
	budget := 5 * per
	e := newEngine(t, Options{Source: DirSource{Root: root}, MemoryBudget: budget, Objective: time.Minute, Instances: 2})

	const workers, each = 16, 60
	var wg sync.WaitGroup
	var failures atomic.Int64
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			zipf := rand.NewZipf(rng, 1.1, 1, models-1)
			for range each {
				i := int(zipf.Uint64())
				resp, err := e.Infer(context.Background(), request(fmt.Sprintf("m%02d", i), 1+rng.IntN(3)))
				if err == nil && labelOf(t, resp) != int64(i%10) {
					err = fmt.Errorf("m%02d answered label %d, want %d", i, labelOf(t, resp), i%10)
				}
				if err != nil {
					failures.Add(1)
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("request failed: %v", err)
	}
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d of %d requests failed", n, workers*each)
	}
	e.mu.Lock()
	peak, used, loaded := e.peak, e.used, len(e.models)
	e.mu.Unlock()
	if peak > budget {
		t.Errorf("memory peaked at %d bytes, over the budget of %d", peak, budget)
	}
	if loaded > 5 || used > budget {
		t.Errorf("%d models hold %d bytes at the end, want at most 5 in %d", loaded, used, budget)
	}
	evictions := counterSum(t, e, "virga_serve_evictions_total")
	if evictions == 0 {
		t.Errorf("no model evicted: the budget never needed room")
	}
	t.Logf("%d requests, %d loads, %.0f evictions, peak %d of %d bytes", workers*each, int(counterSum(t, e, "virga_serve_loads_total")), evictions, peak, budget)
}

// counterSum adds a metric family's values over its labels.
func counterSum(t testing.TB, e *Engine, name string) float64 {
	t.Helper()
	fams, err := e.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

func TestCorruptModelAffectsNothingElse(t *testing.T) {
	root := t.TempDir()
	for i := range 3 {
		writeMLP(t, root, fmt.Sprintf("good%d", i), "1", i, uint64(i))
	}
	bad := writeMLP(t, root, "bad", "1", 0, 9)
	if err := os.WriteFile(filepath.Join(bad, "mlp.json"), []byte(`{"inputs": 64, "hidden": 8, "classes": 10, "params": [1, 2`), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, Options{Source: DirSource{Root: root}, Objective: time.Minute})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var goodErrs []error
	badErrs := 0
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				name := fmt.Sprintf("good%d", (w+i)%3)
				if (w+i)%4 == 0 {
					name = "bad"
				}
				_, err := e.Infer(context.Background(), request(name, 1))
				mu.Lock()
				if name == "bad" {
					if !errors.Is(err, serve.ErrUnavailable) || !strings.Contains(err.Error(), filepath.Join(bad, "mlp.json")) {
						t.Errorf("bad model: %v, want ErrUnavailable naming %s", err, filepath.Join(bad, "mlp.json"))
					}
					badErrs++
				} else if err != nil {
					goodErrs = append(goodErrs, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(goodErrs) > 0 {
		t.Fatalf("%d requests to good models failed, the first: %v", len(goodErrs), goodErrs[0])
	}
	if badErrs == 0 {
		t.Fatal("no request went to the bad model")
	}
	idx, err := e.Index(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range idx {
		want := "READY"
		if st.Name == "bad" {
			want = "UNAVAILABLE"
			if !strings.Contains(st.Reason, "mlp.json") {
				t.Errorf("index: bad's reason %q does not name its file", st.Reason)
			}
		}
		if st.State != want {
			t.Errorf("index: %s is %s, want %s", st.Name, st.State, want)
		}
	}
	if ready, err := e.ModelReady(context.Background(), "bad", ""); err != nil || ready {
		t.Errorf("bad model ready %v, %v; want false", ready, err)
	}
	e.mu.Lock()
	used := e.used
	e.mu.Unlock()
	if want := 3 * modelMemory(t, filepath.Join(root, "good0", "1")); used != want {
		t.Errorf("%d bytes in use, want %d (the three good models; the bad one's reservation returned)", used, want)
	}
}

// A swap keeps the old version serving until the new one is loaded and
// warm, then serves the new one and unloads the old; a swap to a version
// that fails to load changes nothing.
func TestSwapKeepsServing(t *testing.T) {
	root := t.TempDir()
	writeMLP(t, root, "m", "1", 1, 1)
	e0 := writeMLP(t, root, "m", "2", 2, 2)
	_ = e0
	g := newGatedLoader()
	e := newEngine(t, Options{Source: DirSource{Root: root}, Runtimes: map[string]runtime.Loader{"virga.mlp/v1": g}, Objective: time.Minute})
	// Serving version 1, by name.
	if resp, err := e.Infer(context.Background(), &serve.Request{Model: "m", Version: "1", Inputs: []serve.Tensor{pixels(1)}}); err != nil || labelOf(t, resp) != 1 {
		t.Fatalf("version 1: %v", err)
	}
	if err := e.Swap(context.Background(), "m", "1"); err != nil {
		t.Fatal(err)
	}
	gate := g.gateLoad(filepath.Join(root, "m", "2"))
	swapped := make(chan error, 1)
	go func() { swapped <- e.Swap(context.Background(), "m", "2") }()
	<-g.loading
	for range 20 {
		resp, err := e.Infer(context.Background(), request("m", 1))
		if err != nil || resp.ModelVersion != "1" || labelOf(t, resp) != 1 {
			t.Fatalf("during the swap: %+v, %v; want version 1 serving", resp, err)
		}
	}
	close(gate)
	if err := <-swapped; err != nil {
		t.Fatal(err)
	}
	resp, err := e.Infer(context.Background(), request("m", 1))
	if err != nil || resp.ModelVersion != "2" || labelOf(t, resp) != 2 {
		t.Fatalf("after the swap: %+v, %v; want version 2", resp, err)
	}
	waitFor(t, func() bool { return !e.loaded(key{"m", "1"}) }) // version 1 unloaded, with no request on it

	// A swap to a version that cannot load leaves version 2 serving.
	v3 := writeMLP(t, root, "m", "3", 3, 3)
	if err := os.WriteFile(filepath.Join(v3, "mlp.json"), []byte("not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.Swap(context.Background(), "m", "3"); !errors.Is(err, serve.ErrUnavailable) || !strings.Contains(err.Error(), "mlp.json") {
		t.Fatalf("swap to a corrupt version: %v, want ErrUnavailable naming its file", err)
	}
	if resp, err := e.Infer(context.Background(), request("m", 1)); err != nil || resp.ModelVersion != "2" {
		t.Fatalf("after a failed swap: %+v, %v; want version 2 still serving", resp, err)
	}
}

// A swap while requests are queued and running on the old version answers
// them all from the old version, and unloads it once they end.
func TestSwapDrainsTheOldVersion(t *testing.T) {
	root := t.TempDir()
	v1 := writeMLP(t, root, "m", "1", 1, 1)
	writeMLP(t, root, "m", "2", 2, 2)
	g := newGatedLoader()
	e := newEngine(t, Options{Source: DirSource{Root: root}, Runtimes: map[string]runtime.Loader{"virga.mlp/v1": g}, Objective: time.Minute})
	if err := e.Swap(context.Background(), "m", "1"); err != nil {
		t.Fatal(err)
	}
	run := g.gateRun(v1)
	results := make(chan *serve.Response, 3)
	for range 3 {
		go func() {
			resp, err := e.Infer(context.Background(), request("m", 1))
			if err != nil {
				t.Error(err)
			}
			results <- resp
		}()
	}
	<-g.running // one batch runs; the others are queued or on their way
	if err := e.Swap(context.Background(), "m", "2"); err != nil {
		t.Fatal(err)
	}
	close(run)
	got := map[string]int{}
	for range 3 {
		got[(<-results).ModelVersion]++
	}
	if got["1"] == 0 {
		t.Errorf("versions answered %v: the requests started on version 1 were not answered by it", got)
	}
	waitFor(t, func() bool { return !e.loaded(key{"m", "1"}) }) // version 1 unloaded after its last request
}

func TestLoadTooSlowIsRefused(t *testing.T) {
	root := t.TempDir()
	dir := writeMLP(t, root, "slow", "1", 0, 1)
	g := newGatedLoader()
	clock := newFakeClock()
	e := newEngine(t, Options{Source: DirSource{Root: root}, Runtimes: map[string]runtime.Loader{"virga.mlp/v1": g}, Clock: clock})
	gate := g.gateLoad(dir)
	errc := make(chan error, 1)
	go func() {
		r := request("slow", 1)
		r.Timeout = 100 * time.Millisecond
		_, err := e.Infer(context.Background(), r)
		errc <- err
	}()
	<-g.loading
	waitFor(t, func() bool { return clock.pending() > 0 }) // the request's deadline timer
	clock.Advance(100 * time.Millisecond)
	var re *serve.RefusedError
	if err := <-errc; !errors.As(err, &re) || re.Reason != "LoadTooSlow" {
		t.Fatalf("got %v, want RefusedError LoadTooSlow", err)
	}
	// The message says what the client can do: the model's first request
	// is often refused so, and a retry finds the model loaded.
	if want := "model slow version 1 is still loading at the request's deadline; the load goes on: retry, or load the model before its first request"; !strings.Contains(re.Msg, want) {
		t.Errorf("message %q, want it to say %q", re.Msg, want)
	}
	close(gate)
	// The load goes on for the next request, which gets it.
	if _, err := e.Infer(context.Background(), request("slow", 1)); err != nil {
		t.Fatal(err)
	}
}

// When every loaded model has requests in flight, a request for another
// waits for room within its deadline, then is refused as unavailable.
func TestNoRoomIsUnavailable(t *testing.T) {
	root := t.TempDir()
	a := writeMLP(t, root, "a", "1", 0, 1)
	writeMLP(t, root, "b", "1", 1, 2)
	g := newGatedLoader()
	clock := newFakeClock()
	e := newEngine(t, Options{Source: DirSource{Root: root}, Runtimes: map[string]runtime.Loader{"virga.mlp/v1": g},
		MemoryBudget: modelMemory(t, a) + 1, Clock: clock, Objective: time.Hour})
	if _, err := e.Infer(context.Background(), request("a", 1)); err != nil {
		t.Fatal(err)
	}
	gate := g.gateRun(a)
	run := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(run) // before the engine's Close, should the test fail first
	done := make(chan error, 1)
	go func() {
		_, err := e.Infer(context.Background(), request("a", 1))
		done <- err
	}()
	<-g.running
	before := clock.pending()
	errc := make(chan error, 1)
	go func() {
		r := request("b", 1)
		r.Timeout = time.Second
		_, err := e.Infer(context.Background(), r)
		errc <- err
	}()
	// b's request waits, and b's load waits for room.
	waitFor(t, func() bool { return clock.pending() > before })
	waitFor(t, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		ent := e.models[key{"b", "1"}]
		return ent != nil && ent.waiting
	})
	clock.Advance(time.Second)
	if err := <-errc; !errors.Is(err, serve.ErrUnavailable) || !strings.Contains(err.Error(), "no room in the memory budget") {
		t.Fatalf("got %v, want ErrUnavailable: no room", err)
	}
	run()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Once a is idle, b takes its place.
	if resp, err := e.Infer(context.Background(), request("b", 1)); err != nil || labelOf(t, resp) != 1 {
		t.Fatalf("b after a ended: %v", err)
	}
}

func (c *fakeClock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.stopped {
			n++
		}
	}
	return n
}

// waitFor polls a condition another goroutine makes true.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestPinnedModelsLoadAtStart(t *testing.T) {
	root := t.TempDir()
	writeMLP(t, root, "p", "1", 4, 1)
	writeMLP(t, root, "q", "1", 5, 2)
	e := newEngine(t, Options{Source: DirSource{Root: root}, Pinned: []string{"p"}})
	waitFor(t, e.Ready)
	idx, err := e.Index(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if len(idx) != 1 || idx[0].Name != "p" || idx[0].State != "READY" {
		t.Fatalf("ready index %+v, want p alone", idx)
	}
	if err := e.Unload(context.Background(), "p"); err != nil {
		t.Fatal(err)
	}
	if idx, _ := e.Index(context.Background(), true); len(idx) != 0 {
		t.Fatalf("ready index after unload %+v, want none", idx)
	}
	if err := e.Load(context.Background(), "q"); err != nil {
		t.Fatal(err)
	}
	if idx, _ := e.Index(context.Background(), true); len(idx) != 1 || idx[0].Name != "q" {
		t.Fatalf("ready index after load %+v, want q", idx)
	}
}

func TestMetricsServed(t *testing.T) {
	root := t.TempDir()
	writeMLP(t, root, "m", "1", 0, 1)
	e := newEngine(t, Options{Source: DirSource{Root: root}})
	for range 3 {
		if _, err := e.Infer(context.Background(), request("m", 2)); err != nil {
			t.Fatal(err)
		}
	}
	e.Infer(context.Background(), &serve.Request{Model: "m"})
	srv := httptest.NewServer(e.MetricsHandler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`virga_serve_requests_total{model="m",outcome="ok"} 3`,
		`virga_serve_requests_total{model="m",outcome="invalid"} 1`,
		`virga_serve_loads_total{model="m",outcome="ok"} 1`,
		`virga_serve_batch_rows_sum{model="m"} 6`,
		`virga_serve_queue_seconds_count{model="m"} 3`,
		`virga_serve_compute_seconds_count{model="m"} 3`,
		`virga_serve_models_loaded 1`,
		fmt.Sprintf(`virga_serve_memory_bytes %d`, modelMemory(t, filepath.Join(root, "m", "1"))),
	} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestProfileInterpolates(t *testing.T) {
	p := &Profile{Max: 8, Points: []Point{{1, 10 * time.Microsecond}, {2, 12 * time.Microsecond}, {4, 20 * time.Microsecond}, {8, 36 * time.Microsecond}}}
	for rows, want := range map[int]time.Duration{1: 10 * time.Microsecond, 2: 12 * time.Microsecond, 3: 16 * time.Microsecond, 6: 28 * time.Microsecond, 8: 36 * time.Microsecond, 10: 44 * time.Microsecond} {
		if got := p.Latency(rows); got != want {
			t.Errorf("Latency(%d) = %v, want %v", rows, got, want)
		}
	}
	if p.MaxRows() != 8 {
		t.Errorf("MaxRows %d", p.MaxRows())
	}
}

func TestLoadProfilesEveryBatchSize(t *testing.T) {
	root := t.TempDir()
	writeMLP(t, root, "m", "1", 0, 1)
	e := newEngine(t, Options{Source: DirSource{Root: root}})
	if err := e.Load(context.Background(), "m"); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	p := e.models[key{"m", "1"}].profile
	e.mu.Unlock()
	var rows []int
	for _, pt := range p.Points {
		rows = append(rows, pt.Rows)
		if pt.Took <= 0 || pt.Took > time.Second {
			t.Errorf("%d rows took %v", pt.Rows, pt.Took)
		}
	}
	if fmt.Sprint(rows) != "[1 2 4 8]" || p.MaxRows() != 8 {
		t.Errorf("profiled %v rows up to %d, want [1 2 4 8] up to 8", rows, p.MaxRows())
	}
	if math.IsNaN(float64(p.Latency(5))) {
		t.Error("NaN latency")
	}
}

func (e *Engine) loaded(k key) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.models[k]
	return ok
}
