package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/serve"
)

// countingSource counts its Resolve calls.
type countingSource struct {
	Source
	n atomic.Int64
}

func (s *countingSource) Resolve(ctx context.Context, name, version string) (Resolved, error) {
	s.n.Add(1)
	return s.Source.Resolve(ctx, name, version)
}

// A request for a loaded model does not ask the source again (a directory
// source reads the file system each time); one for a model not loaded does.
func TestLoadedModelsResolveFromTheCache(t *testing.T) {
	root := t.TempDir()
	writeMLP(t, root, "m", "1", 0, 1)
	writeMLP(t, root, "other", "1", 0, 2)
	src := &countingSource{Source: DirSource{Root: root}}
	e := newEngine(t, Options{Source: src, Objective: time.Minute})
	if err := e.Load(context.Background(), "m"); err != nil {
		t.Fatal(err)
	}
	src.n.Store(0)
	for range 5 {
		if _, err := e.Infer(context.Background(), request("m", 1)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Infer(context.Background(), &serve.Request{Model: "m", Version: "1", Inputs: []serve.Tensor{pixels(1)}}); err != nil {
		t.Fatal(err)
	}
	if n := src.n.Load(); n != 0 {
		t.Errorf("6 requests for a loaded model asked the source %d times, want 0", n)
	}
	if _, err := e.Infer(context.Background(), request("other", 1)); err != nil {
		t.Fatal(err)
	}
	if n := src.n.Load(); n == 0 {
		t.Error("a request for a model not loaded did not ask the source")
	}
	if _, err := e.Infer(context.Background(), request("missing", 1)); !errors.Is(err, serve.ErrModelNotFound) {
		t.Errorf("a model the source lacks: %v, want ErrModelNotFound", err)
	}
}
