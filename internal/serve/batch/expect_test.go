package batch

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestDeadlineExpectsArrivalsUnderLoad: on a model whose batch of 1 costs
// almost half a full batch (the ONNX digits network on this machine's CPU:
// 7 us + 0.15 us per row), at 95% of capacity on Poisson arrivals with an
// objective of two full batches, planning only the known queue runs small
// batches to save a few urgent requests and delays every request arriving
// meanwhile; counting the expected arrivals keeps deadline at or above
// Triton's batcher without a queue delay.
func TestDeadlineExpectsArrivalsUnderLoad(t *testing.T) {
	p := Linear{Base: 7 * time.Microsecond, PerRow: 150 * time.Nanosecond, Max: 64}
	objective := 2 * p.Latency(64)
	rate := 0.95 * 64 / p.Latency(64).Seconds()
	rng := rand.New(rand.NewPCG(1, 2))
	reqs := make([]Item, 5000)
	at := t0
	for i := range reqs {
		at = at.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		reqs[i] = Item{Arrived: at, Deadline: at.Add(objective), Rows: 1}
	}
	onTime := func(pol Policy) int {
		res, err := Simulate(reqs, p, pol, 1)
		if err != nil {
			t.Fatal(err)
		}
		return res.OnTime
	}
	fixed, known, expect := onTime(&Fixed{}), onTime(&Deadline{Expect: -1}), onTime(&Deadline{})
	t.Logf("on time of %d: fixed %d, deadline on the known queue %d, deadline expecting arrivals %d", len(reqs), fixed, known, expect)
	if expect < fixed {
		t.Errorf("deadline answered %d on time, fewer than fixed's %d", expect, fixed)
	}
	if expect <= known {
		t.Errorf("expecting arrivals answered %d on time, no more than the known queue's %d", expect, known)
	}
}
