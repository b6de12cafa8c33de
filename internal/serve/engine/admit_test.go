package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

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
	clock.Advance(2 * DefaultObjective)
	if _, err := e.Infer(context.Background(), request("s1", 1)); err != nil { // s1: 2 requests, just now; s2: 3
		t.Fatal(err)
	}
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
