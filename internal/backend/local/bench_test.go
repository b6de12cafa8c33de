package local

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/backend"
)

// BenchmarkStart measures the time from Start to the Started event (the trial
// process exists), one attempt at a time, and reports its p50 and p99.
func BenchmarkStart(b *testing.B) {
	for _, mode := range shimModes {
		b.Run(mode.name, func(b *testing.B) { benchmarkStart(b, Config{WarmShims: mode.warm}) })
	}
}

func benchmarkStart(b *testing.B, cfg Config) {
	be := newBackend(b, cfg)
	root := b.TempDir()
	var lat []time.Duration
	id := int64(0)
	for b.Loop() {
		id++
		s := &backend.StartSpec{AttemptID: id, Argv: []string{"true"}, Workdir: root, Dir: filepath.Join(root, fmt.Sprint(id))}
		t0 := time.Now()
		if err := be.Start(context.Background(), s); err != nil {
			b.Fatal(err)
		}
		expect(b, be, id, backend.Started)
		lat = append(lat, time.Since(t0))
		expect(b, be, id, backend.Exited)
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
