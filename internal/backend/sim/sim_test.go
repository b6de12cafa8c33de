package sim_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
	simb "github.com/virga-ml/virga/internal/backend/sim"
	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/clock"
	"github.com/virga-ml/virga/internal/spec"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// curves: every configuration trains 3 steps of one minute each; the value
// at step s is 10-s.
type curves struct{}

func (curves) Config(map[string]any) (int, error) { return 0, nil }
func (curves) Steps(map[string]any) int           { return 3 }
func (curves) StepTime(int, int) time.Duration    { return time.Minute }
func (curves) Value(_ int, step int) float64      { return float64(10 - step) }

// window is up except in [down, up).
type window struct{ down, up time.Time }

func (w window) Up(t time.Time) (bool, time.Time) {
	switch {
	case t.Before(w.down):
		return true, w.down
	case t.Before(w.up):
		return false, w.up
	}
	return true, time.Time{}
}

var node = virga.Resources{CPU: 8}

func pool(name string, overhead, warning time.Duration) *capacity.Pool {
	return &capacity.Pool{Name: name, Node: node, MaxNodes: 1, Market: spec.Spot, Billing: capacity.PerSecond,
		RestartOverhead: overhead, Warning: warning, PriceSeries: capacity.Constant(1)}
}

func start(t *testing.T, b *simb.Backend, id int64, poolName string, ckpt string) error {
	t.Helper()
	return b.Start(context.Background(), &backend.StartSpec{AttemptID: id, Resources: node, Pool: poolName, Checkpoint: ckpt,
		Env: map[string]string{"VIRGA_HPARAMS": `{"lr": 0.1}`, "VIRGA_CHECKPOINT_DIR": t.TempDir()}})
}

// advance moves the clock to the backend's next event and runs it.
func advance(t *testing.T, clk *clock.Fake, b *simb.Backend) time.Time {
	t.Helper()
	next := b.Next()
	if next.IsZero() {
		t.Fatal("nothing scheduled")
	}
	clk.Set(next)
	b.Advance()
	return next
}

func TestTrialRunsItsCurve(t *testing.T) {
	clk := clock.NewFake(t0)
	b, err := simb.New(simb.Config{Clock: clk, Curves: curves{}, Metric: "loss",
		Pools: []simb.Pool{{Pool: pool("od", 2*time.Minute, 0)}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := start(t, b, 1, "", ""); err != nil {
		t.Fatal(err)
	}
	// The one node is taken: a second start does not fit.
	if err := start(t, b, 2, "od", ""); !errors.Is(err, virga.ErrNoCapacity) {
		t.Fatalf("second start: %v, want ErrNoCapacity", err)
	}
	evs := b.TakeEvents()
	if len(evs) != 1 || evs[0].Kind != backend.Started || !evs[0].Time.Equal(t0) || evs[0].Pool != "od" {
		t.Fatalf("events %+v, want Started at once on od", evs)
	}
	// It makes progress after the overhead; steps end one a minute, each
	// a report. Nothing is due at the end of the overhead: a live trial
	// shows nothing then, and a loop stepped at that instant would see it
	// at a checkpoint, its restart paid and nothing done (and an
	// experiment policy could move it off for nothing).
	for step := int64(1); step <= 3; step++ {
		at := advance(t, clk, b)
		if want := t0.Add(2*time.Minute + time.Duration(step)*time.Minute); !at.Equal(want) {
			t.Fatalf("step %d at %v, want %v", step, at, want)
		}
		reps := b.TakeReports()
		if len(reps) != 1 || reps[0].Step != step || reps[0].Metrics["loss"] != float64(10-step) || reps[0].Final != (step == 3) {
			t.Fatalf("step %d: reports %+v", step, reps)
		}
		b.Decided(reps[0], false, nil)
	}
	evs = b.TakeEvents()
	if len(evs) != 1 || evs[0].Kind != backend.Exited || evs[0].ExitCode == nil || *evs[0].ExitCode != 0 {
		t.Fatalf("after the last step: %+v, want Exited 0", evs)
	}
	if got := b.Free(); got != node {
		t.Errorf("free %v after the exit, want %v", got, node)
	}
}

func TestReclaimWarnsThenLosesTheStep(t *testing.T) {
	for _, save := range []bool{false, true} {
		clk := clock.NewFake(t0)
		// Down from 1m50s to 10m, warned 30s before: 20s into step 2.
		p := simb.Pool{Pool: pool("spot", 0, 30*time.Second), Availability: window{t0.Add(110 * time.Second), t0.Add(10 * time.Minute)}}
		b, err := simb.New(simb.Config{Clock: clk, Curves: curves{}, Metric: "loss", Pools: []simb.Pool{p}, SaveOnStop: save})
		if err != nil {
			t.Fatal(err)
		}
		if err := start(t, b, 1, "spot", ""); err != nil {
			t.Fatal(err)
		}
		b.TakeEvents()
		advance(t, clk, b) // runs at once
		advance(t, clk, b) // step 1 at 1m
		r := b.TakeReports()[0]
		b.Decided(r, false, nil)
		at := advance(t, clk, b) // the warning at 1m20s
		if !at.Equal(t0.Add(80 * time.Second)) {
			t.Fatalf("save %v: warning at %v", save, at)
		}
		evs := b.TakeEvents()
		if len(evs) != 1 || evs[0].Kind != backend.Exited || !evs[0].Preempted || evs[0].Signal != "terminated" {
			t.Fatalf("save %v: events %+v, want Exited Preempted by SIGTERM", save, evs)
		}
		lost, _ := b.Thrown()
		reps := b.TakeReports()
		if save {
			// It saves the 20s of step 2 it did, and reports them.
			if lost != 0 || len(reps) != 1 || reps[0].Step != 1 || reps[0].Metrics[simb.ProgressMetric] != 20 {
				t.Errorf("save on stop: lost %s, reports %+v", lost, reps)
			}
		} else if lost != 20*time.Second || len(reps) != 0 {
			t.Errorf("lost %s, reports %+v, want 20s and none", lost, reps)
		}
		// Down: starts are refused until it is up again.
		advance(t, clk, b)
		if err := start(t, b, 2, "spot", ""); !errors.Is(err, virga.ErrNoCapacity) {
			t.Errorf("save %v: start on a down pool: %v", save, err)
		}
		if ps := b.Pools(); ps[0].Up || !ps[0].Next.Equal(t0.Add(10*time.Minute)) {
			t.Errorf("save %v: pool status %+v", save, ps[0])
		}
	}
}

func TestCheckpointsNameTheirProgress(t *testing.T) {
	dir := t.TempDir()
	if err := (simb.Checkpoints{}).Restore("trial-3@2+5000", dir); err != nil {
		t.Fatal(err)
	}
	info, err := simb.Checkpoints{}.SaveFor("trial-4", dir)
	if err != nil || info.ID != "trial-4@2+5000" {
		t.Fatalf("SaveFor = %+v, %v", info, err)
	}
	// A restored attempt goes on from step 2 with 5µs of step 3 done.
	clk := clock.NewFake(t0)
	b, err := simb.New(simb.Config{Clock: clk, Curves: curves{}, Metric: "loss", Pools: []simb.Pool{{Pool: pool("od", 0, 0)}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := start(t, b, 1, "", info.ID); err != nil {
		t.Fatal(err)
	}
	b.TakeEvents()
	advance(t, clk, b) // runs
	at := advance(t, clk, b)
	if want := t0.Add(time.Minute - 5*time.Microsecond); !at.Equal(want) {
		t.Errorf("step 3 ends at %v, want %v", at, want)
	}
	if r := b.TakeReports(); len(r) != 1 || r[0].Step != 3 {
		t.Errorf("reports %+v", r)
	}
}
