package batch

import (
	"container/heap"
	"fmt"
	"time"
)

// Outcome is what became of one request in a simulation.
type Outcome int

// The outcomes of a request.
const (
	Unserved Outcome = iota // still queued when the simulation ended (cannot happen with a policy that serves its queue)
	OnTime                  // answered by its deadline
	Late                    // answered after its deadline
	Refused                 // refused by the policy
)

func (o Outcome) String() string {
	return [...]string{"unserved", "on time", "late", "refused"}[o]
}

// Result is a simulation's outcome per request and its totals.
type Result struct {
	Outcomes []Outcome
	// Finished is when each answered request's batch ended.
	Finished []time.Time
	OnTime   int // the goodput: requests answered within their deadline
	Late     int
	Refused  int
	Unserved int
	Batches  int
}

// Simulate runs one model's queue in virtual time: requests arrive as reqs
// says (in arrival order), the policy decides whenever a request arrives, a
// batch ends or the time it asked to be woken comes, and each batch takes
// exactly the profile's latency on one of instances instances. It calls the
// policy exactly as the live engine's dispatcher does, so the figures are
// those of the same code, and returns an error if the policy returns an
// invalid decision.
func Simulate(reqs []Item, p Profile, pol Policy, instances int) (*Result, error) {
	if instances < 1 {
		return nil, fmt.Errorf("simulating %d instances: want at least 1", instances)
	}
	for i := 1; i < len(reqs); i++ {
		if reqs[i].Arrived.Before(reqs[i-1].Arrived) {
			return nil, fmt.Errorf("request %d arrived before request %d: requests must be in arrival order", i, i-1)
		}
	}
	res := &Result{Outcomes: make([]Outcome, len(reqs)), Finished: make([]time.Time, len(reqs))}
	var (
		queue []Item // what the policy sees
		ids   []int  // the request behind each queue position
		busy  endHeap
		next  int // the next request to arrive
		wake  time.Time
		now   time.Time
	)
	idle := instances
	for next < len(reqs) || len(queue) > 0 || busy.Len() > 0 {
		// 1. Advance to the next event: a batch ending, an arrival, a wake.
		t := time.Time{}
		if busy.Len() > 0 {
			t = busy[0].end
		}
		if next < len(reqs) && (t.IsZero() || reqs[next].Arrived.Before(t)) {
			t = reqs[next].Arrived
		}
		if !wake.IsZero() && wake.After(now) && (t.IsZero() || wake.Before(t)) {
			t = wake
		}
		if t.IsZero() {
			// Requests queued, nothing running, nothing to come, no wake:
			// the policy leaves them waiting forever.
			break
		}
		now = t
		// 2. Batches ending now free their instances; requests arriving now join.
		for busy.Len() > 0 && !busy[0].end.After(now) {
			b := heap.Pop(&busy).(batchRun)
			idle++
			late := 0
			for _, id := range b.ids {
				res.Finished[id] = b.end
				if b.end.After(reqs[id].Deadline) {
					res.Outcomes[id] = Late
					late++
				} else {
					res.Outcomes[id] = OnTime
				}
			}
			pol.Observe(b.rows, b.end.Sub(b.start), late)
		}
		for next < len(reqs) && !reqs[next].Arrived.After(now) {
			queue = append(queue, reqs[next])
			ids = append(ids, next)
			next++
		}
		// 3. Ask the policy until it has nothing more to do now.
		wake = time.Time{}
		for len(queue) > 0 {
			d := pol.Decide(now, queue, idle, p)
			if err := Check(d, queue, idle, p); err != nil {
				return nil, fmt.Errorf("at %v: invalid decision: %w", now, err)
			}
			wake = d.Wake
			if len(d.Refuse) == 0 && len(d.Run) == 0 {
				break
			}
			drop := make([]bool, len(queue))
			for _, i := range d.Refuse {
				res.Outcomes[ids[i]] = Refused
				drop[i] = true
			}
			if len(d.Run) > 0 {
				b := batchRun{start: now}
				for _, i := range d.Run {
					b.ids = append(b.ids, ids[i])
					b.rows += rowsOf(queue[i])
					drop[i] = true
				}
				b.end = now.Add(p.Latency(b.rows))
				heap.Push(&busy, b)
				idle--
				res.Batches++
			}
			k := 0
			for i := range queue {
				if !drop[i] {
					queue[k], ids[k] = queue[i], ids[i]
					k++
				}
			}
			queue, ids = queue[:k], ids[:k]
		}
	}
	for _, o := range res.Outcomes {
		switch o {
		case OnTime:
			res.OnTime++
		case Late:
			res.Late++
		case Refused:
			res.Refused++
		default:
			res.Unserved++
		}
	}
	return res, nil
}

type batchRun struct {
	start, end time.Time
	rows       int
	ids        []int
}

// endHeap orders running batches by when they end.
type endHeap []batchRun

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i].end.Before(h[j].end) }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(batchRun)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
