package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/runtime/mlp"
)

// TestAdmissionKeepsThePopularModel: with room for one model, a model asked
// for less often than the loaded one is refused (NotAdmitted) rather than
// evicting it; once asked for more often, it takes the place. Without
// admission (plain LRU) the rare model evicts the popular one at once.
func TestAdmissionKeepsThePopularModel(t *testing.T) {
	for _, admission := range []bool{true, false} {
		root := t.TempDir()
		a := writeMLP(t, root, "popular", "1", 0, 1)
		writeMLP(t, root, "rare", "1", 1, 2)
		e := newEngine(t, Options{Source: DirSource{Root: root}, MemoryBudget: modelMemory(t, a) + 1, Admission: admission})
		for range 3 {
			if _, err := e.Infer(context.Background(), request("popular", 1)); err != nil {
				t.Fatal(err)
			}
		}
		_, err := e.Infer(context.Background(), request("rare", 1))
		var refused *serve.RefusedError
		if !admission {
			if err != nil {
				t.Fatalf("LRU: rare: %v, want it to evict the idle popular model", err)
			}
			continue
		}
		if !errors.As(err, &refused) || refused.Reason != "NotAdmitted" {
			t.Fatalf("rare, asked for once against popular's 3: %v, want NotAdmitted", err)
		}
		e.mu.Lock()
		popularLoaded := e.loadedLocked("popular")
		e.mu.Unlock()
		if !popularLoaded {
			t.Fatal("popular was evicted for a model that was not admitted")
		}
		// Rare's next requests count: at the fourth, it is asked for more
		// than popular and takes its place.
		var last error
		for range 3 {
			_, last = e.Infer(context.Background(), request("rare", 1))
		}
		if last != nil {
			t.Fatalf("rare, asked for 4 times against popular's 3: %v, want it admitted", last)
		}
		if ready, _ := e.ModelReady(context.Background(), "rare", "1"); !ready {
			t.Error("rare not ready after its admission")
		}
	}
}

// writeMLPHidden is writeMLP with a hidden layer of hidden units.
func writeMLPHidden(t *testing.T, root, name string, hidden int) string {
	t.Helper()
	dir := filepath.Join(root, name, "1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f := mlp.File{Inputs: 64, Hidden: hidden, Classes: 10, InputScale: 1.0 / 16}
	f.Params = make([]float64, hidden*64+hidden+10*hidden+10)
	writeJSON(t, filepath.Join(dir, "mlp.json"), f)
	writeJSON(t, filepath.Join(dir, serve.ManifestFile), serve.Manifest{Format: mlp.Format, File: "mlp.json", MaxBatch: 8, Signature: f.Signature()})
	return dir
}

// waitIdle waits until no model holds a reference: a request's reference
// is dropped just after its answer is sent.
func waitIdle(e *Engine) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		busy := false
		for _, ent := range e.models {
			busy = busy || ent.refs > 0
		}
		if !busy {
			return
		}
		ch := e.changed
		e.mu.Unlock()
		<-ch
		e.mu.Lock()
	}
}

func loaded(e *Engine, name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.loadedLocked(name)
}

// TestCostAwareAdmissionCountsEveryVictim: a model that needs two loaded
// models' room is admitted only when asked for more than twice as often as
// both together; frequency admission lets it in as soon as it beats each
// alone, and it evicts both.
func TestCostAwareAdmissionCountsEveryVictim(t *testing.T) {
	for _, costAware := range []bool{false, true} {
		root := t.TempDir()
		s1, s2 := writeMLPHidden(t, root, "s1", 8), writeMLPHidden(t, root, "s2", 8)
		big := writeMLPHidden(t, root, "big", 16)
		budget := modelMemory(t, s1) + modelMemory(t, s2)
		if mb := modelMemory(t, big); mb > budget || mb+modelMemory(t, s1) <= budget {
			t.Fatalf("big holds %d bytes: want it to fit %d only without both", mb, budget)
		}
		clock := newFakeClock()
		e := newEngine(t, Options{Source: DirSource{Root: root}, MemoryBudget: budget, Clock: clock,
			Admission: !costAware, CostAware: costAware})
		for range 3 {
			for _, name := range []string{"s1", "s2"} {
				if _, err := e.Infer(context.Background(), request(name, 1)); err != nil {
					t.Fatal(err)
				}
			}
		}
		waitIdle(e)
		clock.Advance(2 * DefaultObjective) // none was requested within the objective
		var err error
		for range 4 {
			_, err = e.Infer(context.Background(), request("big", 1))
		}
		if !costAware {
			if err != nil || loaded(e, "s1") || loaded(e, "s2") {
				t.Fatalf("frequency admission: big asked 4 times against 3 and 3: %v (s1 loaded %v, s2 %v), want big to evict both",
					err, loaded(e, "s1"), loaded(e, "s2"))
			}
			continue
		}
		var refused *serve.RefusedError
		if !errors.As(err, &refused) || refused.Reason != "NotAdmitted" {
			t.Fatalf("cost-aware: big asked 4 times against 3 and 3: %v, want NotAdmitted", err)
		}
		if !loaded(e, "s1") || !loaded(e, "s2") {
			t.Fatal("cost-aware: a victim was evicted for a model that was not admitted")
		}
		for range 9 { // 13 > 2 x (3 + 3)
			_, err = e.Infer(context.Background(), request("big", 1))
		}
		if err != nil {
			t.Fatalf("cost-aware: big asked 13 times against 3 and 3: %v, want it admitted", err)
		}
		if loaded(e, "s1") || loaded(e, "s2") || !loaded(e, "big") {
			t.Fatal("cost-aware: big admitted but s1 or s2 still loaded, or big not")
		}
	}
}

// TestCostAwareKeepsTheJustUsedModel: a model requested within the last
// objective is not evicted, even when it is the least asked for; the
// next one is.
func TestCostAwareKeepsTheJustUsedModel(t *testing.T) {
	root := t.TempDir()
	s1, _ := writeMLPHidden(t, root, "s1", 8), writeMLPHidden(t, root, "s2", 8)
	writeMLPHidden(t, root, "x", 8)
	clock := newFakeClock()
	e := newEngine(t, Options{Source: DirSource{Root: root}, MemoryBudget: 2 * modelMemory(t, s1), Clock: clock, CostAware: true})
	for _, name := range []string{"s2", "s2", "s2", "s1"} {
		if _, err := e.Infer(context.Background(), request(name, 1)); err != nil {
			t.Fatal(err)
		}
	}
	waitIdle(e)
	clock.Advance(2 * DefaultObjective)
	if _, err := e.Infer(context.Background(), request("s1", 1)); err != nil { // s1: 2 requests, just now; s2: 3
		t.Fatal(err)
	}
	waitIdle(e)
	var err error
	for range 7 { // 7 > 2 x 3
		_, err = e.Infer(context.Background(), request("x", 1))
	}
	if err != nil {
		t.Fatalf("x asked 7 times against s2's 3: %v, want it admitted", err)
	}
	if !loaded(e, "s1") || loaded(e, "s2") {
		t.Fatalf("s1 (asked for less, but within the objective) loaded %v, s2 loaded %v: want s2 evicted, not s1", loaded(e, "s1"), loaded(e, "s2"))
	}
}

// TestMemoryBudgetUnderZipfLoadCostAware: TestMemoryBudgetUnderZipfLoad's
// load with cost-aware admission: the budget is never exceeded, and every
// request is answered or refused NotAdmitted (none fails for an eviction
// race or waits for room in vain).
func TestMemoryBudgetUnderZipfLoadCostAware(t *testing.T) {
	root := t.TempDir()
	const models = 30
	var per int64
	for i := range models {
		per = modelMemory(t, writeMLP(t, root, fmt.Sprintf("m%02d", i), "1", i%10, uint64(i)))
	}
	budget := 5 * per
	e := newEngine(t, Options{Source: DirSource{Root: root}, MemoryBudget: budget, Objective: time.Minute, Instances: 2, CostAware: true})
	const workers, each = 16, 60
	var wg sync.WaitGroup
	var answered, notAdmitted atomic.Int64
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			zipf := rand.NewZipf(rng, 1.1, 1, models-1)
			for range each {
				i := int(zipf.Uint64())
				resp, err := e.Infer(context.Background(), request(fmt.Sprintf("m%02d", i), 1+rng.IntN(3)))
				var refused *serve.RefusedError
				switch {
				case err == nil && labelOf(t, resp) != int64(i%10):
					errs <- fmt.Errorf("m%02d answered label %d, want %d", i, labelOf(t, resp), i%10)
				case err == nil:
					answered.Add(1)
				case errors.As(err, &refused) && refused.Reason == "NotAdmitted":
					notAdmitted.Add(1)
				default:
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("request failed: %v", err)
	}
	e.mu.Lock()
	peak, used := e.peak, e.used
	e.mu.Unlock()
	if peak > budget || used > budget {
		t.Errorf("memory peaked at %d bytes (%d at the end), over the budget of %d", peak, used, budget)
	}
	if answered.Load() == 0 || notAdmitted.Load() == 0 {
		t.Errorf("%d answered, %d not admitted: want both (30 models, room for 5)", answered.Load(), notAdmitted.Load())
	}
	t.Logf("%d answered, %d not admitted, %.0f loads, %.0f evictions, peak %d of %d bytes", answered.Load(), notAdmitted.Load(),
		counterSum(t, e, "virga_serve_loads_total"), counterSum(t, e, "virga_serve_evictions_total"), peak, budget)
}
