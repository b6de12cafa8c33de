package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/batch"
	"github.com/virga-ml/virga/internal/serve/runtime"
	"github.com/virga-ml/virga/internal/serve/runtime/mlp"
)

// clockedLoader loads virga.mlp/v1 models whose every call takes step of a
// fake clock's time, and the next call after stall is set takes that long
// instead.
type clockedLoader struct {
	clock *fakeClock
	step  time.Duration
	stall atomic.Int64
}

func (l *clockedLoader) Load(dir string, m serve.Manifest) (runtime.Model, error) {
	model, err := mlp.Loader{}.Load(dir, m)
	if err != nil {
		return nil, err
	}
	return &clockedModel{Model: model, l: l}, nil
}

type clockedModel struct {
	runtime.Model
	l *clockedLoader
}

func (m *clockedModel) Run(ctx context.Context, in []serve.Tensor) ([]serve.Tensor, error) {
	d := m.l.step
	if s := m.l.stall.Swap(0); s > 0 {
		d = time.Duration(s)
	}
	m.l.clock.Advance(d)
	return m.Model.Run(ctx, in)
}

// One batch stalled past the objective (the process descheduled, a
// collection) makes the dispatcher's profile refuse requests for a while,
// not for ever: with every request refused no batch runs, so the stall must
// age out of the correction by time alone.
func TestAStalledBatchIsForgotten(t *testing.T) {
	clock := newFakeClock()
	l := &clockedLoader{clock: clock, step: time.Millisecond}
	root := t.TempDir()
	writeMLP(t, root, "m", "1", 0, 1)
	e := newEngine(t, Options{Source: DirSource{Root: root}, Clock: clock, Objective: 100 * time.Millisecond,
		Runtimes: map[string]runtime.Loader{mlp.Format: l},
		Policy:   func(string, string) batch.Policy { return &batch.Deadline{} }})
	if err := e.Load(context.Background(), "m"); err != nil {
		t.Fatal(err)
	}
	infer := func() error {
		_, err := e.Infer(context.Background(), request("m", 1))
		return err
	}
	if err := infer(); err != nil {
		t.Fatalf("before the stall: %v", err)
	}
	l.stall.Store(int64(time.Second))
	if err := infer(); err != nil {
		t.Fatalf("the stalled request itself is answered (late): %v", err)
	}
	var refused *serve.RefusedError
	if err := infer(); !errors.As(err, &refused) || refused.Reason != "DeadlineUnmeetable" {
		t.Fatalf("right after a 1 s batch of a 1 ms model, a 100 ms request: %v, want refused DeadlineUnmeetable", err)
	}
	clock.Advance(adaptiveAge + time.Millisecond)
	if err := infer(); err != nil {
		t.Fatalf("%v after the stall, no batch run since: %v, want it served", adaptiveAge, err)
	}
}

// The tabled latencies are the profile's, at every batch size and past the
// largest.
func TestAdaptiveTableAgreesWithTheProfile(t *testing.T) {
	p := &Profile{Max: 1000, Points: []Point{{1, 7 * time.Microsecond}, {2, 9 * time.Microsecond}, {512, 80 * time.Microsecond}, {1000, 150 * time.Microsecond}}}
	a := newAdaptive(p)
	for r := 0; r <= 1100; r++ {
		if got, want := a.Latency(r), p.Latency(r); got != want {
			t.Fatalf("Latency(%d) = %v, the profile's %v", r, got, want)
		}
	}
}

func BenchmarkAdaptiveLatency(b *testing.B) {
	p := &Profile{Max: 1024}
	for r := 1; r < 1024; r *= 2 {
		p.Points = append(p.Points, Point{r, time.Duration(r) * time.Microsecond})
	}
	p.Points = append(p.Points, Point{1024, 1024 * time.Microsecond})
	a := newAdaptive(p)
	var sink time.Duration
	for b.Loop() {
		for r := 1; r <= 1024; r++ {
			sink += a.Latency(r)
		}
	}
	_ = sink
}

// The table the deadline policy plans with is the profile's latency at
// every batch size, the correction included, and follows the correction.
func TestAdaptiveTableFollowsTheCorrection(t *testing.T) {
	a := newAdaptive(&Profile{Points: []Point{{1, 10 * time.Microsecond}, {8, 20 * time.Microsecond}, {64, 200 * time.Microsecond}}, Max: 64})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	check := func(when string) {
		t.Helper()
		table, eff := a.LatencyTable()
		if len(table) != 65 {
			t.Fatalf("%s: table of %d entries, want 65", when, len(table))
		}
		for r := 1; r <= 64; r++ {
			if table[r] != a.Latency(r) {
				t.Fatalf("%s: table[%d] = %v, Latency = %v", when, r, table[r], a.Latency(r))
			}
		}
		if want := batch.EfficientRows(table); eff != want {
			t.Errorf("%s: efficient %d, want %d", when, eff, want)
		}
	}
	check("at load")
	a.observe(now, 8, 50*time.Microsecond) // 30 us over the profile
	check("after a slow batch")
	a.expire(now.Add(2 * adaptiveAge))
	check("after the correction expired")
}
