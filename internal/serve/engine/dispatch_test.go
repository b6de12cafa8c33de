package engine

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/batch"
	"github.com/virga-ml/virga/internal/serve/runtime"
	"github.com/virga-ml/virga/internal/serve/runtime/mlp"
)

// windowPolicy is a tiny policy for the dispatcher's tests: it refuses
// requests of priority 7, runs the whole queue once it holds n requests or
// its head has waited delay, and otherwise asks to be woken then. It keeps
// the queues it was shown.
type windowPolicy struct {
	n     int
	delay time.Duration

	mu       sync.Mutex
	seen     [][]batch.Item
	observed []int // rows of each batch
}

var _ batch.Policy = (*windowPolicy)(nil)

func (p *windowPolicy) Decide(now time.Time, q []batch.Item, idle int, prof batch.Profile) batch.Decision {
	p.mu.Lock()
	p.seen = append(p.seen, slices.Clone(q))
	p.mu.Unlock()
	var d batch.Decision
	var rest []int
	for i, it := range q {
		if it.Priority == 7 {
			d.Refuse = append(d.Refuse, i)
		} else {
			rest = append(rest, i)
		}
	}
	if len(rest) == 0 || idle == 0 {
		return d
	}
	head := q[rest[0]]
	if len(rest) >= p.n || !now.Before(head.Arrived.Add(p.delay)) {
		d.Run = rest
		return d
	}
	d.Wake = head.Arrived.Add(p.delay)
	return d
}

func (p *windowPolicy) Observe(rows int, took time.Duration, late int) {
	p.mu.Lock()
	p.observed = append(p.observed, rows)
	p.mu.Unlock()
}

// shown is the number of Decide calls whose queue held n requests.
func (p *windowPolicy) shown(n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := 0
	for _, q := range p.seen {
		if len(q) == n {
			c++
		}
	}
	return c
}

func dispatchEngine(t *testing.T, p *windowPolicy, clock *fakeClock, rt runtime.Loader) (*Engine, string) {
	t.Helper()
	root := t.TempDir()
	dir := writeMLP(t, root, "m", "1", 0, 1)
	opts := Options{Source: DirSource{Root: root}, Clock: clock, Objective: time.Hour,
		Policy: func(string, string) batch.Policy { return p }}
	if rt != nil {
		opts.Runtimes = map[string]runtime.Loader{"virga.mlp/v1": rt}
	}
	e := newEngine(t, opts)
	if err := e.Load(context.Background(), "m"); err != nil {
		t.Fatal(err)
	}
	return e, dir
}

// pixelsOf is rows rows of distinct pixels.
func pixelsOf(rows int, seed float32) serve.Tensor {
	t := pixels(rows)
	for i := range t.Data.([]float32) {
		t.Data.([]float32)[i] = float32((i*7+int(seed*13))%17) / 1
	}
	return t
}

// The requests a policy runs together are concatenated along the first
// dimension, and each gets its own rows of the outputs back.
func TestDispatcherBatchesAndSplits(t *testing.T) {
	p := &windowPolicy{n: 3, delay: time.Second}
	e, _ := dispatchEngine(t, p, newFakeClock(), nil)
	type answer struct {
		i    int
		resp *serve.Response
		err  error
	}
	answers := make(chan answer, 3)
	for i, rows := range []int{1, 2, 3} {
		go func() {
			resp, err := e.Infer(context.Background(), &serve.Request{Model: "m", Inputs: []serve.Tensor{pixelsOf(rows, float32(i))}})
			answers <- answer{i, resp, err}
		}()
		waitFor(t, func() bool { return p.shown(i+1) > 0 }) // queued
	}
	ent := e.models[key{"m", "1"}]
	for range 3 {
		a := <-answers
		if a.err != nil {
			t.Fatal(a.err)
		}
		rows := a.i + 1
		want, err := ent.model.Run(context.Background(), []serve.Tensor{pixelsOf(rows, float32(a.i))})
		if err != nil {
			t.Fatal(err)
		}
		got := a.resp.Outputs[0]
		if fmt.Sprint(got.Shape) != fmt.Sprint([]int64{int64(rows), 10}) || !slices.Equal(got.Data.([]float32), want[0].Data.([]float32)) {
			t.Errorf("request %d (%d rows): probabilities %v %v, want its own rows %v", a.i, rows, got.Shape, got.Data, want[0].Data)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !slices.Equal(p.observed, []int{6}) {
		t.Errorf("batches of %v rows, want one of 6", p.observed)
	}
}

// A policy's wake-up time is kept: a request waits for it, then runs.
func TestDispatcherWakesThePolicy(t *testing.T) {
	p := &windowPolicy{n: 5, delay: 10 * time.Millisecond}
	clock := newFakeClock()
	e, _ := dispatchEngine(t, p, clock, nil)
	before := clock.pending()
	done := make(chan error, 1)
	go func() {
		_, err := e.Infer(context.Background(), request("m", 1))
		done <- err
	}()
	waitFor(t, func() bool { return p.shown(1) > 0 && clock.pending() > before })
	clock.Advance(9 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("answered (%v) before the policy's wake-up", err)
	case <-time.After(20 * time.Millisecond):
	}
	clock.Advance(time.Millisecond)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// The queue the policy sees is ordered by priority, then arrival; a refusal
// is answered at once with RefusedError.
func TestDispatcherOrdersByPriorityAndRefuses(t *testing.T) {
	p := &windowPolicy{n: 1, delay: 0}
	g := newGatedLoader()
	clock := newFakeClock()
	e, dir := dispatchEngine(t, p, clock, g)
	gate := g.gateRun(dir)
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release)
	errs := make(chan error, 5)
	infer := func(prio int) {
		r := request("m", 1)
		r.Priority = prio
		_, err := e.Infer(context.Background(), r)
		errs <- err
	}
	go infer(0)
	<-g.running // the first request runs and holds the only instance
	for i, prio := range []int{2, 0, 1} {
		go infer(prio)
		waitFor(t, func() bool { return p.shown(i+1) > 0 })
	}
	p.mu.Lock()
	last := p.seen[len(p.seen)-1]
	p.mu.Unlock()
	var prios []int
	for _, it := range last {
		prios = append(prios, it.Priority)
	}
	if !slices.Equal(prios, []int{0, 1, 2}) {
		t.Errorf("the policy saw priorities %v, want [0 1 2]", prios)
	}
	go infer(7)
	var re *serve.RefusedError
	if err := <-errs; !errors.As(err, &re) || re.Reason != "DeadlineUnmeetable" {
		t.Fatalf("refused request: %v, want RefusedError DeadlineUnmeetable while the others wait", err)
	}
	release()
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := counterSum(t, e, "virga_serve_refusals_total"); got != 1 {
		t.Errorf("%v refusals counted, want 1", got)
	}
}

// A request whose caller goes away leaves the queue and frees its model.
func TestDispatcherDropsCanceledRequests(t *testing.T) {
	p := &windowPolicy{n: 5, delay: time.Hour}
	e, _ := dispatchEngine(t, p, newFakeClock(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := e.Infer(ctx, request("m", 1))
		done <- err
	}()
	waitFor(t, func() bool { return p.shown(1) > 0 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	waitFor(t, func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.models[key{"m", "1"}].refs == 0
	})
}

// Batch after batch joins its requests into the input buffers of the
// batches before it: each request still gets its own rows' outputs, and no
// caller's input is written to.
func TestDispatcherReusesBatchBuffersWithoutMixingAnswers(t *testing.T) {
	p := &windowPolicy{n: 3, delay: time.Hour}
	e, _ := dispatchEngine(t, p, newFakeClock(), nil)
	ent := e.models[key{"m", "1"}]
	type answer struct {
		i    int
		resp *serve.Response
		err  error
	}
	for round := range 4 {
		answers := make(chan answer, 3)
		inputs := make([]serve.Tensor, 3)
		for i := range inputs {
			inputs[i] = pixelsOf(1+(i+round)%2, float32(10*round+i))
		}
		p.mu.Lock()
		p.seen = nil
		p.mu.Unlock()
		for i, in := range inputs {
			go func() {
				resp, err := e.Infer(context.Background(), &serve.Request{Model: "m", Inputs: []serve.Tensor{in}})
				answers <- answer{i, resp, err}
			}()
			waitFor(t, func() bool { return p.shown(i+1) > 0 }) // queued
		}
		for range inputs {
			a := <-answers
			if a.err != nil {
				t.Fatal(a.err)
			}
			in := inputs[a.i]
			rows := int(in.Shape[0])
			if !slices.Equal(in.Data.([]float32), pixelsOf(rows, float32(10*round+a.i)).Data.([]float32)) {
				t.Errorf("round %d: request %d's input was written to", round, a.i)
			}
			want, err := ent.model.Run(context.Background(), []serve.Tensor{in})
			if err != nil {
				t.Fatal(err)
			}
			if got := a.resp.Outputs[0]; !slices.Equal(got.Data.([]float32), want[0].Data.([]float32)) {
				t.Errorf("round %d: request %d (%d rows): probabilities %v, want its own rows %v", round, a.i, rows, got.Data, want[0].Data)
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if want := []int{4, 5, 4, 5}; !slices.Equal(p.observed, want) {
		t.Errorf("batches of %v rows, want %v", p.observed, want)
	}
}

// A request canceled while its batch runs is not answered before the batch
// ends: when Infer returns, the engine reads its inputs no more, and the
// caller may reuse their memory (the protocols decode into pooled buffers).
func TestCanceledRequestReturnsOnceItsBatchEnds(t *testing.T) {
	p := &windowPolicy{n: 1, delay: 0}
	g := newGatedLoader()
	e, dir := dispatchEngine(t, p, newFakeClock(), g)
	gate := g.gateRun(dir)
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := e.Infer(ctx, request("m", 1))
		done <- err
	}()
	<-g.running // its batch runs, held at the gate
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Infer returned (%v) while its batch still ran", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// goid is the calling goroutine's id, from its stack's header.
func goid() string {
	buf := make([]byte, 64)
	buf = buf[:goruntime.Stack(buf, false)]
	f := strings.Fields(string(buf))
	return f[1] // "goroutine 123 [running]:"
}

// goroutineLoader's models record the goroutine each Run runs in.
type goroutineLoader struct {
	runtime.Loader
	mu   sync.Mutex
	runs []string
}

func (g *goroutineLoader) Load(dir string, m serve.Manifest) (runtime.Model, error) {
	model, err := g.Loader.Load(dir, m)
	if err != nil {
		return nil, err
	}
	return &goroutineModel{Model: model, g: g}, nil
}

type goroutineModel struct {
	runtime.Model
	g *goroutineLoader
}

func (m *goroutineModel) Run(ctx context.Context, in []serve.Tensor) ([]serve.Tensor, error) {
	m.g.mu.Lock()
	m.g.runs = append(m.g.runs, goid())
	m.g.mu.Unlock()
	return m.Model.Run(ctx, in)
}

func (g *goroutineLoader) take() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	runs := g.runs
	g.runs = nil
	return runs
}

// A batch runs in the goroutine of one of its callers: the caller whose
// arrival starts it, or, when a wake-up starts it, its first caller, woken
// with the batch. No goroutine of the engine's own stands between a caller
// and its model (each one was a goroutine switch, 4 a request at saturation).
func TestBatchesRunInTheirCallersGoroutines(t *testing.T) {
	g := &goroutineLoader{Loader: mlp.Loader{}}
	clock := newFakeClock()
	p := &windowPolicy{n: 2, delay: time.Second}
	e, _ := dispatchEngine(t, p, clock, g)
	g.take() // the load's warm-up and profile

	// Two requests: the second's arrival starts the batch of both.
	type answer struct {
		caller int
		goid   string
		err    error
	}
	answers := make(chan answer, 2)
	infer := func(caller int) {
		_, err := e.Infer(context.Background(), request("m", 1))
		answers <- answer{caller, goid(), err}
	}
	go infer(0)
	waitFor(t, func() bool { p.mu.Lock(); defer p.mu.Unlock(); return len(p.seen) >= 1 })
	go infer(1)
	a, b := <-answers, <-answers
	if a.caller == 1 {
		a, b = b, a
	}
	if a.err != nil || b.err != nil {
		t.Fatal(a.err, b.err)
	}
	if runs := g.take(); len(runs) != 1 || runs[0] != b.goid {
		t.Errorf("the batch of two ran in goroutines %v, want the second caller's (%s; the first's %s)", runs, b.goid, a.goid)
	}

	// One request, started by the wake-up a second later: it runs in its
	// caller's goroutine, not the timer's.
	p.mu.Lock()
	before := len(p.seen)
	p.mu.Unlock()
	go infer(2)
	waitFor(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return slices.ContainsFunc(p.seen[before:], func(q []batch.Item) bool { return len(q) == 1 })
	})
	clock.Advance(time.Second)
	a = <-answers
	if a.err != nil {
		t.Fatal(a.err)
	}
	if runs := g.take(); len(runs) != 1 || runs[0] != a.goid {
		t.Errorf("the woken batch ran in goroutines %v, want its caller's (%s)", runs, a.goid)
	}
}
