package memory_test

import (
	"context"
	"errors"
	"testing"

	"github.com/virga-ml/virga"

	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/memory"
	"github.com/virga-ml/virga/internal/store/storetest"
)

func open(t testing.TB) *memory.Store {
	s := memory.New()
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformance runs the suite every store passes. Its Reopen and
// ReasonsBackfilled subtests skip: a memory store has nothing to reopen and
// no older schema to migrate from.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t) })
}

// BenchmarkApplyMetrics measures one Apply of 64 metrics and 8 trial updates.
func BenchmarkApplyMetrics(b *testing.B) { storetest.BenchmarkApplyMetrics(b, open(b)) }

// BenchmarkApplyIngest measures one Apply of 32 metrics of 32 trials.
func BenchmarkApplyIngest(b *testing.B) { storetest.BenchmarkApplyIngest(b, open(b)) }

// BenchmarkTrialLifecycle measures one trial's life from creation to end.
func BenchmarkTrialLifecycle(b *testing.B) { storetest.BenchmarkTrialLifecycle(b, open(b)) }

// TestClosed checks that a closed store refuses every call with ErrClosed
// and that closing again is no error.
func TestClosed(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	e := &virga.Experiment{Name: "x", State: virga.ExperimentActive}
	if err := s.Apply(ctx, &store.Batch{Experiments: []*virga.Experiment{e}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close again: %v", err)
	}
	if _, err := s.Experiment(ctx, e.ID); !errors.Is(err, memory.ErrClosed) {
		t.Errorf("Experiment after Close: %v, want ErrClosed", err)
	}
	if err := s.Apply(ctx, &store.Batch{Experiments: []*virga.Experiment{{Name: "y"}}}); !errors.Is(err, memory.ErrClosed) {
		t.Errorf("Apply after Close: %v, want ErrClosed", err)
	}
	if _, err := s.Models(ctx); !errors.Is(err, memory.ErrClosed) {
		t.Errorf("Models after Close: %v, want ErrClosed", err)
	}
}

// TestFailedBatchGivesBackIDs checks that the IDs a failed batch took are
// given again, as SQLite gives them: the next experiment after a failure
// gets the next ID after the last stored one.
func TestFailedBatchGivesBackIDs(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	first := &virga.Experiment{Name: "first"}
	if err := s.Apply(ctx, &store.Batch{Experiments: []*virga.Experiment{first}}); err != nil {
		t.Fatal(err)
	}
	err := s.Apply(ctx, &store.Batch{Experiments: []*virga.Experiment{{Name: "doomed"}, {Name: "doomed too"}},
		Trials: []*virga.Trial{{ExperimentID: 999, Seq: 1}}})
	if !errors.Is(err, virga.ErrNotFound) {
		t.Fatalf("Apply(trial of a missing experiment) = %v, want ErrNotFound", err)
	}
	next := &virga.Experiment{Name: "next"}
	if err := s.Apply(ctx, &store.Batch{Experiments: []*virga.Experiment{next}}); err != nil {
		t.Fatal(err)
	}
	if next.ID != first.ID+1 {
		t.Errorf("ID after a failed batch = %d, want %d", next.ID, first.ID+1)
	}
}

// TestCanceledContext checks that a done context stops a call before it
// changes anything.
func TestCanceledContext(t *testing.T) {
	s := open(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e := &virga.Experiment{Name: "x"}
	if err := s.Apply(ctx, &store.Batch{Experiments: []*virga.Experiment{e}}); !errors.Is(err, context.Canceled) || e.ID != 0 {
		t.Errorf("Apply(canceled) = %v, ID %d; want context.Canceled, 0", err, e.ID)
	}
	if es, err := s.Experiments(context.Background(), store.ExperimentFilter{}); err != nil || len(es) != 0 {
		t.Errorf("Experiments = %v, %v; want none", es, err)
	}
}
