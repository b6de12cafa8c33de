package memory_test

import (
	"testing"

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
