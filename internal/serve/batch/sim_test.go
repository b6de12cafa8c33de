package batch

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestSimulateCountsOnTimeLateAndRefused(t *testing.T) {
	// Three requests at once, one row per batch, 1 ms each, due in 2.5 ms:
	// one at a time the third ends at 3 ms.
	p := Linear{Base: ms(1), Max: 1}
	reqs := items(3, 0, 2.5)
	res, err := Simulate(reqs, p, None{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.OnTime != 2 || res.Late != 1 || res.Outcomes[2] != Late || !res.Finished[2].Equal(at(3)) {
		t.Errorf("none: %d on time, %d late, third %v at %v; want 2, 1, late at 3 ms", res.OnTime, res.Late, res.Outcomes[2], res.Finished[2])
	}
	res, err = Simulate(reqs, p, &Deadline{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.OnTime != 2 || res.Refused != 1 || res.Late != 0 {
		t.Errorf("deadline: %d on time, %d refused, %d late; want 2, 1, 0", res.OnTime, res.Refused, res.Late)
	}
	res, err = Simulate(reqs, p, None{}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if res.OnTime != 3 {
		t.Errorf("three instances: %d on time, want 3", res.OnTime)
	}
}

func TestSimulateWakesThePolicyForTheQueueDelay(t *testing.T) {
	p := Linear{Base: ms(1), Max: 8}
	reqs := items(1, 0, 10)
	res, err := Simulate(reqs, p, &Fixed{MaxQueueDelay: ms(5)}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Finished[0].Equal(at(6)) || res.Outcomes[0] != OnTime {
		t.Errorf("one request, 5 ms delay, 1 ms run: finished %v (%v), want %v on time", res.Finished[0], res.Outcomes[0], at(6))
	}
}

// badPolicy runs a position out of range.
type badPolicy struct{}

func (badPolicy) Decide(time.Time, []Item, int, Profile) Decision { return Decision{Run: []int{7}} }
func (badPolicy) Observe(int, time.Duration, int)                 {}

func TestSimulateRejectsAnInvalidDecision(t *testing.T) {
	if _, err := Simulate(items(2, 0, 10), Linear{Base: ms(1), Max: 8}, badPolicy{}, 1); err == nil {
		t.Fatal("Simulate accepted a decision running position 7 of a queue of 2")
	}
}

// poisson returns n one-row requests at the given mean rate per ms, each
// due objective ms after it arrives.
func poisson(rng *rand.Rand, n int, ratePerMs, objective float64) []Item {
	reqs := make([]Item, n)
	now := 0.0
	for i := range reqs {
		now += rng.ExpFloat64() / ratePerMs
		reqs[i] = Item{Arrived: at(now), Deadline: at(now + objective), Rows: 1}
	}
	return reqs
}

func TestSimulatedGoodputNeverExceedsTheBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	p := Linear{Base: ms(1), PerRow: ms(0.1), Max: 16}
	for _, rate := range []float64{2, 5, 8} {
		reqs := poisson(rng, 400, rate, 4)
		bound, exact, err := Bound(reqs, p)
		if err != nil || !exact {
			t.Fatalf("Bound: %v exact %v", err, exact)
		}
		for _, pol := range []Policy{None{}, &Fixed{}, &Fixed{MaxQueueDelay: ms(1)}, &AIMD{Objective: ms(4)}, &Deadline{}} {
			res, err := Simulate(reqs, p, pol, 1)
			if err != nil {
				t.Fatal(err)
			}
			if res.OnTime > bound {
				t.Errorf("rate %v/ms: %T served %d on time, above the bound %d", rate, pol, res.OnTime, bound)
			}
			if res.OnTime+res.Late+res.Refused != len(reqs) {
				t.Errorf("rate %v/ms: %T accounted for %d of %d requests", rate, pol, res.OnTime+res.Late+res.Refused, len(reqs))
			}
		}
	}
}

func TestSimulateRunsBatchesOnEveryIdleInstance(t *testing.T) {
	// Two requests due in 1.5 ms on a model that takes 1 ms per row and one
	// row per batch: only two instances at once serve both in time.
	p := Linear{PerRow: ms(1), Max: 1}
	reqs := items(2, 0, 1.5)
	for _, c := range []struct{ instances, want int }{{1, 1}, {2, 2}} {
		res, err := Simulate(reqs, p, &Deadline{}, c.instances)
		if err != nil {
			t.Fatal(err)
		}
		if res.OnTime != c.want || res.Batches != c.want {
			t.Errorf("%d instances: %d on time in %d batches, want %d", c.instances, res.OnTime, res.Batches, c.want)
		}
	}
}
