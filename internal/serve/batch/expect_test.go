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
// meanwhile (3,967 on time against fixed's 4,851); counting the expected
// arrivals and running full batches of a backlog keep deadline at or above
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
	fixed, expect := onTime(&Fixed{}), onTime(&Deadline{})
	t.Logf("on time of %d: fixed %d, deadline %d", len(reqs), fixed, expect)
	if expect < fixed {
		t.Errorf("deadline answered %d on time, fewer than fixed's %d", expect, fixed)
	}
}

// TestDeadlineRunsAFullBatchOfABacklog: with 80 requests queued, the 10
// oldest due before a full batch could end but in time for a small one,
// deadline gives those 10 up and runs a full batch of the next 64: serving
// the urgent few in a batch of their own (half a full batch's time on this
// profile) would make the backlog grow.
func TestDeadlineRunsAFullBatchOfABacklog(t *testing.T) {
	p := Linear{Base: 7 * time.Microsecond, PerRow: 150 * time.Nanosecond, Max: 64}
	var q []Item
	for i := range 80 {
		due := 20 * time.Microsecond // after a full batch (16.6 us), not after two
		if i < 10 {
			due = 10 * time.Microsecond // after a batch of 10 (8.5 us), not after a full one
		}
		q = append(q, Item{Arrived: t0.Add(-time.Microsecond), Deadline: t0.Add(due + time.Duration(i)), Rows: 1})
	}
	d := (&Deadline{Expect: -1, Tradeoff: -1}).Decide(t0, q, 1, p)
	if len(d.Run) != 64 || d.Run[0] != 10 || d.Run[63] != 73 {
		t.Fatalf("ran %d requests (%v), want the 64 from position 10", len(d.Run), d.Run)
	}
}

// TestExpectedArrivalsAreBounded: a model that takes 1,024 rows a call, fed
// requests of 64 rows, expects arrivals of 64 rows (two full batches: 32 of
// them), not 2,048 arrivals of one row each; and never more than
// maxExpected. Planning 2,048 jobs at every decision made such a model's
// dispatcher the bottleneck: 0.6% of ONNX Runtime's rate in bench/serve
// overhead, 45% once bounded.
func TestExpectedArrivalsAreBounded(t *testing.T) {
	for _, c := range []struct{ rows, maxRows, want int }{{64, 1024, 32}, {1, 1024, maxExpected}, {1, 64, 128}} {
		dl := &Deadline{}
		var queue []Item
		for i := range 8 {
			at := t0.Add(time.Duration(i) * time.Millisecond)
			queue = append(queue, Item{Arrived: at, Deadline: at.Add(time.Second), Rows: c.rows})
		}
		jobs := dl.expected(t0.Add(8*time.Millisecond), dl.record(queue), nil, c.maxRows, time.Nanosecond)
		if len(jobs) != c.want {
			t.Errorf("requests of %d rows, max %d: %d expected arrivals, want %d", c.rows, c.maxRows, len(jobs), c.want)
		}
		for _, j := range jobs {
			if j.rows != c.rows {
				t.Errorf("requests of %d rows: an expected arrival of %d rows", c.rows, j.rows)
				break
			}
		}
	}
}

// TestDeadlineGivesUpNoLargeRequestWithTimeToSpare: eight clients sending
// requests of a full batch (1,024 rows), each due 100 batches after it
// arrives: nothing needs giving up. The backlog's tradeoff counted the
// time a request of 1,024 rows takes as worth 512 one-row requests, so
// every plan gave up the older requests for the time it freed (and ran the
// newest, or nothing for the arrivals it expected): they stayed queued until
// they expired and were refused (10 s later in bench/serve's overhead runs).
func TestDeadlineGivesUpNoLargeRequestWithTimeToSpare(t *testing.T) {
	p := Linear{Base: 5 * time.Microsecond, PerRow: 200 * time.Nanosecond, Max: 1024}
	var reqs []Item
	at := t0
	objective := 100 * p.Latency(1024)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		// Poisson arrivals at 95% of capacity.
		at = at.Add(time.Duration(rng.ExpFloat64() * float64(p.Latency(1024)) / 0.95))
		reqs = append(reqs, Item{Arrived: at, Deadline: at.Add(objective), Rows: 1024})
	}
	res, err := Simulate(reqs, p, &Deadline{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.OnTime != len(reqs) {
		t.Errorf("%d of %d requests on time (%d refused, %d late), want all", res.OnTime, len(reqs), res.Refused, res.Late)
	}
	for i, q := range [][]Item{reqs[:8], reqs[:2]} {
		d := (&Deadline{}).Decide(t0, q, 1, p)
		if len(d.Refuse) > 0 || len(d.Run) != 1 || d.Run[0] != 0 {
			t.Errorf("queue %d of %d requests: refused %v, ran %v; want the oldest run", i, len(q), d.Refuse, d.Run)
		}
	}
}
