package elastic

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestJobStopAnyMomentResumes: a job stopped at random moments and resumed
// from its checkpoint directory each time ends with the uninterrupted
// job's result (within the median's noise), every value counted exactly
// once.
func TestJobStopAnyMomentResumes(t *testing.T) {
	const n, batch, shards = 2_000_000, 1000, 2
	x, exact := stream(n)
	dir := t.TempDir()
	var checkpoints int
	job := func() *Job {
		return &Job{Alg: Median{}, Shards: shards, CheckpointDir: dir, Every: 5 * time.Millisecond,
			Open: func(ctx context.Context, k int, pos int64) (Source, error) {
				src, err := SliceOpener(x, nil, 1, shards, batch)(ctx, k, pos)
				return &slow{Source: src}, err
			},
			OnCheckpoint: func(context.Context, int64) error { checkpoints++; return nil }}
	}
	rng := rand.New(rand.NewPCG(7, 8))
	stops := 0
	var m Model
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(5+rng.IntN(40))*time.Millisecond)
		var err error
		m, _, err = job().Run(ctx)
		cancel()
		if err == nil {
			break
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		stops++
		if stops > 500 {
			t.Fatal("the job never finished")
		}
	}
	if stops < 3 {
		t.Fatalf("the job was stopped %d times; want several (the test stops it every 5-45 ms)", stops)
	}
	checkMedian(t, m, exact, n)
	if _, err := os.Stat(filepath.Join(dir, StateFile)); err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped %d times, %d checkpoints, median %.4f (exact %.4f)", stops, checkpoints, m["median"][0], exact)
}

// TestJobIncremental: a finished job's state trains on new data only; the
// model then covers both inputs.
func TestJobIncremental(t *testing.T) {
	const n, batch = 400_000, 1000
	x, _ := stream(2 * n)
	first, second := x[:n], x[n:]
	run := func(data []float64, base map[string]Tensor) (Model, *MemState) {
		j := &Job{Alg: Median{}, Shards: 1, Base: base,
			Open: SliceOpener(data, nil, 1, 1, batch)}
		m, st, err := j.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return m, st
	}
	_, st := run(first, nil)
	m, _ := run(second, st.Snapshot())
	if got := int(m["n"][0]); got != 2*n {
		t.Fatalf("the incremental model counted %d values; want %d (both inputs)", got, 2*n)
	}
}

// slow makes each batch take a while, so that the test can stop the job
// at many moments of its run.
type slow struct{ Source }

func (s *slow) Next(ctx context.Context) (*Batch, error) {
	time.Sleep(200 * time.Microsecond)
	return s.Source.Next(ctx)
}

// TestJobEpochsStoppedAnyMoment: a job of 3 passes over the input, stopped
// at random moments and resumed from its checkpoint each time, reads every
// row exactly 3 times (a batch's update and its position are committed
// together, so a stop never keeps one without the other) and its state
// says so: Rows counts the rows of all passes, and each shard's position
// is the end of its third pass.
func TestJobEpochsStoppedAnyMoment(t *testing.T) {
	const n, batch, shards, epochs = 30_000, 100, 3, 3
	x := make([]float64, n)
	for i := range x {
		x[i] = float64(i % 7)
	}
	dir := t.TempDir()
	job := func() *Job {
		return &Job{Alg: Moments{}, Shards: shards, Epochs: epochs, CheckpointDir: dir, Every: 3 * time.Millisecond,
			Open: func(ctx context.Context, k int, pos int64) (Source, error) {
				src, err := SliceOpener(x, nil, 1, shards, batch)(ctx, k, pos)
				return &slow{Source: src}, err
			}}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	stops := 0
	var m Model
	var st *MemState
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(5+rng.IntN(30))*time.Millisecond)
		var err error
		m, st, err = job().Run(ctx)
		cancel()
		if err == nil {
			break
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		stops++
		if stops > 2000 {
			t.Fatal("the job never finished")
		}
	}
	if stops < 3 {
		t.Fatalf("the job was stopped %d times; want several", stops)
	}
	count := int(m["count"][0])
	if count != epochs*n {
		t.Errorf("counted %d rows; want %d (3 passes of %d, each row exactly once a pass)", count, epochs*n, n)
	}
	if mean := m["mean"][0]; math.Abs(mean-3) > 0.01 {
		t.Errorf("mean %.4f; want 3", mean)
	}
	snap := st.Snapshot()
	if got := Rows(snap); got != int64(count) {
		t.Errorf("Rows says %d rows read; the algorithm counted %d", got, count)
	}
	for k := range shards {
		p := snap[posKey(k)]
		if len(p) != posLen || p[2] != epochs-1 || p[0] < float64(n/shards) {
			t.Errorf("shard %d position %v; want the last of %d passes read to its end", k, p, epochs)
		}
	}
	t.Logf("stopped %d times; %d rows counted for %d", stops, count, epochs*n)
}

// TestPassesAreAtLeastOne: zero passes is an error, not a shard marked done.
func TestPassesAreAtLeastOne(t *testing.T) {
	st := NewMemState(1)
	err := RunShardPasses(context.Background(), Moments{}, st, 0, 0, SliceOpener([]float64{1}, nil, 1, 1, 1))
	if err == nil {
		t.Fatal("0 passes: no error")
	}
	if d, _ := st.Pull(context.Background(), doneKey(0)); d != nil {
		t.Fatalf("0 passes marked the shard done: %v", d)
	}
}
