package fm

import (
	"context"
	"errors"
	"math/rand/v2"
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
// random moments and resumed from its checkpoint each time (the machine's
// whole state, w, v and the AdaGrad sums, is one tensor of the state, and
// Initialize is not run again over it) ends with the test log loss of an
// uninterrupted run, within 1%, and has trained on every row exactly once.
func TestStoppedAndResumedLikeUninterrupted(t *testing.T) {
	// The same rows under the race detector: it costs this package only a
	// few times, and a shorter run would be stopped too few times.
	const d, batch, rows = 20, 64, 100_000
	x, y, _ := synthetic(Binary, rows, d, 1)
	xte, yte, _ := synthetic(Binary, 10_000, d, 2)
	f, err := New(Config{Predictor: Binary, Features: d, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	testLoss := func(m elastic.Model) float64 {
		sm, err := f.Save(m)
		if err != nil {
			t.Fatal(err)
		}
		lm, err := Load(sm)
		if err != nil {
			t.Fatal(err)
		}
		l, _ := meanLoss(Binary, xte, yte, d, func(x []float64) float64 { return lm.Scores(x)[0] })
		return l
	}
	job := func(dir string) *elastic.Job {
		return &elastic.Job{Alg: f, Shards: 2, CheckpointDir: dir, Every: 5 * time.Millisecond,
			Open: func(ctx context.Context, k int, pos int64) (elastic.Source, error) {
				src, err := elastic.SliceOpener(x, y, d, 2, batch)(ctx, k, pos)
				return slowSource{src}, err
			}}
	}
	m, _, err := job(t.TempDir()).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := testLoss(m)

	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(11, 12))
	stops := 0
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(10+rng.IntN(60))*time.Millisecond)
		m, _, err = job(dir).Run(ctx)
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
	got := testLoss(m)
	trained := m["params"][0]
	t.Logf("stopped %d times: log loss %.5f, %v rows trained; uninterrupted %.5f, %d rows", stops, got, trained, want, rows)
	if stops < 3 {
		t.Fatalf("stopped %d times; want several", stops)
	}
	if trained != float64(rows) {
		t.Errorf("%v rows trained after %d stops; want every one of the %d, exactly once", trained, stops, rows)
	}
	if got > want*1.01 {
		t.Errorf("log loss %.5f after %d stops; uninterrupted %.5f; want within 1%%", got, stops, want)
	}
}
