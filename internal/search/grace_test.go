package search

import (
	"encoding/json"
	"testing"
)

// graceSearch runs ASHA (stop mode, rungs 3 and 9 below max_resource 27)
// with an adaptive grace period: 30 trials report only step 1, with value
// filler(k) for the k-th; then n trials, each better than all before at
// every rung from 3 on, run to the end. early gives a trial's value at step 1
// from its final value.
func graceSearch(t *testing.T, n int, filler func(k int) float64, early func(final float64) float64) *rungs {
	t.Helper()
	s, err := newRungs("stop", 3, 27, 3, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.adaptGrace(); err != nil {
		t.Fatal(err)
	}
	if s.mins[0] != 1 || s.st.First != 1 {
		t.Fatalf("ladder from %d, first judged rung %d; want 1 and 1 (step 3)", s.mins[0], s.st.First)
	}
	id := int64(0)
	for k := range 30 {
		id++
		s.report(&record{Trial: id}, 1, filler(k))
	}
	for i := range n {
		id++
		r := &record{Trial: id}
		final := 100 - float64(i)
		if d := s.report(r, 1, early(final)); d != Continue {
			t.Fatalf("trial %d stopped at step 1, within the grace period", id)
		}
		for _, step := range []int64{3, 9, 27} {
			if d := s.report(r, step, final); d != Continue {
				t.Fatalf("trial %d (the best so far) stopped at step %d", id, step)
			}
		}
	}
	return s
}

// When step 1 ranks the completed trials as their final values do, the
// first judged rung comes down to step 1 once enough trials completed (5 best
// of 13 with eta 3), and a trial weak at step 1 is then stopped there.
func TestAdaptiveGraceLowers(t *testing.T) {
	same := func(final float64) float64 { return final }
	worse := func(k int) float64 { return 1000 + float64(k) }
	if s := graceSearch(t, 12, worse, same); s.st.First != 1 {
		t.Fatalf("after 12 completed trials the first judged rung is %d; want 1 (too few to judge)", s.st.First)
	}
	s := graceSearch(t, 13, worse, same)
	if s.st.First != 0 {
		t.Fatalf("after 13 completed trials ranked alike at step 1 the first judged rung is %d; want 0", s.st.First)
	}
	if d := s.report(&record{Trial: 999}, 1, 5000); d != Stop {
		t.Errorf("a trial worse than every other at step 1: %v; want it stopped there", d)
	}

	// The state survives a snapshot.
	b, err := s.save()
	if err != nil {
		t.Fatal(err)
	}
	r, err := newRungs("stop", 3, 27, 3, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.adaptGrace(); err != nil {
		t.Fatal(err)
	}
	if err := r.load(b, nil); err != nil {
		t.Fatal(err)
	}
	if r.st.First != 0 || len(r.st.Final) != 13 {
		t.Errorf("restored: first judged rung %d, %d final values; want 0 and 13 (snapshot %s)", r.st.First, len(r.st.Final), b)
	}
}

// When the trials that look best at step 1 are not those that end best
// (curves that cross: fast starters that go no further), the grace period
// stays.
func TestAdaptiveGraceStays(t *testing.T) {
	fast := func(k int) float64 { return float64(k) }
	s := graceSearch(t, 40, fast, func(final float64) float64 { return final })
	if s.st.First != 1 {
		t.Fatalf("first judged rung %d; want 1: step 1 would have stopped the best trials", s.st.First)
	}
	if d := s.report(&record{Trial: 999}, 1, 5000); d != Continue {
		t.Errorf("a trial weak at step 1: %v; want it to go on to step 3", d)
	}
	var snap map[string]json.RawMessage
	b, _ := s.save()
	if err := json.Unmarshal(b, &snap); err != nil {
		t.Fatal(err)
	}
	if _, ok := snap["final"]; !ok {
		t.Errorf("snapshot %s has no final values", b)
	}
}

// grace adaptive needs a single bracket with an end.
func TestAdaptiveGraceNeedsASHAWithMax(t *testing.T) {
	hb, err := newRungs("stop", 1, 27, 3, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := hb.adaptGrace(); err == nil {
		t.Error("hyperband with grace adaptive: no error")
	}
	open, err := newRungs("stop", 3, 0, 3, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := open.adaptGrace(); err == nil {
		t.Error("asha without max_resource with grace adaptive: no error")
	}
}
