package elastic

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// tally counts the rows it is given and sums their values: a row read
// twice, or never, changes the sum.
type tally struct{}

func (tally) Initialize(ctx context.Context, s State) error {
	if err := s.Push(ctx, "rows", Tensor{0}); err != nil {
		return err
	}
	return s.Push(ctx, "sum", Tensor{0})
}

func (tally) Update(ctx context.Context, s State, b *Batch) error {
	sum := 0.0
	for _, v := range b.X {
		sum += v
	}
	if err := s.Push(ctx, "rows", Tensor{float64(b.Rows())}); err != nil {
		return err
	}
	return s.Push(ctx, "sum", Tensor{sum})
}

func (tally) Finalize(ctx context.Context, s State) (Model, error) {
	rows, err := s.Pull(ctx, "rows")
	if err != nil {
		return nil, err
	}
	sum, err := s.Pull(ctx, "sum")
	return Model{"rows": rows, "sum": sum}, err
}

// pausable is a transport whose calls wait while it is paused: the workers
// behind it stand still, as in a long GC pause or a network partition.
type pausable struct {
	mu   sync.Mutex
	open chan struct{} // nil: running; closed by resume
}

func (p *pausable) pause() {
	p.mu.Lock()
	p.open = make(chan struct{})
	p.mu.Unlock()
}

func (p *pausable) resume() {
	p.mu.Lock()
	close(p.open)
	p.open = nil
	p.mu.Unlock()
}

func (p *pausable) RoundTrip(r *http.Request) (*http.Response, error) {
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	if open != nil {
		select {
		case <-open:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestWorkersPausedWhileTheCoordinatorRestarts: the workers finish every
// shard on a coordinator that dies before it checkpoints their end, while
// they are paused; the coordinator restarts from its last checkpoint, in
// which the shards are half read. The workers must read the rest for the
// new coordinator (none may leave on the dead one's word), and every row of
// every pass must be in its state once.
func TestWorkersPausedWhileTheCoordinatorRestarts(t *testing.T) {
	const n, batch, shards, passes = 4000, 10, 2, 2
	x := make([]float64, n)
	exact := 0.0
	for i := range x {
		x[i] = float64(i + 1)
		exact += x[i]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := &pausable{}
	workerTransport = p
	defer func() { workerTransport = nil }()

	start := func(st *MemState, addr string, h func(*Coordinator) http.Handler) (*Coordinator, *httptest.Server) {
		c := NewCoordinator(st)
		c.Shards, c.Passes, c.Durable = shards, passes, true
		c.Lease = time.Second
		srv := httptest.NewUnstartedServer(h(c))
		if addr != "" {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			srv.Listener.Close()
			srv.Listener = ln
		}
		srv.Start()
		return c, srv
	}
	st := NewMemState(0)
	if err := (tally{}).Initialize(ctx, st); err != nil {
		t.Fatal(err)
	}
	if err := CheckLayout(ctx, st, shards, passes); err != nil {
		t.Fatal(err)
	}
	// told: the workers the first coordinator answered a claim while every
	// shard was done in its state (the claim that would let them leave).
	var mu sync.Mutex
	told := map[string]bool{}
	allDone := func(st *MemState) bool {
		for k := range shards {
			if d, _ := st.Pull(ctx, doneKey(k)); len(d) != 1 || d[0] <= 0 {
				return false
			}
		}
		return true
	}
	c1, srv1 := start(st, "", func(c *Coordinator) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			done := r.URL.Path == "/claim" && allDone(st)
			c.ServeHTTP(w, r)
			if done {
				mu.Lock()
				told[r.URL.Query().Get("worker")] = true
				mu.Unlock()
			}
		})
	})
	url := srv1.URL

	// Workers as `virga algo --join` runs them: they join again when the
	// coordinator cannot be reached or no longer knows them.
	open := SliceOpener(x, nil, 1, shards, batch)
	shardOpen := func(ctx context.Context, k, _ int, pos int64) (Source, error) { return open(ctx, k, pos) }
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				w, err := Join(ctx, url, "")
				if err == nil {
					err = w.Work(ctx, tally{}, 5*time.Millisecond, shardOpen)
					if err == nil {
						_ = w.Leave(ctx)
						errs <- nil
						return
					}
					w.Close()
				}
				if !errors.Is(err, ErrNotMember) && !errors.Is(err, ErrUnreachable) {
					errs <- err
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
			errs <- ctx.Err()
		}()
	}

	// The checkpoint is taken mid-run; then the workers read to the end of
	// every shard, claim again, and are paused before the coordinator
	// checkpoints again.
	for Rows(st.Snapshot()) < n {
		time.Sleep(time.Millisecond)
	}
	checkpoint := st.Snapshot()
	c1.Saved(checkpoint)
	for {
		mu.Lock()
		both := len(told) == 2
		mu.Unlock()
		if both {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the workers did not claim after the end of every shard: %v", ctx.Err())
		}
		time.Sleep(time.Millisecond)
	}
	p.pause()
	srv1.CloseClientConnections()
	srv1.Close()
	if got := Rows(checkpoint); got >= n*passes {
		t.Fatalf("the checkpoint holds all %d rows; the test wants it mid-run", got)
	}

	st2 := NewMemState(0)
	st2.Restore(checkpoint)
	c2, srv2 := start(st2, srv1.Listener.Addr().String(), func(c *Coordinator) http.Handler { return c })
	defer srv2.Close()
	p.resume()
	if err := WaitShards(ctx, st2, shards, time.Millisecond); err != nil {
		t.Fatalf("the restarted coordinator's shards are not all read (%d of %d rows): %v", Rows(st2.Snapshot()), n*passes, err)
	}
	c2.Saved(st2.Snapshot())
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a worker: %v", err)
		}
	}
	m, err := (tally{}).Finalize(ctx, st2)
	if err != nil {
		t.Fatal(err)
	}
	if m["rows"][0] != n*passes || m["sum"][0] != exact*passes || Rows(st2.Snapshot()) != n*passes {
		t.Errorf("the state holds %v rows summing to %v (positions: %d rows); want every row of each of %d passes once: %d rows summing to %v",
			m["rows"][0], m["sum"][0], Rows(st2.Snapshot()), passes, n*passes, exact*passes)
	}
}
