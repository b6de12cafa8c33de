package linear

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/virga-ml/virga/elastic"
)

// slowSource makes each batch take a while, so that a job can be stopped
// at many moments of its run.
type slowSource struct{ elastic.Source }

func (s slowSource) Next(ctx context.Context) (*elastic.Batch, error) {
	time.Sleep(100 * time.Microsecond)
	return s.Source.Next(ctx)
}

// TestStoppedAndResumedLikeUninterrupted: a job of two workers stopped at
// random moments and resumed from its checkpoint each time (the learner's
// whole state, every model's weights included, is one tensor of the state)
// ends with the log loss of an uninterrupted run, within 1%.
func TestStoppedAndResumedLikeUninterrupted(t *testing.T) {
	const d, batch = 20, 64
	rows := 100_000
	if raceEnabled {
		rows = 30_000
	}
	x, y, _, _ := synthetic(Binary, rows, d, 1)
	xte, yte, _, _ := synthetic(Binary, 10_000, d, 2)
	testLoss := func(m elastic.Model, l *Learner) float64 {
		sm, err := l.Save(m)
		if err != nil {
			t.Fatal(err)
		}
		lm, err := Load(sm)
		if err != nil {
			t.Fatal(err)
		}
		var loss float64
		for i := range yte {
			loss += lossOf(Binary, lm.Scores(xte[i*d:(i+1)*d]), yte[i]) / float64(len(yte))
		}
		return loss
	}
	job := func(l *Learner, dir string) *elastic.Job {
		return &elastic.Job{Alg: l, Shards: 2, CheckpointDir: dir, Every: 5 * time.Millisecond,
			Open: func(ctx context.Context, k int, pos int64) (elastic.Source, error) {
				src, err := elastic.SliceOpener(x, y, d, 2, batch)(ctx, k, pos)
				return slowSource{src}, err
			}}
	}
	l, err := New(Config{Predictor: Binary, Features: d})
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := job(l, t.TempDir()).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := testLoss(m, l)

	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(11, 12))
	stops := 0
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(10+rng.IntN(60))*time.Millisecond)
		m, _, err = job(l, dir).Run(ctx)
		cancel()
		if err == nil {
			break
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		if stops++; stops > 1000 {
			t.Fatal("the job never finished")
		}
	}
	got := testLoss(m, l)
	t.Logf("stopped %d times: log loss %.5f; uninterrupted %.5f", stops, got, want)
	if stops < 3 {
		t.Fatalf("stopped %d times; want several", stops)
	}
	if got > want*1.01 {
		t.Errorf("log loss %.5f after %d stops; uninterrupted %.5f; want within 1%%", got, stops, want)
	}
}

// TestOneShardResumedBitForBit: a job of one shard (its updates in one
// order whatever the stops) over several passes, stopped at random moments
// and resumed from its checkpoint each time, ends with the very model of an
// uninterrupted run, bit for bit: every number the learner's updates depend
// on (rows trained, which set the step size and the validation weights,
// the moments, every model's weights and validation sums) is in the
// checkpoint, none in the Learner or a worker.
func TestOneShardResumedBitForBit(t *testing.T) {
	const d, batch, passes = 8, 32, 3
	x, y, _, _ := synthetic(Binary, 6_000, d, 3)
	job := func(dir string) *elastic.Job {
		// a new Learner each run, as a process started again has
		l, err := New(Config{Predictor: Binary, Features: d, StandardizeRows: 4_000})
		if err != nil {
			t.Fatal(err)
		}
		return &elastic.Job{Alg: l, Shards: 1, Epochs: passes, CheckpointDir: dir, Every: 5 * time.Millisecond,
			Open: func(ctx context.Context, k int, pos int64) (elastic.Source, error) {
				src, err := elastic.SliceOpener(x, y, d, 1, batch)(ctx, k, pos)
				return slowSource{src}, err
			}}
	}
	want, _, err := job("").Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(5, 6))
	stops := 0
	var got elastic.Model
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(5+rng.IntN(30))*time.Millisecond)
		got, _, err = job(dir).Run(ctx)
		cancel()
		if err == nil {
			break
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		if stops++; stops > 1000 {
			t.Fatal("the job never finished")
		}
	}
	if stops < 3 {
		t.Fatalf("stopped %d times; want several", stops)
	}
	for k, w := range want {
		if !slices.Equal(got[k], w) {
			t.Errorf("%q after %d stops differs from the uninterrupted run's:\n got %v\nwant %v", k, stops, got[k], w)
		}
	}
	t.Logf("stopped %d times; the model is the uninterrupted run's, bit for bit", stops)
}
