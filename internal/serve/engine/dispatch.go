package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/batch"
	"github.com/virga-ml/virga/internal/serve/runtime"
)

// call is one request in a model's queue. It holds a reference to the
// model's cache entry until it is answered.
type call struct {
	ctx      context.Context
	seq      uint64 // arrival order
	item     batch.Item
	inputs   []serve.Tensor // in the signature's order
	res      chan result    // buffered: the answer never waits for its reader
	answered bool
}

// result is a call's answer, or a batch holding the call for its caller
// to run (its answer comes after, from the batch).
type result struct {
	outputs []serve.Tensor // in the signature's order
	err     error
	run     *run
}

// run is one batch the policy started: its calls, in the queue's order.
type run struct {
	calls []*call
	rows  int
}

// dispatcher owns one loaded model's queue: on each arrival, batch end,
// cancellation or wake-up it asks the model's policy what to refuse and
// what to run, and runs up to Options.Instances batches at once. There is
// no goroutine of its own: whoever changes the queue (a caller arriving or
// withdrawing, a batch ending, the wake-up timer) decides under its lock,
// so the policy is called by one goroutine at a time. A batch runs in the
// goroutine of one of its callers: the caller that arrived, when its own
// request starts a batch at once (an idle model costs no goroutine switch),
// else the first call's caller, woken with the batch instead of its answer
// (one switch a batch, where a dispatcher goroutine and a goroutine per
// batch cost four).
type dispatcher struct {
	e       *Engine
	ent     *entry
	policy  batch.Policy
	profile *adaptive // what the policy decides with: the load-time profile, corrected by the batches run
	batched bool      // the model takes rows along its first dimension

	// The model's metrics, looked up once (a label lookup a request and
	// three a batch were 1.5% of the engine's CPU at saturation).
	queueSeconds, computeSeconds, batchRows prometheus.Observer
	misses                                  prometheus.Counter

	// bufs holds the input buffers of batches that ended (a *[]any, one
	// slice per input): the next batch joins its requests' inputs into
	// them instead of allocating.
	bufs sync.Pool

	mu        sync.Mutex
	queue     []*call // by priority, then arrival
	running   int
	seq       uint64
	stopTimer func() bool
	items     []batch.Item // scratch: the queue as the policy sees it
	gone      []bool       // scratch: the queue's calls refused or run
	quit      bool
	drained   chan struct{} // closed when the last running batch ends after quit
}

func newDispatcher(e *Engine, ent *entry, p batch.Policy) *dispatcher {
	name := ent.key.name
	return &dispatcher{
		e:              e,
		ent:            ent,
		policy:         p,
		profile:        newAdaptive(ent.profile),
		batched:        ent.model.MaxBatch() > 0,
		drained:        make(chan struct{}),
		queueSeconds:   e.metrics.queue.WithLabelValues(name),
		computeSeconds: e.metrics.compute.WithLabelValues(name),
		batchRows:      e.metrics.batchRows.WithLabelValues(name),
		misses:         e.metrics.misses.WithLabelValues(name),
	}
}

// effects is what a decision leaves to do once the lock is released:
// references to drop (one per call answered) and batches to run.
type effects struct {
	answered int
	runs     []*run
}

// finish hands each batch to its first call's caller, except the one
// holding own, which it returns for the calling goroutine to run itself,
// and drops the references of the calls answered.
func (d *dispatcher) finish(fx *effects, own *call) *run {
	var mine *run
	for _, r := range fx.runs {
		if own != nil && mine == nil && slices.Contains(r.calls, own) {
			mine = r
			continue
		}
		r.calls[0].res <- result{run: r}
	}
	if fx.answered > 0 {
		d.e.releaseN(d.ent, fx.answered)
	}
	return mine
}

// infer queues c and waits for its answer, running the batches handed to
// it; false if the dispatcher has stopped.
func (d *dispatcher) infer(c *call) (result, bool) {
	var fx effects
	d.mu.Lock()
	if d.quit {
		d.mu.Unlock()
		return result{}, false
	}
	d.enqueue(c, &fx)
	d.decide(&fx)
	d.mu.Unlock()
	if r := d.finish(&fx, c); r != nil {
		d.run(r)
	}
	withdrawn := false
	for {
		var res result
		if withdrawn {
			res = <-c.res
		} else {
			select {
			case res = <-c.res:
			case <-c.ctx.Done():
				d.withdraw(c)
				// A queued call is answered at once, one in a running
				// batch when the batch ends: when Infer returns, the
				// engine reads the request's inputs no more, so a caller
				// may reuse their memory.
				withdrawn = true
				continue
			}
		}
		if res.run != nil {
			d.run(res.run)
			continue
		}
		if err := c.ctx.Err(); err != nil {
			// Canceled while queued, or while its batch ran (in this
			// goroutine, or another's).
			return result{err: err}, true
		}
		return res, true
	}
}

// withdraw takes a call whose caller went away out of the queue.
func (d *dispatcher) withdraw(c *call) {
	var fx effects
	d.mu.Lock()
	if i := slices.Index(d.queue, c); i >= 0 {
		d.queue = slices.Delete(d.queue, i, i+1)
		d.answer(c, result{err: c.ctx.Err()}, &fx)
		if !d.quit {
			d.decide(&fx)
		}
	}
	d.mu.Unlock()
	d.finish(&fx, nil)
}

// wake is the policy's wake-up timer firing.
func (d *dispatcher) wake() {
	var fx effects
	d.mu.Lock()
	if !d.quit {
		d.decide(&fx)
	}
	d.mu.Unlock()
	d.finish(&fx, nil)
}

// stop stops deciding, waits for the running batches to end and answers
// the calls still queued with ErrUnavailable.
func (d *dispatcher) stop() {
	var fx effects
	d.mu.Lock()
	if d.quit {
		d.mu.Unlock()
		<-d.drained
		return
	}
	d.quit = true
	if d.stopTimer != nil {
		d.stopTimer()
		d.stopTimer = nil
	}
	if d.running == 0 {
		close(d.drained)
	}
	d.mu.Unlock()
	<-d.drained
	d.mu.Lock()
	for _, c := range d.queue {
		d.answer(c, result{err: fmt.Errorf("%w: model %s was unloaded", serve.ErrUnavailable, d.ent.key)}, &fx)
	}
	d.queue = nil
	d.mu.Unlock()
	d.finish(&fx, nil)
}

// enqueue puts an arrival in the queue, by priority then arrival, or
// refuses it when the queue is full.
func (d *dispatcher) enqueue(c *call, fx *effects) {
	d.seq++
	c.seq = d.seq
	if len(d.queue) >= d.e.opts.MaxQueue {
		d.refuse(c, "QueueFull", fmt.Sprintf("model %s: %d requests already queued", d.ent.key, len(d.queue)), fx)
		return
	}
	if n := len(d.queue); n == 0 || d.less(d.queue[n-1], c) {
		d.queue = append(d.queue, c) // the usual case: no priorities
		return
	}
	i, _ := slices.BinarySearchFunc(d.queue, c, func(a, b *call) int {
		if a.item.Priority != b.item.Priority {
			return a.item.Priority - b.item.Priority
		}
		return int(a.seq - b.seq)
	})
	d.queue = slices.Insert(d.queue, i, c)
}

// less orders calls by priority, then arrival.
func (d *dispatcher) less(a, b *call) bool {
	if a.item.Priority != b.item.Priority {
		return a.item.Priority < b.item.Priority
	}
	return a.seq < b.seq
}

// decide asks the policy what to do with the queue until it runs nothing
// more now, and sets the wake-up it asks for. Under mu.
func (d *dispatcher) decide(fx *effects) {
	for {
		// Calls whose caller went away leave first.
		d.queue = slices.DeleteFunc(d.queue, func(c *call) bool {
			if c.ctx.Err() != nil {
				d.answer(c, result{err: c.ctx.Err()}, fx)
				return true
			}
			return false
		})
		now := d.e.clock.Now()
		d.profile.expire(now)
		items := d.items[:0]
		for _, c := range d.queue {
			items = append(items, c.item)
		}
		d.items = items
		idle := d.e.opts.Instances - d.running
		dec := d.policy.Decide(now, items, idle, d.profile)

		gone := slices.Grow(d.gone[:0], len(d.queue))[:len(d.queue)]
		clear(gone)
		d.gone = gone
		for _, i := range dec.Refuse {
			if i < 0 || i >= len(d.queue) || gone[i] {
				continue
			}
			gone[i] = true
			c := d.queue[i]
			d.refuse(c, "DeadlineUnmeetable", fmt.Sprintf("model %s: the request cannot be served by its deadline (%s after its arrival)",
				d.ent.key, c.item.Deadline.Sub(c.item.Arrived)), fx)
		}
		var r *run
		if idle > 0 {
			for _, i := range dec.Run {
				if i < 0 || i >= len(d.queue) || gone[i] {
					continue
				}
				c := d.queue[i]
				if r != nil && (!d.batched || r.rows+c.item.Rows > d.ent.profile.MaxRows()) {
					break
				}
				if r == nil {
					r = &run{}
				}
				gone[i] = true
				r.calls = append(r.calls, c)
				r.rows += c.item.Rows
			}
		}
		if len(dec.Refuse) > 0 || r != nil {
			kept := d.queue[:0]
			for i, c := range d.queue {
				if !gone[i] {
					kept = append(kept, c)
				}
			}
			clear(d.queue[len(kept):])
			d.queue = kept
		}
		if r != nil {
			d.running++
			fx.runs = append(fx.runs, r)
			if d.running < d.e.opts.Instances && len(d.queue) > 0 {
				continue
			}
		}
		if d.stopTimer != nil {
			d.stopTimer()
			d.stopTimer = nil
		}
		if !dec.Wake.IsZero() && len(d.queue) > 0 {
			d.stopTimer = d.e.clock.AfterFunc(max(dec.Wake.Sub(now), 0), d.wake)
		}
		return
	}
}

// run runs a batch: its calls' inputs concatenated along the first
// dimension, the outputs split back; then, the batch counted as ended, the
// policy decides again and the calls are answered.
func (d *dispatcher) run(r *run) {
	start := d.e.clock.Now()
	for _, c := range r.calls {
		d.queueSeconds.Observe(start.Sub(c.item.Arrived).Seconds())
	}
	outs, err := d.compute(r.calls, r.rows)
	end := d.e.clock.Now()
	late := 0
	for _, c := range r.calls {
		if end.After(c.item.Deadline) {
			late++
			d.misses.Inc()
		}
	}
	// The batch's metrics are recorded before its requests are answered,
	// so a caller that scrapes after its answer sees its batch.
	d.computeSeconds.Observe(end.Sub(start).Seconds())
	d.batchRows.Observe(float64(r.rows))
	// The batch counts as ended before its requests release the model, so
	// a model with no reference left has no batch a stop waits for.
	var fx effects
	d.mu.Lock()
	d.running--
	d.profile.observe(end, r.rows, end.Sub(start))
	d.policy.Observe(r.rows, end.Sub(start), late)
	if d.quit {
		if d.running == 0 {
			close(d.drained)
		}
	} else {
		d.decide(&fx)
	}
	for i, c := range r.calls {
		if err != nil {
			d.answer(c, result{err: err}, &fx)
		} else {
			d.answer(c, result{outputs: outs[i]}, &fx)
		}
	}
	d.mu.Unlock()
	d.finish(&fx, nil)
}

func (d *dispatcher) compute(calls []*call, rows int) ([][]serve.Tensor, error) {
	if len(calls) == 1 {
		outs, err := d.ent.model.Run(d.e.ctx, calls[0].inputs)
		if err != nil {
			return nil, fmt.Errorf("model %s: %w", d.ent.key, err)
		}
		return [][]serve.Tensor{outs}, nil
	}
	sig := d.ent.model.Signature()
	inputs := make([]serve.Tensor, len(sig.Inputs))
	parts := make([]serve.Tensor, len(calls))
	// The batch's inputs go into the buffers of a batch that ended (Run
	// keeps no reference to them, and its outputs share none of their
	// memory), which go back once Run returns.
	bufs, _ := d.bufs.Get().(*[]any)
	if bufs == nil || len(*bufs) != len(sig.Inputs) {
		b := make([]any, len(sig.Inputs))
		bufs = &b
	}
	defer d.bufs.Put(bufs)
	for i := range sig.Inputs {
		for j, c := range calls {
			parts[j] = c.inputs[i]
		}
		t, err := runtime.ConcatInto((*bufs)[i], parts)
		if err != nil {
			return nil, fmt.Errorf("model %s: %w", d.ent.key, err)
		}
		(*bufs)[i] = t.Data
		inputs[i] = t
	}
	outs, err := d.ent.model.Run(d.e.ctx, inputs)
	if err != nil {
		return nil, fmt.Errorf("model %s: a batch of %d rows: %w", d.ent.key, rows, err)
	}
	per := make([]int, len(calls))
	for j, c := range calls {
		per[j] = c.item.Rows
	}
	res := make([][]serve.Tensor, len(calls))
	for _, o := range outs {
		split, err := runtime.Split(o, per)
		if err != nil {
			return nil, fmt.Errorf("model %s: output of a batch of %d rows: %w", d.ent.key, rows, err)
		}
		for j := range calls {
			res[j] = append(res[j], split[j])
		}
	}
	return res, nil
}

func (d *dispatcher) refuse(c *call, reason, msg string, fx *effects) {
	d.e.metrics.refusals.WithLabelValues(d.ent.key.name, reason).Inc()
	d.answer(c, result{err: &serve.RefusedError{Reason: reason, Msg: msg}}, fx)
}

// answer gives c its result; its reference to the model is dropped once
// the lock is released (finish).
func (d *dispatcher) answer(c *call, r result, fx *effects) {
	if c.answered {
		return
	}
	c.answered = true
	c.res <- r
	fx.answered++
}

// Greedy is the engine's default batching policy: it never waits, and runs
// the queue's first requests (by priority, then arrival) up to the model's
// largest batch whenever an instance is idle; a request already past its
// deadline is refused. (Triton's dynamic batcher with no queue delay.)
type Greedy struct{}

var _ batch.Policy = Greedy{}

// Decide implements batch.Policy.
func (Greedy) Decide(now time.Time, queue []batch.Item, idle int, p batch.Profile) batch.Decision {
	var dec batch.Decision
	rows := 0
	for i, it := range queue {
		if now.After(it.Deadline) {
			dec.Refuse = append(dec.Refuse, i)
			continue
		}
		if idle > 0 && (len(dec.Run) == 0 || rows+it.Rows <= p.MaxRows()) {
			dec.Run = append(dec.Run, i)
			rows += it.Rows
			continue
		}
		if dec.Wake.IsZero() || it.Deadline.Before(dec.Wake) {
			dec.Wake = it.Deadline.Add(time.Nanosecond)
		}
	}
	return dec
}

// Observe implements batch.Policy.
func (Greedy) Observe(int, time.Duration, int) {}
