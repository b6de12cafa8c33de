package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

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

type result struct {
	outputs []serve.Tensor // in the signature's order
	err     error
}

type batchDone struct {
	rows int
	took time.Duration
	late int
}

// dispatcher owns one loaded model's queue: on each arrival, batch end,
// cancellation or wake-up it asks the model's policy what to refuse and
// what to run, and runs up to Options.Instances batches at once. The policy
// is called from the dispatcher's goroutine only.
type dispatcher struct {
	e       *Engine
	ent     *entry
	policy  batch.Policy
	profile *adaptive // what the policy decides with: the load-time profile, corrected by the batches run
	batched bool      // the model takes rows along its first dimension

	arrive  chan *call
	cancel  chan *call
	done    chan batchDone
	wake    chan struct{}
	quit    chan struct{}
	stopped chan struct{}

	// bufs holds the input buffers of batches that ended (a *[]any, one
	// slice per input): the next batch joins its requests' inputs into
	// them instead of allocating.
	bufs sync.Pool

	// Owned by the loop.
	queue     []*call // by priority, then arrival
	running   int
	seq       uint64
	stopTimer func() bool
	items     []batch.Item // scratch: the queue as the policy sees it
	gone      []bool       // scratch: the queue's calls refused or run
}

// maxCoalesce is the most arrivals already waiting that join the queue
// before the policy decides once for them all.
const maxCoalesce = 64

func newDispatcher(e *Engine, ent *entry, p batch.Policy) *dispatcher {
	d := &dispatcher{
		e:       e,
		ent:     ent,
		policy:  p,
		profile: newAdaptive(ent.profile),
		batched: ent.model.MaxBatch() > 0,
		arrive:  make(chan *call),
		cancel:  make(chan *call),
		done:    make(chan batchDone, e.opts.Instances),
		wake:    make(chan struct{}, 1),
		quit:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	go d.loop()
	return d
}

// submit queues c; false if the dispatcher has stopped.
func (d *dispatcher) submit(c *call) bool {
	select {
	case d.arrive <- c:
		return true
	case <-d.stopped:
		return false
	}
}

// withdraw takes a call whose caller went away out of the queue.
func (d *dispatcher) withdraw(c *call) {
	select {
	case d.cancel <- c:
	case <-d.stopped:
	}
}

// stop ends the loop once the running batches end; calls still queued are
// answered with ErrUnavailable.
func (d *dispatcher) stop() {
	select {
	case <-d.quit:
	default:
		close(d.quit)
	}
	<-d.stopped
}

func (d *dispatcher) loop() {
	defer close(d.stopped)
	for {
		select {
		case c := <-d.arrive:
			d.enqueue(c)
			// Arrivals already waiting join too, and the policy decides
			// once for them all: under load a decision per arrival costs
			// the dispatcher more than the batch it runs.
		drain:
			for range maxCoalesce {
				select {
				case c := <-d.arrive:
					d.enqueue(c)
				default:
					break drain
				}
			}
		case c := <-d.cancel:
			if i := slices.Index(d.queue, c); i >= 0 {
				d.queue = slices.Delete(d.queue, i, i+1)
				d.answer(c, result{err: c.ctx.Err()})
			}
		case b := <-d.done:
			d.running--
			d.profile.observe(d.e.clock.Now(), b.rows, b.took)
			d.policy.Observe(b.rows, b.took, b.late)
		case <-d.wake:
		case <-d.quit:
			if d.stopTimer != nil {
				d.stopTimer()
			}
			for d.running > 0 {
				<-d.done
				d.running--
			}
			for _, c := range d.queue {
				d.answer(c, result{err: fmt.Errorf("%w: model %s was unloaded", serve.ErrUnavailable, d.ent.key)})
			}
			d.queue = nil
			return
		}
		d.decide()
	}
}

// enqueue puts an arrival in the queue, by priority then arrival, or
// refuses it when the queue is full.
func (d *dispatcher) enqueue(c *call) {
	d.seq++
	c.seq = d.seq
	if len(d.queue) >= d.e.opts.MaxQueue {
		d.refuse(c, "QueueFull", fmt.Sprintf("model %s: %d requests already queued", d.ent.key, len(d.queue)))
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

// decide asks the policy what to do with the queue until it runs nothing
// more now, and sets the wake-up it asks for.
func (d *dispatcher) decide() {
	for {
		// Calls whose caller went away leave first.
		d.queue = slices.DeleteFunc(d.queue, func(c *call) bool {
			if c.ctx.Err() != nil {
				d.answer(c, result{err: c.ctx.Err()})
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
				d.ent.key, c.item.Deadline.Sub(c.item.Arrived)))
		}
		var run []*call
		rows := 0
		if idle > 0 {
			for _, i := range dec.Run {
				if i < 0 || i >= len(d.queue) || gone[i] {
					continue
				}
				c := d.queue[i]
				if len(run) > 0 && (!d.batched || rows+c.item.Rows > d.ent.profile.MaxRows()) {
					break
				}
				gone[i] = true
				run = append(run, c)
				rows += c.item.Rows
			}
		}
		kept := d.queue[:0]
		for i, c := range d.queue {
			if !gone[i] {
				kept = append(kept, c)
			}
		}
		clear(d.queue[len(kept):])
		d.queue = kept
		if len(run) > 0 {
			d.running++
			go d.run(run, rows)
			if d.running < d.e.opts.Instances && len(d.queue) > 0 {
				continue
			}
		}
		if d.stopTimer != nil {
			d.stopTimer()
			d.stopTimer = nil
		}
		if !dec.Wake.IsZero() && len(d.queue) > 0 {
			d.stopTimer = d.e.clock.AfterFunc(max(dec.Wake.Sub(now), 0), func() {
				select {
				case d.wake <- struct{}{}:
				default:
				}
			})
		}
		return
	}
}

// run runs calls as one batch: their inputs concatenated along the first
// dimension, the outputs split back.
func (d *dispatcher) run(calls []*call, rows int) {
	name := d.ent.key.name
	start := d.e.clock.Now()
	for _, c := range calls {
		d.e.metrics.queue.WithLabelValues(name).Observe(start.Sub(c.item.Arrived).Seconds())
	}
	outs, err := d.compute(calls, rows)
	end := d.e.clock.Now()
	late := 0
	for _, c := range calls {
		if end.After(c.item.Deadline) {
			late++
			d.e.metrics.misses.WithLabelValues(name).Inc()
		}
	}
	// The batch's metrics are recorded before its requests are answered,
	// so a caller that scrapes after its answer sees its batch.
	d.e.metrics.compute.WithLabelValues(name).Observe(end.Sub(start).Seconds())
	d.e.metrics.batchRows.WithLabelValues(name).Observe(float64(rows))
	// The loop learns the batch ended before its requests release the
	// model (done has room for every instance's batch), so a model with no
	// reference left has no batch the loop still waits for.
	d.done <- batchDone{rows: rows, took: end.Sub(start), late: late}
	for i, c := range calls {
		if err != nil {
			d.answer(c, result{err: err})
		} else {
			d.answer(c, result{outputs: outs[i]})
		}
	}
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

func (d *dispatcher) refuse(c *call, reason, msg string) {
	d.e.metrics.refusals.WithLabelValues(d.ent.key.name, reason).Inc()
	d.answer(c, result{err: &serve.RefusedError{Reason: reason, Msg: msg}})
}

// answer gives c its result and drops its reference to the model.
func (d *dispatcher) answer(c *call, r result) {
	if c.answered {
		return
	}
	c.answered = true
	c.res <- r
	d.e.release(d.ent)
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
