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

// Positioner is a Source that can skip rows already consumed (files; not a
// network stream read once).
type Positioner interface {
	Source
	// Skip discards the next n rows.
	Skip(ctx context.Context, n int64) error
}

// RunShard runs alg's Update over one shard of the input on st: it skips the
// rows the state says were consumed, then for each batch updates and
// advances the shard's position, and marks the shard done at its end. A
// worker that dies between an update and its position push makes the batch
// count twice when the shard is taken over (at-least-once).
func RunShard(ctx context.Context, alg Algorithm, st State, shard int, src Source) error {
	pos, err := st.Pull(ctx, posKey(shard))
	if err != nil {
		return err
	}
	if done, err := st.Pull(ctx, doneKey(shard)); err != nil {
		return err
	} else if len(done) == 1 && done[0] > 0 {
		return nil
	}
	if len(pos) == 1 && pos[0] > 0 {
		p, ok := src.(Positioner)
		if !ok {
			return fmt.Errorf("shard %d was read to row %d, and its source cannot skip rows (a stream read once cannot be resumed)", shard, int64(pos[0]))
		}
		if err := p.Skip(ctx, int64(pos[0])); err != nil {
			return fmt.Errorf("shard %d: skipping to row %d: %w", shard, int64(pos[0]), err)
		}
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
