package elastic

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestPushAllAllOrNothing: a commit with a delta of the wrong length
// changes nothing, not even the deltas before it.
func TestPushAllAllOrNothing(t *testing.T) {
	ctx := context.Background()
	st := NewMemState(1)
	if err := st.Push(ctx, "w", Tensor{1, 2}); err != nil {
		t.Fatal(err)
	}
	err := st.PushAll(ctx, []Delta{{"new", Tensor{5}}, {"w", Tensor{1, 1}}, {"w", Tensor{1, 1, 1}}})
	if err == nil || !strings.Contains(err.Error(), `"w"`) {
		t.Fatalf("a delta of 3 elements for a tensor of 2: %v; want an error naming the key", err)
	}
	snap := st.Snapshot()
	if len(snap) != 1 || snap["w"][0] != 1 || snap["w"][1] != 2 {
		t.Errorf("after a refused commit the state is %v; want only w = [1 2]", snap)
	}
	// A key created by the commit fixes the length of its later deltas.
	if err := st.PushAll(ctx, []Delta{{"n", Tensor{1}}, {"n", Tensor{1, 2}}}); err == nil {
		t.Error("a commit creating n with 1 element then adding 2: no error")
	}
	if err := st.PushAll(ctx, []Delta{{"n", Tensor{1}}, {"n", Tensor{2}}, {"w", Tensor{1, 1}}}); err != nil {
		t.Fatal(err)
	}
	if n, _ := st.Pull(ctx, "n"); len(n) != 1 || n[0] != 3 {
		t.Errorf("n = %v; want [3]", n)
	}
}

// TestBatchStateHoldsPushesUntilCommit: an update's pushes reach the state
// only at the commit, with the position, while its own pulls see them.
func TestBatchStateHoldsPushesUntilCommit(t *testing.T) {
	ctx := context.Background()
	st := NewMemState(1)
	_ = st.Push(ctx, "w", Tensor{1})
	tx := newBatchState(st)
	if err := tx.Push(ctx, "w", Tensor{2}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Push(ctx, "fresh", Tensor{7, 8}); err != nil {
		t.Fatal(err)
	}
	if w, _ := tx.Pull(ctx, "w"); w[0] != 3 {
		t.Errorf("the batch pulls w = %v; want its own push seen: [3]", w)
	}
	if f, _ := tx.Pull(ctx, "fresh"); len(f) != 2 || f[1] != 8 {
		t.Errorf("the batch pulls fresh = %v; want [7 8]", f)
	}
	if w, _ := st.Pull(ctx, "w"); w[0] != 1 {
		t.Errorf("before the commit the state has w = %v; want [1]", w)
	}
	if err := tx.Push(ctx, "w", Tensor{1, 1}); err == nil {
		t.Error("a push of another length than the batch's earlier push: no error")
	}
	if err := tx.Commit(ctx, Delta{posKey(0), Tensor{10, 10, 0}}); err != nil {
		t.Fatal(err)
	}
	snap := st.Snapshot()
	if snap["w"][0] != 3 || len(snap["fresh"]) != 2 || snap[posKey(0)][0] != 10 {
		t.Errorf("after the commit the state is %v", snap)
	}
	// A failed batch's pushes are dropped.
	_ = tx.Push(ctx, "w", Tensor{100})
	tx.Discard()
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if w, _ := st.Pull(ctx, "w"); w[0] != 3 {
		t.Errorf("after a discarded batch w = %v; want [3]", w)
	}
}

func TestDeltasRoundTrip(t *testing.T) {
	in := []Delta{{"a", Tensor{1, -2.5}}, {"", Tensor{}}, {"shard/0/pos", Tensor{3, 3, 0}}}
	out, err := decodeDeltas(encodeDeltas(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("decoded %d deltas; want %d", len(out), len(in))
	}
	for i := range in {
		if out[i].Key != in[i].Key || len(out[i].Delta) != len(in[i].Delta) {
			t.Errorf("delta %d: %v; want %v", i, out[i], in[i])
		}
	}
	for _, bad := range [][]byte{{1}, {200, 0, 0, 0, 'a'}, append(encodeDeltas(in), 1, 0, 0, 0, 'k', 9, 0, 0, 0)} {
		if _, err := decodeDeltas(bad); err == nil {
			t.Errorf("decoding %v: no error", bad)
		}
	}
}

// FuzzDecodeDeltas: the coordinator's commit decoder never panics, and what
// it accepts encodes back to the same bytes.
func FuzzDecodeDeltas(f *testing.F) {
	f.Add(encodeDeltas([]Delta{{"w", Tensor{1, 2}}, {"shard/1/pos", Tensor{5, 5, 0}}}))
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeDeltas(b)
		if err != nil {
			return
		}
		if again := encodeDeltas(d); !bytes.Equal(again, b) {
			t.Fatalf("decoded %v, which encodes to %v, not %v", d, again, b)
		}
	})
}
