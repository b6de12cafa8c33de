package batch

import (
	"math/rand/v2"
	"testing"
	"time"
)

// bruteForce returns the most requests served on time over every sequence
// of batches of distinct requests on one instance, each batch starting when
// the instance is free and its requests have arrived.
func bruteForce(reqs []Item, p Profile) int {
	n := len(reqs)
	best := 0
	var rec func(used uint, free time.Time, served int)
	rec = func(used uint, free time.Time, served int) {
		best = max(best, served)
		rest := (uint(1)<<n - 1) &^ used
		for sub := rest; sub > 0; sub = (sub - 1) & rest {
			rows, count := 0, 0
			start := free
			var due time.Time
			for i := range n {
				if sub&(1<<i) == 0 {
					continue
				}
				rows += rowsOf(reqs[i])
				count++
				if reqs[i].Arrived.After(start) {
					start = reqs[i].Arrived
				}
				if due.IsZero() || reqs[i].Deadline.Before(due) {
					due = reqs[i].Deadline
				}
			}
			if rows > p.MaxRows() {
				continue
			}
			end := start.Add(p.Latency(rows))
			if end.After(due) {
				continue // a batch with a late request is never worth running
			}
			rec(used|sub, end, served+count)
		}
	}
	rec(0, time.Time{}, 0)
	return best
}

func randomInstance(rng *rand.Rand, n int, sameObjective bool) ([]Item, Linear) {
	p := Linear{Base: time.Duration(rng.IntN(4)) * time.Millisecond, PerRow: time.Duration(rng.IntN(3)) * time.Millisecond, Max: 1 + rng.IntN(4)}
	if p.Base+p.PerRow == 0 {
		p.PerRow = time.Millisecond
	}
	objective := time.Duration(1+rng.IntN(8)) * time.Millisecond
	reqs := make([]Item, n)
	now := t0
	for i := range reqs {
		now = now.Add(time.Duration(rng.IntN(3)) * time.Millisecond)
		reqs[i] = Item{Arrived: now, Deadline: now.Add(objective), Rows: 1}
		if !sameObjective {
			reqs[i].Deadline = now.Add(time.Duration(1+rng.IntN(8)) * time.Millisecond)
			reqs[i].Rows = 1 + rng.IntN(2)
		}
	}
	return reqs, p
}

func TestBoundEqualsBruteForceWithOneObjective(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 400 {
		reqs, p := randomInstance(rng, 1+rng.IntN(7), true)
		got, exact, err := Bound(reqs, p)
		if err != nil {
			t.Fatal(err)
		}
		want := bruteForce(reqs, p)
		if !exact || got != want {
			t.Fatalf("trial %d (%v, %d requests): Bound = %d (exact %v), brute force %d", trial, p, len(reqs), got, exact, want)
		}
	}
}

func TestBoundIsNeverBeatenWithMixedDeadlinesAndRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	inexact := 0
	for trial := range 400 {
		reqs, p := randomInstance(rng, 1+rng.IntN(7), false)
		got, exact, err := Bound(reqs, p)
		if err != nil {
			t.Fatal(err)
		}
		want := bruteForce(reqs, p)
		if got < want || (exact && got != want) {
			t.Fatalf("trial %d (%v, %+v): Bound = %d (exact %v), brute force %d", trial, p, reqs, got, exact, want)
		}
		if !exact {
			inexact++
		}
	}
	if inexact == 0 {
		t.Fatal("no trial had mixed deadlines or rows: the test tests nothing")
	}
}

func TestBoundRejectsRequestsOutOfOrder(t *testing.T) {
	reqs := []Item{{Arrived: at(2), Deadline: at(3)}, {Arrived: at(1), Deadline: at(3)}}
	if _, _, err := Bound(reqs, Linear{Base: ms(1), Max: 2}); err == nil {
		t.Fatal("Bound accepted requests out of arrival order")
	}
}
