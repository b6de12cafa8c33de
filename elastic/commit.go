package elastic

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
)

// Delta is one push of a commit: delta added to the tensor at key.
type Delta struct {
	Key   string
	Delta Tensor
}

// ShapeError is a push whose delta is of another length than its tensor
// (e.g. an input of another width than the state was made for).
type ShapeError struct {
	Key           string
	Delta, Tensor int // their lengths
}

func (e *ShapeError) Error() string {
	return fmt.Sprintf("push to %q: delta of %d elements, the tensor has %d", e.Key, e.Delta, e.Tensor)
}

// Committer is a State that applies several pushes as one: a snapshot of
// the state (a checkpoint) holds all of them or none. The runtimes commit
// each batch's pushes together with the shard's position, so that a batch
// is in a checkpoint exactly once: never its update without its position
// (which would read it again after a resume), nor the reverse.
type Committer interface {
	State
	// PushAll applies every delta (as Push does, in order) or, if one is
	// of the wrong length, none.
	PushAll(ctx context.Context, deltas []Delta) error
}

// PushAll implements Committer.
func (m *MemState) PushAll(_ context.Context, deltas []Delta) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	lens := map[string]int{}
	for _, d := range deltas {
		want, ok := lens[d.Key]
		if !ok {
			if t, have := m.tensors[d.Key]; have {
				want, ok = len(t), true
			}
		}
		if ok && want != len(d.Delta) {
			return &ShapeError{Key: d.Key, Delta: len(d.Delta), Tensor: want}
		}
		lens[d.Key] = len(d.Delta)
	}
	for _, d := range deltas {
		t, ok := m.tensors[d.Key]
		if !ok {
			m.tensors[d.Key] = append(Tensor(nil), d.Delta...)
		} else {
			for i, v := range d.Delta {
				t[i] += v
			}
		}
		m.pushes++
	}
	return nil
}

// batchState is the State an Update sees in RunShardPasses: its pushes are
// held back and applied with the shard's position in one commit when the
// batch ends (Commit). Pulls see the batch's own pushes. A barrier inside
// an update applies the pushes held so far first (the other workers wait
// for them), so such a batch's pushes are not atomic with its position.
type batchState struct {
	st      State
	pending map[string]Tensor
	order   []string
}

func newBatchState(st State) *batchState {
	return &batchState{st: st, pending: map[string]Tensor{}}
}

// Pull implements State.
func (b *batchState) Pull(ctx context.Context, key string) (Tensor, error) {
	t, err := b.st.Pull(ctx, key)
	if err != nil {
		return nil, err
	}
	p, ok := b.pending[key]
	if !ok {
		return t, nil
	}
	if t == nil {
		return append(Tensor(nil), p...), nil
	}
	if len(t) != len(p) {
		return nil, &ShapeError{Key: key, Delta: len(p), Tensor: len(t)}
	}
	for i, v := range p {
		t[i] += v
	}
	return t, nil
}

// Push implements State.
func (b *batchState) Push(_ context.Context, key string, delta Tensor) error {
	p, ok := b.pending[key]
	if !ok {
		b.pending[key] = append(Tensor(nil), delta...)
		b.order = append(b.order, key)
		return nil
	}
	if len(p) != len(delta) {
		return &ShapeError{Key: key, Delta: len(delta), Tensor: len(p)}
	}
	for i, v := range delta {
		p[i] += v
	}
	return nil
}

// Barrier implements State.
func (b *batchState) Barrier(ctx context.Context) error {
	if err := b.Commit(ctx); err != nil {
		return err
	}
	return b.st.Barrier(ctx)
}

// Commit applies the pushes held back and then extra, as one commit if the
// state is a Committer, and starts the next batch.
func (b *batchState) Commit(ctx context.Context, extra ...Delta) error {
	deltas := make([]Delta, 0, len(b.order)+len(extra))
	for _, k := range b.order {
		deltas = append(deltas, Delta{Key: k, Delta: b.pending[k]})
	}
	deltas = append(deltas, extra...)
	clear(b.pending)
	b.order = b.order[:0]
	return pushAll(ctx, b.st, deltas)
}

// Discard drops the pushes held back (the batch failed).
func (b *batchState) Discard() {
	clear(b.pending)
	b.order = b.order[:0]
}

// pushAll applies deltas to st in one commit if st is a Committer, else one
// push after another.
func pushAll(ctx context.Context, st State, deltas []Delta) error {
	if len(deltas) == 0 {
		return nil
	}
	if c, ok := st.(Committer); ok {
		return c.PushAll(ctx, deltas)
	}
	for _, d := range deltas {
		if err := st.Push(ctx, d.Key, d.Delta); err != nil {
			return err
		}
	}
	return nil
}

// encodeDeltas is the body of a commit on the wire: for each delta, the
// key's length (uint32), the key, the number of elements (uint32) and the
// elements as little-endian float64s.
func encodeDeltas(deltas []Delta) []byte {
	n := 0
	for _, d := range deltas {
		n += 8 + len(d.Key) + 8*len(d.Delta)
	}
	b := make([]byte, 0, n)
	for _, d := range deltas {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(d.Key)))
		b = append(b, d.Key...)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(d.Delta)))
		for _, v := range d.Delta {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
		}
	}
	return b
}

// maxKey bounds a key's length on the wire.
const maxKey = 1 << 12

// decodeDeltas reads encodeDeltas' format; it refuses truncated input,
// keys longer than maxKey bytes and elements that are not finite.
func decodeDeltas(b []byte) ([]Delta, error) {
	var out []Delta
	for off := 0; off < len(b); {
		if len(b)-off < 4 {
			return nil, fmt.Errorf("delta %d: truncated at byte %d (a key length is 4 bytes)", len(out), off)
		}
		kl := int(binary.LittleEndian.Uint32(b[off:]))
		off += 4
		if kl > maxKey || kl > len(b)-off {
			return nil, fmt.Errorf("delta %d: a key of %d bytes at byte %d; want at most %d and within the body", len(out), kl, off, min(maxKey, len(b)-off))
		}
		key := string(b[off : off+kl])
		off += kl
		if len(b)-off < 4 {
			return nil, fmt.Errorf("delta %d (%q): truncated at byte %d (an element count is 4 bytes)", len(out), key, off)
		}
		n := int(binary.LittleEndian.Uint32(b[off:]))
		off += 4
		if n > (len(b)-off)/8 {
			return nil, fmt.Errorf("delta %d (%q): %d elements, only %d bytes left", len(out), key, n, len(b)-off)
		}
		t, err := decodeTensor(b[off : off+8*n])
		if err != nil {
			return nil, fmt.Errorf("delta %d (%q): %w", len(out), key, err)
		}
		off += 8 * n
		out = append(out, Delta{Key: key, Delta: t})
	}
	return out, nil
}
