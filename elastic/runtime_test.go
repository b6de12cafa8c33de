package elastic

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// behind is one URL whose coordinator can be replaced (a restart).
type behind struct {
	mu sync.Mutex
	h  http.Handler
}

func (b *behind) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	h := b.h
	b.mu.Unlock()
	h.ServeHTTP(w, r)
}

func (b *behind) set(h http.Handler) {
	b.mu.Lock()
	b.h = h
	b.mu.Unlock()
}

// TestRestartedCoordinatorRefusesOldWorkers: a worker of a coordinator that
// restarted from a checkpoint cannot go on pushing as if nothing happened
// (its ID may be a new worker's): its calls are refused with ErrNotMember,
// and the shard it held is free for the workers of the new coordinator.
func TestRestartedCoordinatorRefusesOldWorkers(t *testing.T) {
	ctx := context.Background()
	c1 := NewCoordinator(NewMemState(0))
	c1.Shards = 2
	b := &behind{h: c1}
	srv := httptest.NewServer(b)
	defer srv.Close()
	old, err := Join(ctx, srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if c, err := old.Claim(ctx); err != nil || c.Shard != 0 {
		t.Fatalf("claim: %+v, %v", c, err)
	}
	st2 := NewMemState(0)
	st2.Restore(c1.State.Snapshot())
	c2 := NewCoordinator(st2)
	c2.Shards = 2
	b.set(c2)
	fresh, err := Join(ctx, srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if c, err := fresh.Claim(ctx); err != nil || c.Shard != 0 {
		t.Fatalf("the new coordinator's first claim: %+v, %v; want shard 0", c, err)
	}
	if err := old.Push(ctx, posKey(0), Tensor{10, 10, 0}); !errors.Is(err, ErrNotMember) {
		t.Errorf("a push of the old coordinator's worker %d (the new one's worker is %d): %v; want ErrNotMember", old.Worker(), fresh.Worker(), err)
	}
	if p, _ := st2.Pull(ctx, posKey(0)); p != nil {
		t.Errorf("shard 0's position %v; the refused push moved it", p)
	}
}

// slowFirst's one batch takes d to read (a resume that skips far into a
// shard, a slow network).
type slowFirst struct {
	d    time.Duration
	done bool
}

func (s *slowFirst) Next(ctx context.Context) (*Batch, error) {
	if s.done {
		return nil, io.EOF
	}
	s.done = true
	select {
	case <-time.After(s.d):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &Batch{X: []float64{1, 2, 3}, Cols: 1}, nil
}

// TestHeartbeatKeepsSlowReaderAMember: a batch that takes three leases to
// read does not cost the worker its membership (its heartbeat renews the
// lease), so the shard is read.
func TestHeartbeatKeepsSlowReaderAMember(t *testing.T) {
	ctx := context.Background()
	st := NewMemState(0)
	coord, srv := startCoordinator(t, st) // lease 300 ms
	coord.Shards = 1
	w, err := Join(ctx, srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	err = w.Work(ctx, Moments{}, 10*time.Millisecond, func(context.Context, int, int, int64) (Source, error) {
		return &slowFirst{d: 3 * coord.Lease}, nil
	})
	if err != nil {
		t.Fatalf("a worker reading a slow batch: %v", err)
	}
	if n, _ := st.Pull(ctx, "moments.n"); len(n) != 1 || n[0] != 3 {
		t.Errorf("moments.n = %v; want the slow batch's 3 rows", n)
	}
}

// TestExplicitShardIsClaimed: a worker bound to a shard (virga algo --join
// --shard K) holds it like a claim: another worker cannot take it, neither
// by asking for it nor by claiming the next free one.
func TestExplicitShardIsClaimed(t *testing.T) {
	ctx := context.Background()
	coord, srv := startCoordinator(t, NewMemState(0))
	coord.Shards, coord.Passes = 2, 3
	a, err := Join(ctx, srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	c, err := a.ClaimShard(ctx, 0)
	if err != nil || c.Shard != 0 || c.Shards != 2 || c.Passes != 3 {
		t.Fatalf("ClaimShard(0): %+v, %v; want shard 0 of 2, 3 passes", c, err)
	}
	b, err := Join(ctx, srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.ClaimShard(ctx, 0); err == nil {
		t.Error("shard 0 claimed by two live workers")
	}
	if c, err := b.Claim(ctx); err != nil || c.Shard != 1 {
		t.Errorf("the next free shard: %+v, %v; want shard 1", c, err)
	}
	if _, err := b.ClaimShard(ctx, 2); err == nil {
		t.Error("shard 2 of 2 claimed")
	}
}

// TestCoordinatorSetsPasses: workers read each shard as many times as the
// coordinator says.
func TestCoordinatorSetsPasses(t *testing.T) {
	ctx := context.Background()
	st := NewMemState(0)
	coord, srv := startCoordinator(t, st)
	coord.Shards, coord.Passes = 3, 2
	x := make([]float64, 999)
	w, err := Join(ctx, srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	err = w.Work(ctx, Moments{}, 10*time.Millisecond, func(ctx context.Context, k, n int, pos int64) (Source, error) {
		return SliceOpener(x, nil, 1, n, 50)(ctx, k, pos)
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := st.Pull(ctx, "moments.n"); len(n) != 1 || n[0] != 2*999 {
		t.Errorf("moments.n = %v; want 2 passes of 999 rows", n)
	}
}

// TestResumeWithAnotherSplitRefused: a checkpoint made with 2 shards and 1
// pass is not resumed with 4 shards, nor with 2 passes (its positions would
// mean other rows); with its own split it is.
func TestResumeWithAnotherSplitRefused(t *testing.T) {
	dir := t.TempDir()
	x := make([]float64, 10_000)
	job := func(shards, epochs int) *Job {
		return &Job{Alg: Moments{}, Shards: shards, Epochs: epochs, CheckpointDir: dir, Every: time.Millisecond,
			Open: func(ctx context.Context, k int, pos int64) (Source, error) {
				src, err := SliceOpener(x, nil, 1, shards, 10)(ctx, k, pos)
				return &slow{Source: src}, err
			}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, _, err := job(2, 1).Run(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the first run: %v; want it stopped", err)
	}
	for _, c := range [][2]int{{4, 1}, {2, 2}} {
		if _, _, err := job(c[0], c[1]).Run(context.Background()); !errors.Is(err, ErrLayout) {
			t.Errorf("resumed with %d shards and %d passes: %v; want ErrLayout", c[0], c[1], err)
		}
	}
	m, _, err := job(2, 1).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if m["count"][0] != 10_000 {
		t.Errorf("count %v; want 10000", m["count"][0])
	}
}
