package elastic

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestJobStopAnyMomentResumes: a job stopped at random moments and resumed
// from its checkpoint directory each time ends with the uninterrupted
// job's result (within the median's noise); at most one batch per shard is
// counted twice per stop.
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
	checkMedian(t, m, exact, n, batch, stops*shards)
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
