package elastic

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/clock"
)

// stream is the test input: values with a known exact median.
func stream(n int) ([]float64, float64) {
	rng := rand.New(rand.NewPCG(5, 6))
	x := make([]float64, n)
	for i := range x {
		x[i] = 100 + 15*rng.NormFloat64() + 40*rng.ExpFloat64()
	}
	s := slices.Clone(x)
	slices.Sort(s)
	return x, (s[n/2-1] + s[n/2]) / 2
}

// dying stops its worker (cancels its context, as a kill -9 would end it:
// no leave) after a number of batches.
type dying struct {
	Source
	after  int
	cancel context.CancelFunc
}

func (d *dying) Next(ctx context.Context) (*Batch, error) {
	if d.after == 0 {
		d.cancel()
		return nil, context.Canceled
	}
	d.after--
	return d.Source.Next(ctx)
}

func startCoordinator(t *testing.T, st *MemState) (*Coordinator, *httptest.Server) {
	return startCoordinatorLease(t, st, 300*time.Millisecond)
}

func startCoordinatorLease(t *testing.T, st *MemState, lease time.Duration) (*Coordinator, *httptest.Server) {
	c := NewCoordinator(st)
	c.Lease = lease
	srv := httptest.NewServer(c)
	ctx, cancel := context.WithCancel(context.Background())
	go c.Run(ctx)
	t.Cleanup(func() { cancel(); srv.Close() })
	return c, srv
}

// checkMedian checks the median against the exact one and that every one
// of the n values was counted exactly once, whatever stopped or killed.
func checkMedian(t *testing.T, m Model, exact float64, n int) {
	t.Helper()
	got := m["median"][0]
	if rel := math.Abs(got-exact) / exact; rel > 0.01 {
		t.Errorf("median %.4f, exact %.4f: %.3f%% off; want within 1%%", got, exact, 100*rel)
	}
	if c := int(m["n"][0]); c != n {
		t.Errorf("counted %d values; want %d, each exactly once", c, n)
	}
}

// TestWorkerKilledMidRun: two worker processes' worth of RemoteStates on a
// coordinator; one dies without a word a third of the way through its
// shard; its lease runs out, and a new worker takes the shard over from the
// position in the state. The result is the uninterrupted one's, within the
// median's own noise.
func TestWorkerKilledMidRun(t *testing.T) {
	const n, batch = 2_000_000, 1000
	x, exact := stream(n)
	st := NewMemState(0)
	if err := (Median{}).Initialize(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	coord, srv := startCoordinator(t, st)
	open := SliceOpener(x, nil, 1, 2, batch)
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	run := func(ctx context.Context, shard int, open Opener) {
		defer wg.Done()
		w, err := Join(ctx, srv.URL, "")
		if err != nil {
			errs <- err
			return
		}
		if err := RunShard(ctx, Median{}, w, shard, open); err != nil && !errors.Is(err, context.Canceled) {
			errs <- err
			return
		}
		if ctx.Err() == nil {
			_ = w.Leave(ctx)
		}
	}
	ctx := context.Background()
	dctx, kill := context.WithCancel(ctx)
	wg.Add(2)
	go run(ctx, 0, open)
	go run(dctx, 1, func(ctx context.Context, k int, pos int64) (Source, error) {
		src, err := open(ctx, k, pos)
		return &dying{Source: src, after: 300, cancel: kill}, err
	})
	wg.Wait()
	// The dead worker is still a member until its lease runs out.
	deadline := time.Now().Add(5 * time.Second)
	for coord.Members() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if m := coord.Members(); m != 0 {
		t.Fatalf("%d members after the dead worker's lease; want 0", m)
	}
	wg.Add(1)
	go run(ctx, 1, open) // a replacement: it starts where the state says the shard was read to
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := WaitShards(ctx, st, 2, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	m, err := (Median{}).Finalize(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	checkMedian(t, m, exact, n)
}

// TestCoordinatorKilledMidRun: the coordinator's state is checkpointed
// mid-run, the coordinator dies (its later pushes are lost), and a new one
// restored from the checkpoint serves the workers, which start over from
// the positions in it.
func TestCoordinatorKilledMidRun(t *testing.T) {
	const n, batch = 2_000_000, 1000
	x, exact := stream(n)
	st := NewMemState(0)
	ctx := context.Background()
	if err := (Median{}).Initialize(ctx, st); err != nil {
		t.Fatal(err)
	}
	_, srv := startCoordinator(t, st)
	// Both workers run until a third of the input is read; then the
	// checkpoint is taken and the coordinator dies.
	var checkpoint map[string]Tensor
	var wg sync.WaitGroup
	wctx, stopWorkers := context.WithCancel(ctx)
	open := SliceOpener(x, nil, 1, 2, batch)
	for k := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := Join(wctx, srv.URL, "")
			if err != nil {
				t.Error(err)
				return
			}
			_ = RunShard(wctx, Median{}, w, k, open) // ends with the coordinator
		}()
	}
	for {
		p0, _ := st.Pull(ctx, posKey(0))
		p1, _ := st.Pull(ctx, posKey(1))
		if len(p0) == posLen && len(p1) == posLen && p0[1]+p1[1] >= n/3 {
			checkpoint = st.Snapshot()
			break
		}
		time.Sleep(time.Millisecond)
	}
	srv.CloseClientConnections()
	srv.Close()
	stopWorkers()
	wg.Wait()

	st2 := NewMemState(0)
	st2.Restore(checkpoint)
	_, srv2 := startCoordinator(t, st2)
	for k := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := Join(ctx, srv2.URL, "")
			if err != nil {
				t.Error(err)
				return
			}
			if err := RunShard(ctx, Median{}, w, k, open); err != nil {
				t.Error(err)
			}
			_ = w.Leave(ctx)
		}()
	}
	wg.Wait()
	m, err := (Median{}).Finalize(ctx, st2)
	if err != nil {
		t.Fatal(err)
	}
	checkMedian(t, m, exact, n)
}

func TestTensorEncoding(t *testing.T) {
	in := Tensor{0, -1.5, math.MaxFloat64, math.SmallestNonzeroFloat64}
	out, err := decodeTensor(encodeTensor(in))
	if err != nil || !slices.Equal(in, out) {
		t.Fatalf("round trip %v -> %v, %v", in, out, err)
	}
	if _, err := decodeTensor(make([]byte, 7)); err == nil {
		t.Error("7 bytes decoded as a tensor")
	}
	if _, err := decodeTensor(encodeTensor(Tensor{math.NaN()})); err == nil {
		t.Error("NaN accepted")
	}
}

// TestWorkersClaimShards: a coordinator hands 8 shards out to workers that
// come and go: one worker starts alone, a second joins later and takes
// shards the first has not reached, the first dies without a word
// mid-shard, and a third joins and, with the second, takes the dead one's
// shard over once its lease runs out. Every row is counted exactly once (the dead
// worker's last batch was never committed), every shard is read by one worker at a time,
// and the median is the uninterrupted one's.
func TestWorkersClaimShards(t *testing.T) {
	const n, batch, shards = 1_600_000, 1000, 8
	x, exact := stream(n)
	st := NewMemState(0)
	if err := (Median{}).Initialize(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	// A lease long enough that a live worker's heartbeat is not starved
	// out of it on a loaded machine; the dead worker's shard is taken over
	// when it ends.
	coord, srv := startCoordinatorLease(t, st, time.Second)
	coord.Shards = shards
	var mu sync.Mutex
	readers := map[int]map[int64]bool{} // shard -> workers that read it
	open := func(w *RemoteState, die *dying) ShardOpener {
		return func(ctx context.Context, k, nk int, pos int64) (Source, error) {
			if nk != shards {
				return nil, fmt.Errorf("told %d shards; want %d", nk, shards)
			}
			mu.Lock()
			if readers[k] == nil {
				readers[k] = map[int64]bool{}
			}
			readers[k][w.Worker()] = true
			mu.Unlock()
			src, err := SliceOpener(x, nil, 1, shards, batch)(ctx, k, pos)
			if die != nil && err == nil {
				die.Source = src
				return die, nil
			}
			return &slow{Source: src}, err
		}
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	work := func(ctx context.Context, die *dying) {
		defer wg.Done()
		w, err := Join(ctx, srv.URL, "")
		if err != nil {
			errs <- err
			return
		}
		err = w.Work(ctx, Median{}, 20*time.Millisecond, open(w, die))
		if err != nil && !errors.Is(err, context.Canceled) {
			errs <- err
		}
	}
	dctx, kill := context.WithCancel(ctx)
	wg.Add(1)
	go func() {
		defer kill()                                 // also if it ends otherwise, so that the test goes on
		work(dctx, &dying{after: 250, cancel: kill}) // dies in its second shard
	}()
	time.Sleep(30 * time.Millisecond)
	wg.Add(1)
	go work(ctx, nil)
	<-dctx.Done()
	wg.Add(1)
	go work(ctx, nil)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := WaitShards(ctx, st, shards, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	m, err := (Median{}).Finalize(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	checkMedian(t, m, exact, n)
	workers := map[int64]bool{}
	taken := 0
	for k, ws := range readers {
		for w := range ws {
			workers[w] = true
		}
		if len(ws) > 1 {
			taken++
			if len(ws) > 2 {
				t.Errorf("shard %d read by workers %v; want the dead one's only taken over once", k, ws)
			}
		}
	}
	if len(readers) != shards || len(workers) != 3 || taken != 1 {
		t.Errorf("%d shards read by %d workers, %d taken over; want all %d by 3 workers, the dead one's taken over", len(readers), len(workers), taken, shards)
	}
	t.Logf("shards and their readers: %v", readers)
}

// TestClaimNeedsShards: a coordinator that was not told the number of
// shards refuses claims with a clear error.
func TestClaimNeedsShards(t *testing.T) {
	_, srv := startCoordinator(t, NewMemState(0))
	w, err := Join(context.Background(), srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Claim(context.Background()); err == nil || !strings.Contains(err.Error(), "no shards") {
		t.Fatalf("claim: %v; want the coordinator's refusal", err)
	}
}

// TestRemoteBarrierFollowsMembership: over the network, a barrier of three
// workers waits while one is silent, and opens when that worker's lease
// runs out (it was killed: no leave); a worker that joins later counts in
// the next barrier.
func TestRemoteBarrierFollowsMembership(t *testing.T) {
	coord, srv := startCoordinator(t, NewMemState(0))
	ctx := context.Background()
	var ws []*RemoteState
	var joined time.Time // just before the silent worker's join, where its lease begins at the earliest
	for range 3 {
		joined = time.Now()
		w, err := Join(ctx, srv.URL, "")
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	ws[2].Close() // killed: no heartbeat, no leave
	done := make(chan error, 2)
	for _, w := range ws[:2] {
		go func() { done <- w.Barrier(ctx) }()
	}
	for range 2 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the barrier did not open when the silent worker's lease ran out")
		}
	}
	if waited := time.Since(joined); waited < coord.Lease {
		t.Errorf("the barrier opened %v after the silent worker joined, before its lease (%v) ran out", waited, coord.Lease)
	}
	if _, err := ws[2].Pull(ctx, "x"); !errors.Is(err, ErrNotMember) {
		t.Errorf("the expired worker's pull: %v; want ErrNotMember", err)
	}
	late, err := Join(ctx, srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []*RemoteState{ws[0], ws[1]} {
		go func() { done <- w.Barrier(ctx) }()
	}
	select {
	case <-done:
		t.Fatal("the barrier opened without the worker that joined")
	case <-time.After(100 * time.Millisecond):
	}
	if err := late.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestLeaseRunsOnTheClock: a worker's lease is kept by the coordinator's
// clock: it is a member until the clock has passed its lease, then Expire
// lets it go.
func TestLeaseRunsOnTheClock(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	c := NewCoordinator(NewMemState(0))
	c.Lease, c.Clock = time.Hour, clk
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	if _, err := Join(t.Context(), srv.URL, ""); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	c.Expire()
	if n := c.Left(); n != 0 {
		t.Fatalf("%d workers left at the end of the lease, want 0", n)
	}
	clk.Advance(time.Millisecond)
	c.Expire()
	if n := c.Left(); n != 1 {
		t.Fatalf("%d workers left past the lease, want 1", n)
	}
}

// TestLateCommitOfExpiredWorkerIsRefused: a worker's commit whose body is
// still arriving when its lease runs out, and its shard goes to another
// worker, must not be applied: the new holder reads on from the position
// the state records, so applying the late commit too would count that
// batch twice. The commit is answered 410 (join again) and the state is
// what the new holder saw.
func TestLateCommitOfExpiredWorkerIsRefused(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	c := NewCoordinator(NewMemState(0))
	c.Lease, c.Clock, c.Shards = time.Hour, clk, 1
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	ctx := t.Context()
	a, err := Join(ctx, srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	if cl, err := a.Claim(ctx); err != nil || cl.Shard != 0 {
		t.Fatalf("a claims shard %d (%v), want 0", cl.Shard, err)
	}

	// a's commit: the headers arrive (its lease is renewed), the body
	// waits.
	clk.Advance(time.Minute)
	body, send := io.Pipe()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+a.op("commit", ""), body)
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			answered <- nil
			return
		}
		answered <- resp
	}()
	// The handler has renewed a's lease once a was last heard from now
	// (it joined a minute ago); wait for the request to reach it.
	waitFor(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.workers[a.Worker()].Equal(clk.Now())
	})

	// a's lease runs out; b takes the shard and reads its position.
	clk.Advance(time.Hour + time.Millisecond)
	c.Expire()
	b, err := Join(ctx, srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	if cl, err := b.Claim(ctx); err != nil || cl.Shard != 0 {
		t.Fatalf("b claims shard %d (%v), want 0 (a's lease ran out)", cl.Shard, err)
	}

	// a's batch arrives late.
	go func() {
		_, _ = send.Write(encodeDeltas([]Delta{{Key: posKey(0), Delta: Tensor{100}}, {Key: "w", Delta: Tensor{1}}}))
		_ = send.Close()
	}()
	resp := <-answered
	if resp == nil {
		t.FailNow()
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusGone {
		t.Errorf("a's late commit answered %s, want 410 Gone", resp.Status)
	}
	if pos, _ := c.State.Pull(ctx, posKey(0)); pos != nil {
		t.Errorf("shard 0's position is %v after a's late commit, want none (b reads it from the start)", pos)
	}
}

// waitFor polls cond until it holds (for at most 10 s).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("condition not met in 10 s")
		}
	}
}
