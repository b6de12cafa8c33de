package engine

import (
	"context"
	"testing"
	"time"
)

// BenchmarkInferMLP is one request's way through the engine (checks, queue,
// dispatcher, runtime, answer) for the digits network, from parallel
// callers.
func BenchmarkInferMLP(b *testing.B) {
	root := b.TempDir()
	writeMLP(b, root, "m", "1", 0, 1)
	e := newEngine(b, Options{Source: DirSource{Root: root}, Objective: time.Minute})
	if err := e.Load(context.Background(), "m"); err != nil {
		b.Fatal(err)
	}
	b.RunParallel(func(pb *testing.PB) {
		r := request("m", 1)
		for pb.Next() {
			if _, err := e.Infer(context.Background(), r); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
