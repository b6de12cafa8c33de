package elastic

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestMedianWithinOnePercent: the streaming median of 10 million values is
// within 1% of the exact median, on one worker and on two.
func TestMedianWithinOnePercent(t *testing.T) {
	const n = 10_000_000
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float64, n)
	for i := range x {
		x[i] = 100 + 15*rng.NormFloat64() + 40*rng.ExpFloat64() // skewed: mean and median differ
	}
	sorted := slices.Clone(x)
	slices.Sort(sorted)
	exact := (sorted[n/2-1] + sorted[n/2]) / 2
	for _, workers := range []int{1, 2} {
		m, _, err := Local(context.Background(), Median{}, Shards(x, nil, 1, workers, 1000))
		if err != nil {
			t.Fatal(err)
		}
		got := m["median"][0]
		if rel := math.Abs(got-exact) / exact; rel > 0.01 {
			t.Errorf("%d workers: median %.4f, exact %.4f (%.3f%% off); want within 1%%", workers, got, exact, 100*rel)
		}
		if m["n"][0] != n {
			t.Errorf("%d workers: counted %v values, want %d", workers, m["n"][0], n)
		}
		t.Logf("%d workers: median %.4f, exact %.4f", workers, got, exact)
	}
}

// TestMomentsDoNotDependOnTheSplit: the mean and variance are the same
// (to rounding) whatever the number of workers and batch size.
func TestMomentsDoNotDependOnTheSplit(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const rows, cols = 100_000, 3
	x := make([]float64, rows*cols)
	for i := range x {
		x[i] = float64(i%cols) + rng.NormFloat64()*float64(1+i%cols)
	}
	var mean, variance [cols]float64
	for i := range rows {
		for j := range cols {
			mean[j] += x[i*cols+j] / rows
		}
	}
	for i := range rows {
		for j := range cols {
			d := x[i*cols+j] - mean[j]
			variance[j] += d * d / rows
		}
	}
	for _, c := range []struct{ workers, batch int }{{1, 1}, {1, 512}, {2, 100}, {4, 7}} {
		m, _, err := Local(context.Background(), Moments{}, Shards(x, nil, cols, c.workers, c.batch))
		if err != nil {
			t.Fatal(err)
		}
		for j := range cols {
			if math.Abs(m["mean"][j]-mean[j]) > 1e-9 || math.Abs(m["variance"][j]-variance[j]) > 1e-9*variance[j] {
				t.Errorf("%+v column %d: mean %v variance %v; want %v %v", c, j, m["mean"][j], m["variance"][j], mean[j], variance[j])
			}
		}
	}
}

// TestBarrierFollowsMembership: a barrier opens when every current member
// arrived, also when a member leaves instead of arriving.
func TestBarrierFollowsMembership(t *testing.T) {
	st := NewMemState(3)
	done := make(chan error, 2)
	for range 2 {
		go func() { done <- st.Barrier(context.Background()) }()
	}
	select {
	case <-done:
		t.Fatal("the barrier opened with 2 of 3 members")
	case <-time.After(50 * time.Millisecond):
	}
	st.Leave() // the third is preempted
	for range 2 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the barrier did not open when the missing member left")
		}
	}
	// A cancelled wait leaves the barrier as it was.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := st.Barrier(ctx); err == nil {
		st.Join()
		t.Fatal("a barrier of 2 opened with 1")
	}
}

func TestPushLengthMismatch(t *testing.T) {
	st := NewMemState(1)
	ctx := context.Background()
	if err := st.Push(ctx, "w", Tensor{1, 2}); err != nil {
		t.Fatal(err)
	}
	if err := st.Push(ctx, "w", Tensor{1}); err == nil {
		t.Fatal("a push of another length was accepted")
	}
	if w, _ := st.Pull(ctx, "w"); !slices.Equal(w, Tensor{1, 2}) {
		t.Fatalf("w = %v after a refused push; want [1 2]", w)
	}
}
