package elastic

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// Keys the runtime keeps in the state next to the algorithm's: each shard's
// read position (rows consumed) and whether it is done. They make the state
// alone a checkpoint of the whole job: a worker that takes over a shard, or
// resumes after a restore, skips what was consumed.
func posKey(shard int) string  { return "shard/" + strconv.Itoa(shard) + "/pos" }
func doneKey(shard int) string { return "shard/" + strconv.Itoa(shard) + "/done" }

// Opener opens shard k of an input at row pos (the rows before it were
// consumed already). A source that cannot start past its beginning (a
// network stream read once) returns an error for pos > 0.
type Opener func(ctx context.Context, shard int, pos int64) (Source, error)

// RunShard runs alg's Update over one shard of the input on st: it opens
// the shard at the position the state records, then for each batch updates
// and advances the position, and marks the shard done at its end. A worker
// that dies between an update and its position push makes that batch count
// twice when the shard is taken over (at-least-once).
func RunShard(ctx context.Context, alg Algorithm, st State, shard int, open Opener) error {
	if done, err := st.Pull(ctx, doneKey(shard)); err != nil {
		return err
	} else if len(done) == 1 && done[0] > 0 {
		return nil
	}
	pos, err := st.Pull(ctx, posKey(shard))
	if err != nil {
		return err
	}
	var at int64
	if len(pos) == 1 {
		at = int64(pos[0])
	}
	src, err := open(ctx, shard, at)
	if err != nil {
		return fmt.Errorf("shard %d at row %d: %w", shard, at, err)
	}
	for {
		b, err := src.Next(ctx)
		if errors.Is(err, io.EOF) {
			return st.Push(ctx, doneKey(shard), Tensor{1})
		}
		if err != nil {
			return err
		}
		if err := alg.Update(ctx, st, b); err != nil {
			return err
		}
		if err := st.Push(ctx, posKey(shard), Tensor{float64(b.Rows())}); err != nil {
			return err
		}
	}
}

// WaitShards returns once every one of shards shards is marked done in st,
// polling every interval.
func WaitShards(ctx context.Context, st State, shards int, interval time.Duration) error {
	for {
		all := true
		for k := range shards {
			d, err := st.Pull(ctx, doneKey(k))
			if err != nil {
				return err
			}
			if len(d) != 1 || d[0] <= 0 {
				all = false
				break
			}
		}
		if all {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// Restore replaces the state's tensors with a snapshot (Snapshot's), e.g.
// a checkpoint written before the coordinator stopped.
func (m *MemState) Restore(snapshot map[string]Tensor) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tensors = make(map[string]Tensor, len(snapshot))
	for k, t := range snapshot {
		m.tensors[k] = append(Tensor(nil), t...)
	}
}
