package elastic

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"
)

// Keys the runtime keeps in the state next to the algorithm's: each shard's
// read position and whether it is done. They make the state alone a
// checkpoint of the whole job: a worker that takes over a shard, or resumes
// after a restore, skips what was consumed.
//
// A shard's position is the tensor [rows of the current pass, rows read in
// all passes, passes completed]; the end of a pass moves it with one push
// [-rows of the pass, 0, 1], so that it is never seen half moved.
func posKey(shard int) string  { return "shard/" + strconv.Itoa(shard) + "/pos" }
func doneKey(shard int) string { return "shard/" + strconv.Itoa(shard) + "/done" }

const posLen = 3

// layoutKey holds [shards, passes]: the split of the job the state belongs
// to, which gives its positions their meaning.
const layoutKey = "shard/layout"

// CheckLayout records in st that the job reads its input in shards shards,
// passes times over; if st records a layout already (a restored
// checkpoint), it checks that it is this one: positions in shards of
// another split would skip or repeat rows.
func CheckLayout(ctx context.Context, st State, shards, passes int) error {
	have, err := st.Pull(ctx, layoutKey)
	if err != nil {
		return err
	}
	if have == nil {
		return st.Push(ctx, layoutKey, Tensor{float64(shards), float64(passes)})
	}
	if len(have) != 2 || int(have[0]) != shards || int(have[1]) != passes {
		return fmt.Errorf("%w: the state is of a job of %v shards and %v passes; this one has %d and %d", ErrLayout, at(have, 0), at(have, 1), shards, passes)
	}
	return nil
}

// ErrLayout means a checkpoint is resumed with another number of shards or
// passes than it was made with.
var ErrLayout = errors.New("the checkpoint was made with another split of the input")

func at(t Tensor, i int) float64 {
	if i < len(t) {
		return t[i]
	}
	return math.NaN()
}

// Opener opens shard k of an input at row pos (the rows before it were
// consumed already). A source that cannot start past its beginning (a
// network stream read once) returns an error for pos > 0.
type Opener func(ctx context.Context, shard int, pos int64) (Source, error)

// RunShard runs alg's Update over one shard of the input on st, in one
// pass: RunShardPasses(ctx, alg, st, shard, 1, open).
func RunShard(ctx context.Context, alg Algorithm, st State, shard int, open Opener) error {
	return RunShardPasses(ctx, alg, st, shard, 1, open)
}

// RunShardPasses runs alg's Update over one shard of the input on st,
// passes times over (epochs; a pass opens the shard again from its start):
// it opens the shard at the pass and position the state records, then for
// each batch updates and advances the position, and marks the shard done at
// the end of its last pass. A batch's pushes are held back while Update
// runs and applied with the position's advance in one commit (see
// Committer), so the state never holds a batch's update without its
// position: a worker that dies mid-batch, or a job stopped mid-batch, loses
// that batch's update, and whoever resumes the shard reads the batch again
// (exactly once in the state; only an Update that calls Barrier commits
// part of its batch early).
func RunShardPasses(ctx context.Context, alg Algorithm, st State, shard, passes int, open Opener) error {
	if passes < 1 {
		return fmt.Errorf("shard %d: %d passes; want at least 1", shard, passes)
	}
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
	pass := 0
	switch len(pos) {
	case 0:
	case posLen:
		at, pass = int64(pos[0]), int(pos[2])
	default:
		return fmt.Errorf("shard %d: a position of %d numbers in the state; want %d", shard, len(pos), posLen)
	}
	tx := newBatchState(st)
	for ; pass < passes; pass++ {
		src, err := open(ctx, shard, at)
		switch {
		case err != nil && passes > 1:
			return fmt.Errorf("pass %d, at row %d: %w", pass+1, at, err)
		case err != nil && at > 0:
			return fmt.Errorf("at row %d: %w", at, err)
		case err != nil:
			return err // the caller names the shard
		}
		for {
			b, err := src.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				closeSource(src)
				return err
			}
			if err := alg.Update(ctx, tx, b); err != nil {
				tx.Discard()
				closeSource(src)
				return err
			}
			n := float64(b.Rows())
			if err := tx.Commit(ctx, Delta{Key: posKey(shard), Delta: Tensor{n, n, 0}}); err != nil {
				closeSource(src)
				return err
			}
			at += int64(b.Rows())
		}
		closeSource(src)
		if pass+1 < passes {
			if err := st.Push(ctx, posKey(shard), Tensor{-float64(at), 0, 1}); err != nil {
				return err
			}
			at = 0
		}
	}
	return st.Push(ctx, doneKey(shard), Tensor{1})
}

// closeSource closes src if it is an io.Closer.
func closeSource(src Source) {
	if c, ok := src.(io.Closer); ok {
		_ = c.Close()
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
