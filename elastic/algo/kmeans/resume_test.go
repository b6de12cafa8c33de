package kmeans

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/virga-ml/virga/elastic"
)

type slowSource struct{ elastic.Source }

func (s slowSource) Next(ctx context.Context) (*elastic.Batch, error) {
	time.Sleep(200 * time.Microsecond)
	return s.Source.Next(ctx)
}

// TestStoppedAndResumedLikeUninterrupted: a k-means job of two workers
// stopped at random moments and resumed from its checkpoint each time ends
// with an inertia within 2% of an uninterrupted run's.
func TestStoppedAndResumedLikeUninterrupted(t *testing.T) {
	const d, k, batch = 8, 6, 100
	rows := 40_000
	if raceEnabled {
		rows = 10_000
	}
	x := blobs(rows, d, 5, 9)
	job := func(dir string) *elastic.Job {
		return &elastic.Job{Alg: &KMeans{K: k, Seed: 4}, Shards: 2, CheckpointDir: dir, Every: 5 * time.Millisecond,
			Open: func(ctx context.Context, s int, pos int64) (elastic.Source, error) {
				src, err := elastic.SliceOpener(x, nil, d, 2, batch)(ctx, s, pos)
				return slowSource{src}, err
			}}
	}
	inertia := func(m elastic.Model) float64 {
		km, err := FromModel(m, k)
		if err != nil {
			t.Fatal(err)
		}
		return km.Inertia(x)
	}
	m, _, err := job(t.TempDir()).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := inertia(m)
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(13, 14))
	stops := 0
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(5+rng.IntN(30))*time.Millisecond)
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
	got := inertia(m)
	t.Logf("stopped %d times: inertia %.6g; uninterrupted %.6g (%+.2f%%)", stops, got, want, 100*(got/want-1))
	if stops < 3 {
		t.Fatalf("stopped %d times; want several", stops)
	}
	if got > want*1.02 {
		t.Errorf("inertia %.6g after %d stops; uninterrupted %.6g; want within 2%%", got, stops, want)
	}
}
