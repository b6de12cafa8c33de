package algo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/virga-ml/virga/elastic"
	"github.com/virga-ml/virga/elastic/input"
)

// Worker is one worker process: it joins the coordinator at URL and reads
// the shards it hands out (Shard < 0) or shard Shard of Shards (Shards 0:
// as many as the coordinator has), starting where the state says each was
// read to, as many passes as the coordinator says.
type Worker struct {
	Name  string // the algorithm's, which the coordinator checks
	Alg   elastic.Algorithm
	URL   string
	Token string
	Input string
	// Options are the input's; Shard and Shards bind the worker to one
	// shard (Shard -1: none).
	Options       input.Options
	Shard, Shards int
	Logf          Logf
}

// Run works until the input is read. When the coordinator cannot be reached
// or has dropped it (it restarts) it joins again, for up to a minute after
// it last reached it; other errors end it. A stopped worker returns
// ErrStopped.
func (wk *Worker) Run(ctx context.Context) error {
	shard, shards := wk.Shard, wk.Shards
	var read []int // the shards this worker opened
	open := func(ctx context.Context, k, n int, pos int64) (elastic.Source, error) {
		if len(read) == 0 || read[len(read)-1] != k {
			read = append(read, k)
		}
		return input.OpenShardAt(wk.Input, wk.Options, k, n, pos)
	}
	what := "worker of shard " + strconv.Itoa(shard)
	if shard < 0 {
		what = "worker"
	}
	var last error
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		w, err := elastic.JoinAs(ctx, wk.URL, wk.Token, wk.Name)
		if err == nil {
			deadline = time.Now().Add(time.Minute) // it was reached: a minute from now
			if shard >= 0 {
				err = runBound(ctx, wk.Alg, w, shard, shards, open)
			} else {
				err = w.Work(ctx, wk.Alg, 200*time.Millisecond, open)
			}
			if err == nil {
				_ = w.Leave(ctx)
				wk.Logf.printf("worker %d: done; read shards %v", w.Worker(), read)
				return nil
			}
			w.Close()
		}
		if ctx.Err() != nil {
			return ErrStopped
		}
		// Only the coordinator being away (restarting) is worth waiting
		// for; the input's or the algorithm's errors are not.
		if !errors.Is(err, elastic.ErrNotMember) && !errors.Is(err, elastic.ErrUnreachable) {
			if w != nil {
				_ = w.Leave(context.WithoutCancel(ctx)) // its shard goes to another now
			}
			return fmt.Errorf("%s: %w", what, err)
		}
		if last == nil || err.Error() != last.Error() {
			wk.Logf.printf("%s: %v; joining again", what, err)
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s: the coordinator at %s: %w", what, wk.URL, last)
}

// runBound reads one given shard: it claims it (no other worker may read
// it meanwhile) and checks that the coordinator splits the input as this
// worker was told.
func runBound(ctx context.Context, alg elastic.Algorithm, w *elastic.RemoteState, shard, shards int, open elastic.ShardOpener) error {
	// A worker that held the shard and died holds it until its lease
	// runs out: wait that long (twice, for slack), no longer.
	c, err := w.ClaimShard(ctx, shard)
	for end := time.Now().Add(2 * w.Lease()); errors.Is(err, elastic.ErrHeld) && time.Now().Before(end); {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		c, err = w.ClaimShard(ctx, shard)
	}
	if err != nil {
		return err
	}
	if shards > 0 && c.Shards != shards {
		return fmt.Errorf("--shards %d: the coordinator splits the input into %d shards", shards, c.Shards)
	}
	for !c.Done {
		err := elastic.RunShardPasses(ctx, alg, w, shard, c.Passes, func(ctx context.Context, k int, pos int64) (elastic.Source, error) {
			return open(ctx, k, c.Shards, pos)
		})
		if err != nil {
			return err
		}
		// The shard is done; the worker leaves once the coordinator has
		// checkpointed that (if it restarts before, the shard is not done
		// in the state it resumes from, and this worker reads the rest).
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if c, err = w.ClaimShard(ctx, shard); err != nil {
			return err
		}
	}
	return nil
}

// Coordinator serves an algorithm's state to worker processes (`virga
// algo --serve`, or rank 0 of a gang).
type Coordinator struct {
	Builtin Builtin
	Alg     elastic.Algorithm
	Save    Saver
	Addr    string // to listen on
	Shards  int
	Passes  int
	Expect  int // the workers to wait for at the end (a gang's size)
	Lease   time.Duration
	// CheckpointDir, if set, is where the state is checkpointed (every
	// Every) and resumed from.
	CheckpointDir string
	Every         time.Duration
	ModelOut      string
	Base          map[string]elastic.Tensor // incremental training: the state to start from
	Token         string                    // workers' bearer token, if any
	// Report, if set, reports progress (rows) after each checkpoint and the
	// final metrics: the coordinator is the trial's voice.
	Report Reporter
	Logf   Logf
	// Listening, if set, receives the address served on.
	Listening chan<- string
}

// Run serves the state to worker processes until every shard is read,
// checkpointing it as it goes (a restarted coordinator resumes from it),
// then finalizes and saves the model. A stopped coordinator checkpoints
// and returns ErrStopped.
func (c *Coordinator) Run(ctx context.Context) (*Result, error) {
	name, alg := c.Builtin.Name, c.Alg
	st := elastic.NewMemState(0)
	resumed := false
	if c.CheckpointDir != "" {
		if ck, err := elastic.ReadCheckpoint(c.CheckpointDir); err == nil {
			if err := ck.Fits(ctx, name, alg); err != nil {
				return nil, fmt.Errorf("%s: %w (use another --checkpoint directory, or remove this one)", filepath.Join(c.CheckpointDir, elastic.StateFile), err)
			}
			st.Restore(ck.Tensors)
			resumed = true
			c.Logf.printf("resuming from the checkpoint in %s: %d rows read", c.CheckpointDir, elastic.Rows(ck.Tensors))
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	if !resumed {
		if c.Base != nil {
			st.Restore(elastic.AlgorithmState(c.Base))
		} else if err := alg.Initialize(ctx, st); err != nil {
			return nil, err
		}
	}
	if err := elastic.CheckLayout(ctx, st, c.Shards, max(c.Passes, 1)); err != nil {
		return nil, fmt.Errorf("%s: %w (start the coordinator with the --shards and --epochs it had, or remove the checkpoint)", c.CheckpointDir, err)
	}
	coord := elastic.NewCoordinator(st)
	coord.Token = c.Token
	coord.Algorithm = name
	coord.Shards, coord.Passes = c.Shards, max(c.Passes, 1)
	coord.Lease = c.Lease
	// With a checkpoint, a worker leaves only once the end of its shards
	// is in it: one that left on this process's word, which then died
	// before checkpointing, would leave the rest of its shard to no one.
	coord.Durable = c.CheckpointDir != ""
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: coord, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go coord.Run(cctx)
	c.Logf.printf("coordinator of %d shards on %s", c.Shards, ln.Addr())
	if c.Listening != nil {
		c.Listening <- ln.Addr().String()
	}
	var step int64
	checkpoint := func(ctx context.Context) error {
		if c.CheckpointDir == "" {
			return nil
		}
		snap := st.Snapshot()
		if err := elastic.WriteCheckpoint(c.CheckpointDir, elastic.Checkpoint{Algorithm: name, Tensors: snap}); err != nil {
			return err
		}
		coord.Saved(snap)
		if c.Report == nil {
			return nil
		}
		step++
		return c.Report(ctx, step, map[string]float64{"rows": float64(elastic.Rows(snap))})
	}
	done := make(chan error, 1)
	go func() { done <- elastic.WaitShards(cctx, st, c.Shards, 20*time.Millisecond) }()
	tick := time.NewTicker(c.Every)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				_ = checkpoint(context.WithoutCancel(ctx))
				if ctx.Err() != nil {
					return nil, ErrStopped
				}
				return nil, err
			}
			return c.finish(ctx, st, coord, step)
		case <-tick.C:
			if err := checkpoint(ctx); err != nil {
				return nil, err
			}
		}
	}
}

// finish finalizes the model once every shard is read: the last
// checkpoint, the model file and model/ directory, the final metrics; then
// it serves the workers until they have left.
func (c *Coordinator) finish(ctx context.Context, st *elastic.MemState, coord *elastic.Coordinator, step int64) (*Result, error) {
	m, err := c.Alg.Finalize(ctx, st)
	if err != nil {
		return nil, err
	}
	if c.CheckpointDir != "" {
		snap := st.Snapshot()
		if err := elastic.WriteCheckpoint(c.CheckpointDir, elastic.Checkpoint{Algorithm: c.Builtin.Name, Tensors: snap}); err != nil {
			return nil, err
		}
		coord.Saved(snap)
	}
	saved, err := c.Save(m)
	if err != nil {
		return nil, err
	}
	if c.ModelOut != "" {
		if err := elastic.SaveModelFile(c.ModelOut, saved); err != nil {
			return nil, err
		}
	}
	if err := writeModelDir(c.Builtin, c.CheckpointDir, saved); err != nil {
		return nil, err
	}
	rows := elastic.Rows(st.Snapshot())
	if c.Report != nil {
		if err := c.Report(ctx, step+1, FinalMetrics(m, saved, rows)); err != nil {
			return nil, err
		}
	}
	// Workers waiting for a shard learn that none is left at their next
	// claim and leave; serve them that long (at most a lease), so that
	// they end instead of looking for a coordinator that is gone. A gang's
	// coordinator also waits (at most a minute) for every rank to have come
	// and gone: a rank that starts late must find it to learn that all is
	// read.
	end, gangEnd := time.Now().Add(c.Lease), time.Now().Add(time.Minute)
	for (coord.Members() > 0 && time.Now().Before(end)) || (coord.Left() < c.Expect && time.Now().Before(gangEnd)) {
		time.Sleep(20 * time.Millisecond)
	}
	return &Result{Model: m, Saved: saved, Rows: rows}, nil
}

// GangLeader is rank 0 of a gang: the coordinator c, and a worker w on it
// (w.URL is set to the coordinator's address once it listens). Either
// failing stops the other.
func GangLeader(ctx context.Context, c *Coordinator, w *Worker) (*Result, error) {
	listening := make(chan string, 1)
	c.Listening = listening
	cctx, stopCoordinator := context.WithCancel(ctx)
	defer stopCoordinator()
	type result struct {
		res *Result
		err error
	}
	cerr := make(chan result, 1)
	go func() {
		res, err := c.Run(cctx)
		cerr <- result{res, err}
	}()
	var addr string
	select {
	case addr = <-listening:
	case r := <-cerr:
		return r.res, r.err
	}
	_, port, _ := net.SplitHostPort(addr)
	w.URL, w.Token = "http://127.0.0.1:"+port, c.Token
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	werr := make(chan error, 1)
	go func() { werr <- w.Run(wctx) }()
	select {
	case err := <-werr:
		if err != nil && ctx.Err() == nil {
			stopCoordinator()
			<-cerr
			return nil, err
		}
		r := <-cerr
		return r.res, r.err
	case r := <-cerr:
		if r.err != nil {
			stopWorker()
			<-werr
			return nil, r.err
		}
		return r.res, <-werr
	}
}
