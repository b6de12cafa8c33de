package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/virga-ml/virga/internal/serve"
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
