package elastic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Job runs an algorithm over a sharded input in this process, one worker
// goroutine per shard, and can be stopped at any moment and resumed: the
// state (with each shard's read position) is written to CheckpointDir as it
// goes and when the job is stopped, and a job that finds a checkpoint there
// resumes from it instead of initializing. This is how a built-in algorithm
// runs as a Virga trial (VIRGA_CHECKPOINT_DIR).
type Job struct {
	Alg Algorithm
	// Shards is the number of shards; Open opens shard k at a row.
	Shards int
	Open   Opener
	// Epochs is the number of passes over the input (default 1); every
	// pass opens each shard again from its start.
	Epochs int
	// CheckpointDir, if set, holds state.json; Every is how often it is
	// written while the job runs (default 10 s), and OnCheckpoint is called
	// after each write (e.g. to report progress to Virga, which then saves
	// the directory).
	CheckpointDir string
	Every         time.Duration
	OnCheckpoint  func(ctx context.Context, rows int64) error
	// OnResume, if set, is called when the job resumes from a checkpoint,
	// with the rows it records as read.
	OnResume func(rows int64)
	// Base, if set, is a finished model's state to start from instead of
	// Initialize (incremental training on new data); it must be a snapshot
	// of the same algorithm's state (StateFile).
	Base map[string]Tensor
	// Name is the algorithm's name, recorded in the checkpoints; a
	// checkpoint of another algorithm is refused (ErrNotItsState).
	Name string
}

// StateFile is the checkpoint's file name in CheckpointDir.
const StateFile = "state.json"

// Checkpoint is a state as written to disk (StateFile): a snapshot and the
// name of the algorithm it belongs to, if known.
type Checkpoint struct {
	Algorithm string            `json:"algorithm,omitempty"`
	Tensors   map[string]Tensor `json:"tensors"`
}

// ErrNotItsState means a checkpoint or base state is another algorithm's,
// or the same algorithm's with other parameters or input width: resuming
// from it, or training on from it, would be wrong.
var ErrNotItsState = errors.New("the state is not this algorithm's")

// Fits checks that c can be resumed, or trained on from, by alg, named
// name: the names agree (when both are known) and every tensor that
// alg's Initialize creates is in c with the same number of elements.
func (c Checkpoint) Fits(ctx context.Context, name string, alg Algorithm) error {
	if c.Algorithm != "" && name != "" && c.Algorithm != name {
		return fmt.Errorf("%w: it is a state of %s; this run is %s", ErrNotItsState, c.Algorithm, name)
	}
	fresh := NewMemState(1)
	if err := alg.Initialize(ctx, fresh); err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	for k, t := range fresh.Snapshot() {
		have, ok := c.Tensors[k]
		switch {
		case !ok:
			return fmt.Errorf("%w: it has no tensor %q, which this run's %s has (another algorithm?)", ErrNotItsState, k, nameOr(name))
		case len(have) != len(t):
			return fmt.Errorf("%w: its tensor %q has %d numbers, this run's %d (other parameters or another input width?)", ErrNotItsState, k, len(have), len(t))
		}
	}
	return nil
}

func nameOr(name string) string {
	if name == "" {
		return "algorithm"
	}
	return name
}

// Run runs the job to its end and returns the model and the state. When ctx
// ends first, it writes a last checkpoint and returns ctx's error.
func (j *Job) Run(ctx context.Context) (Model, *MemState, error) {
	st := NewMemState(j.Shards)
	resumed, err := j.load(st)
	if err != nil {
		return nil, nil, err
	}
	if resumed && j.OnResume != nil {
		j.OnResume(Rows(st.Snapshot()))
	}
	if !resumed {
		if j.Base != nil {
			if err := (Checkpoint{Tensors: j.Base}).Fits(ctx, j.Name, j.Alg); err != nil {
				return nil, st, fmt.Errorf("the base state: %w", err)
			}
			st.Restore(AlgorithmState(j.Base))
		} else if err := j.Alg.Initialize(ctx, st); err != nil {
			return nil, st, fmt.Errorf("initialize: %w", err)
		}
	}
	if err := CheckLayout(ctx, st, j.Shards, max(j.Epochs, 1)); err != nil {
		if resumed {
			return nil, st, fmt.Errorf("%s: %w", filepath.Join(j.CheckpointDir, StateFile), err)
		}
		return nil, st, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, j.Shards)
	var wg sync.WaitGroup
	for k := range j.Shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer st.Leave()
			err := RunShardPasses(wctx, j.Alg, st, k, max(j.Epochs, 1), j.Open)
			if err != nil && !errors.Is(err, context.Canceled) {
				errs <- fmt.Errorf("shard %d: %w", k, err)
				cancel()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	every := j.Every
	if every <= 0 {
		every = 10 * time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
loop:
	for {
		select {
		case <-done:
			break loop
		case <-tick.C:
			if err := j.checkpoint(ctx, st); err != nil {
				cancel()
				<-done
				return nil, st, err
			}
		}
	}
	close(errs)
	if err := <-errs; err != nil {
		return nil, st, err
	}
	if err := ctx.Err(); err != nil {
		// Stopped: the last checkpoint holds what was done.
		if cerr := j.checkpoint(context.WithoutCancel(ctx), st); cerr != nil {
			return nil, st, cerr
		}
		return nil, st, err
	}
	m, err := j.Alg.Finalize(ctx, st)
	if err != nil {
		return nil, st, fmt.Errorf("finalize: %w", err)
	}
	if err := j.checkpoint(ctx, st); err != nil {
		return nil, st, err
	}
	return m, st, nil
}

func isRuntimeKey(k string) bool { return len(k) > 6 && k[:6] == "shard/" }

// AlgorithmState is a finished run's state without the runtime's keys
// (positions, ends, split): the start of incremental training, whose new
// input is read from its start.
func AlgorithmState(snapshot map[string]Tensor) map[string]Tensor {
	out := make(map[string]Tensor, len(snapshot))
	for k, t := range snapshot {
		if !isRuntimeKey(k) {
			out[k] = t
		}
	}
	return out
}

// Rows is the number of rows the state says were consumed, over all shards
// and passes.
func Rows(snapshot map[string]Tensor) int64 {
	var n int64
	for k, t := range snapshot {
		if isRuntimeKey(k) && filepath.Base(k) == "pos" && len(t) == posLen {
			n += int64(t[1])
		}
	}
	return n
}

func (j *Job) load(st *MemState) (bool, error) {
	if j.CheckpointDir == "" {
		return false, nil
	}
	path := filepath.Join(j.CheckpointDir, StateFile)
	c, err := ReadCheckpoint(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := c.Fits(context.Background(), j.Name, j.Alg); err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	st.Restore(c.Tensors)
	return true, nil
}

// checkpoint writes the state atomically and calls OnCheckpoint.
func (j *Job) checkpoint(ctx context.Context, st *MemState) error {
	if j.CheckpointDir == "" {
		return nil
	}
	snap := st.Snapshot()
	if err := WriteCheckpoint(j.CheckpointDir, Checkpoint{Algorithm: j.Name, Tensors: snap}); err != nil {
		return err
	}
	if j.OnCheckpoint != nil {
		return j.OnCheckpoint(ctx, Rows(snap))
	}
	return nil
}

// WriteState writes a snapshot of a state to dir/StateFile durably, with
// no algorithm's name (WriteCheckpoint).
func WriteState(dir string, snapshot map[string]Tensor) error {
	return WriteCheckpoint(dir, Checkpoint{Tensors: snapshot})
}

// WriteCheckpoint writes c to dir/StateFile durably: a temporary file,
// synced, renamed over the old one (a crash leaves the old or the new
// checkpoint, never a torn one).
func WriteCheckpoint(dir string, c Checkpoint) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".state-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, StateFile)); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil { // the rename itself
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// ReadState reads a state written by WriteState: path is the checkpoint
// directory or its StateFile. A missing file is an error satisfying
// errors.Is(err, os.ErrNotExist); an unreadable one names the file.
func ReadState(path string) (map[string]Tensor, error) {
	c, err := ReadCheckpoint(path)
	return c.Tensors, err
}

// ReadCheckpoint reads a checkpoint written by WriteCheckpoint (or
// WriteState), as ReadState does.
func ReadCheckpoint(path string) (Checkpoint, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, StateFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Checkpoint{}, err
	}
	var c Checkpoint
	if err := json.Unmarshal(b, &c); err != nil {
		return Checkpoint{}, fmt.Errorf("%s: not a state written by Virga: %w", path, err)
	}
	if c.Tensors == nil {
		return Checkpoint{}, fmt.Errorf("%s: not a state written by Virga: no tensors", path)
	}
	return c, nil
}
