// Package engine is Virga's inference engine behind serve.Service: models
// found by a Source, loaded by the runtime their manifest names (one at a
// time; a reload of the same files is not profiled again), kept in a cache
// under a memory budget (idle models evicted as the admission rule says,
// never one with requests in flight or queued), and a dispatcher per loaded
// model that asks a batch.Policy what to run. It serves no protocol (the
// front ends in internal/serve/oip do) and decides nothing about batching
// itself (the policies in internal/serve/batch do).
package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/batch"
	"github.com/virga-ml/virga/internal/serve/runtime"
	elasticrt "github.com/virga-ml/virga/internal/serve/runtime/elastic"
	"github.com/virga-ml/virga/internal/serve/runtime/mlp"
	"github.com/virga-ml/virga/internal/serve/runtime/onnx"
)

// Defaults of Options.
const (
	DefaultMemoryBudget = 1 << 30
	DefaultObjective    = time.Second
	DefaultMaxQueue     = 1024
)

// Options configure an Engine; only Source is required.
type Options struct {
	// Source finds models by name.
	Source Source
	// Runtimes load models by their manifest's format; nil means
	// DefaultRuntimes(onnx.Settings{}).
	Runtimes map[string]runtime.Loader
	// MemoryBudget is the bytes loaded models may hold together (as their
	// runtimes estimate them); 0 means DefaultMemoryBudget.
	MemoryBudget int64
	// Objective is a request's time in the server when it sets no timeout;
	// 0 means DefaultObjective.
	Objective time.Duration
	// Instances is how many batches of one model run at once; 0 means 1.
	Instances int
	// MaxQueue is the most requests waiting in one model's queue; one more
	// is refused (QueueFull). 0 means DefaultMaxQueue.
	MaxQueue int
	// Policy makes a model's batching policy when it loads; nil means
	// Greedy.
	Policy func(model, version string) batch.Policy
	// Admission, when set, lets a load evict a model only if its name was
	// asked for more recently-often than the victim's (admit.go); else the
	// request is refused (NotAdmitted). Unset: plain LRU, any load may evict
	// the least recently used idle model.
	Admission bool
	// CostAware, when set, replaces Admission's rule and LRU eviction
	// (admit.go): the victims are the idle models with the fewest recent
	// requests per byte, weighted by their load time (those requested
	// within the last Objective last); and a load goes ahead only if its
	// model was asked for more than twice as often as its victims
	// together, else the request is refused (NotAdmitted). `virga serve`'s
	// default.
	CostAware bool
	// MaxLoads is how many models load at once (decode, warm-up, profile);
	// 0 means 1. Loads take the CPU the loaded models serve with.
	MaxLoads int
	// ProfileCache is a directory keeping what loads measured (profile,
	// memory, load time) by the model files' digest and the runtime
	// settings, so a model loaded again, or after a restart, is not
	// profiled again (profilecache.go); "" keeps them in memory only.
	ProfileCache string
	// Pinned models load when the engine starts and are never evicted;
	// Ready is false until they are loaded.
	Pinned []string
	// Clock is the engine's time; nil means the real clock.
	Clock Clock
	// Registry receives the engine's metrics; nil means a new one.
	Registry *prometheus.Registry
	// Name and Version are the server's metadata.
	Name, Version string
}

// DefaultRuntimes are the runtimes of the formats Virga serves.
func DefaultRuntimes(s onnx.Settings) map[string]runtime.Loader {
	return map[string]runtime.Loader{
		onnx.Format:      &onnx.Loader{Settings: s},
		mlp.Format:       mlp.Loader{},
		elasticrt.Format: elasticrt.Loader{},
	}
}

// Engine is the inference engine; it implements serve.Service.
type Engine struct {
	opts    Options
	clock   Clock
	metrics *metrics
	ctx     context.Context // ends at Close; loads run under it
	cancel  context.CancelFunc

	mu      sync.Mutex
	models  map[key]*entry
	current map[string]string // the version a name serves (set on first use, by Swap and Load)
	failed  map[key]string    // why a version's last load failed
	used    int64             // bytes reserved by models loaded and loading
	peak    int64             // the most used has been
	// freq counts recent requests per model name, for admission (admit.go).
	freq      map[string]float64
	freqTotal int
	changed   chan struct{} // closed and replaced when memory or references change
	profiles  *profileCache
	loadSlots chan struct{} // a token per load under way (Options.MaxLoads)
	closed    bool
	loads     sync.WaitGroup
}

var _ serve.Service = (*Engine)(nil)

type key struct{ name, version string }

func (k key) String() string { return k.name + " version " + k.version }

// entry is one model version in the cache.
type entry struct {
	key  key
	dir  string
	done chan struct{} // closed when the load ends: ready, or err set
	err  error

	ready    bool
	waiting  bool  // the load waits for room in the budget
	refs     int   // requests holding it: waiting for its load, queued or running
	pinned   bool  // never evicted
	retired  bool  // evicted as soon as idle (an older version after a swap, or unloaded)
	reserved int64 // bytes of the budget it holds
	lastUsed time.Time
	// expect is how long its load is expected to take once it starts
	// (from an earlier load of the same files; 0: unknown), and started
	// when it started (zero while it waits for a load slot).
	expect  time.Duration
	started time.Time
	// keep: a request refused as LoadTooSlow before the load began wants
	// it loaded for the next ones, even with no reference left.
	keep bool

	model   runtime.Model
	profile *Profile
	disp    *dispatcher
}

// New starts an engine and the loads of its pinned models.
func New(opts Options) (*Engine, error) {
	if opts.Source == nil {
		return nil, errors.New("engine: Options.Source is required")
	}
	if opts.Runtimes == nil {
		opts.Runtimes = DefaultRuntimes(onnx.Settings{})
	}
	if opts.MemoryBudget <= 0 {
		opts.MemoryBudget = DefaultMemoryBudget
	}
	if opts.Objective <= 0 {
		opts.Objective = DefaultObjective
	}
	opts.Instances = max(opts.Instances, 1)
	if opts.MaxQueue <= 0 {
		opts.MaxQueue = DefaultMaxQueue
	}
	if opts.Policy == nil {
		opts.Policy = func(string, string) batch.Policy { return Greedy{} }
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	opts.MaxLoads = max(opts.MaxLoads, 1)
	profiles, err := newProfileCache(opts.ProfileCache)
	if err != nil {
		return nil, err
	}
	if opts.Name == "" {
		opts.Name = "virga"
	}
	e := &Engine{
		opts:    opts,
		clock:   opts.Clock,
		metrics: newMetrics(opts.Registry),
		models:  map[key]*entry{},
		current: map[string]string{},
		failed:  map[key]string{},
		changed: make(chan struct{}),

		profiles:  profiles,
		loadSlots: make(chan struct{}, opts.MaxLoads),
	}
	if e.clock == nil {
		e.clock = realClock{}
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.metrics.budget.Set(float64(opts.MemoryBudget))
	for _, name := range opts.Pinned {
		r, err := opts.Source.Resolve(e.ctx, name, "")
		if err != nil {
			e.Close()
			return nil, fmt.Errorf("pinned model %s: %w", name, err)
		}
		e.mu.Lock()
		e.current[name] = r.Version
		ent := e.entryLocked(key{name, r.Version}, r.Dir)
		ent.pinned = true
		ent.refs-- // the pin holds it, not a request
		e.mu.Unlock()
	}
	return e, nil
}

// Close unloads every model; requests still queued are answered with
// ErrUnavailable.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.cancel()
	e.signalLocked()
	e.mu.Unlock()
	e.loads.Wait()
	e.mu.Lock()
	var ready []*entry
	for k, ent := range e.models {
		if ent.ready {
			ready = append(ready, ent)
		}
		delete(e.models, k)
	}
	e.mu.Unlock()
	// Without the lock: a dispatcher stops once its running batches end,
	// and they release their requests' references under the lock.
	var errs []error
	for _, ent := range ready {
		ent.disp.stop()
		errs = append(errs, ent.model.Close())
	}
	e.mu.Lock()
	for _, ent := range ready {
		e.used -= ent.reserved
		ent.reserved = 0
	}
	e.metrics.memory.Set(float64(e.used))
	e.mu.Unlock()
	return errors.Join(errs...)
}

// signalLocked wakes whatever waits for memory or references to change.
func (e *Engine) signalLocked() {
	close(e.changed)
	e.changed = make(chan struct{})
}

// entryLocked returns the cache entry of k holding one more reference,
// starting its load if it is not loaded or loading.
func (e *Engine) entryLocked(k key, dir string) *entry {
	ent := e.models[k]
	if ent == nil {
		ent = &entry{key: k, dir: dir, done: make(chan struct{})}
		e.models[k] = ent
		e.loads.Add(1)
		go e.load(ent)
	}
	ent.refs++
	return ent
}

// resolve finds the version a request names: the one its name serves when
// it names none. A version loaded or loading (and not retired) is answered
// from the cache without asking the source: a directory source reads the
// file system on every call, which cost a request more than running the
// digits model. A version removed from the source meanwhile is served
// until it is unloaded.
func (e *Engine) resolve(ctx context.Context, name, version string) (key, string, error) {
	e.mu.Lock()
	if version == "" {
		if v, ok := e.current[name]; ok {
			version = v
		}
	}
	if ent := e.models[key{name, version}]; version != "" && ent != nil && !ent.retired {
		e.mu.Unlock()
		return ent.key, ent.dir, nil
	}
	e.mu.Unlock()
	r, err := e.opts.Source.Resolve(ctx, name, version)
	if err != nil {
		return key{}, "", err
	}
	if version == "" {
		e.mu.Lock()
		if v, ok := e.current[name]; ok && v != r.Version {
			// A swap won the race: serve what it chose.
			e.mu.Unlock()
			return e.resolve(ctx, name, v)
		}
		e.current[name] = r.Version
		e.mu.Unlock()
	}
	return key{r.Name, r.Version}, r.Dir, nil
}

// acquire returns k's loaded model holding a reference the caller must
// release, waiting for its load until ctx ends or deadline passes.
func (e *Engine) acquire(ctx context.Context, k key, dir string, deadline time.Time) (*entry, error) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, fmt.Errorf("%w: the server is shutting down", serve.ErrUnavailable)
	}
	e.countLocked(k.name)
	ent := e.entryLocked(k, dir)
	now := e.clock.Now()
	if ent.ready {
		ent.lastUsed = now
		e.mu.Unlock()
		return ent, nil
	}
	if wait, known := e.loadWaitLocked(ent, now); known && !deadline.IsZero() && now.Add(wait).After(deadline) {
		// Refused now rather than at the deadline; the load goes on for
		// the requests after it.
		ent.refs--
		ent.keep = true
		e.signalLocked()
		e.metrics.refusals.WithLabelValues(k.name, "LoadTooSlow").Inc()
		e.mu.Unlock()
		return nil, &serve.RefusedError{Reason: "LoadTooSlow", Msg: fmt.Sprintf(
			"model %s is loading and is expected to be ready in %v (its last load's time, after the loads ahead of it), after the request's deadline (%v from now)",
			k, wait.Round(time.Millisecond), deadline.Sub(now).Round(time.Millisecond))}
	}
	e.mu.Unlock()

	var timeout <-chan struct{}
	if !deadline.IsZero() {
		ch := make(chan struct{})
		stop := e.clock.AfterFunc(deadline.Sub(e.clock.Now()), func() { close(ch) })
		defer stop()
		timeout = ch
	}
	select {
	case <-ent.done:
		if ent.err != nil {
			return nil, ent.err // the load released the references
		}
		e.mu.Lock()
		ent.lastUsed = e.clock.Now()
		e.mu.Unlock()
		return ent, nil
	case <-ctx.Done():
		e.giveUp(ent)
		return nil, ctx.Err()
	case <-timeout:
		if waiting := e.giveUp(ent); waiting {
			return nil, fmt.Errorf("%w: %s: no room in the memory budget (%d bytes) before the request's deadline: every loaded model has requests in flight",
				serve.ErrUnavailable, k, e.opts.MemoryBudget)
		}
		return nil, &serve.RefusedError{Reason: "LoadTooSlow", Msg: fmt.Sprintf(
			"model %s is still loading at the request's deadline; the load goes on: retry, or load the model before its first request (pin it, or POST /v2/repository/models/%s/load)", k, k.name)}
	}
}

// giveUp drops a waiting request's reference unless the load ended
// meanwhile; it says whether the load was waiting for memory.
func (e *Engine) giveUp(ent *entry) (waitingForMemory bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-ent.done:
		if ent.err == nil {
			e.releaseLocked(ent)
		}
		return false
	default:
	}
	ent.refs--
	e.signalLocked()
	return ent.waiting
}

// release drops a reference taken by acquire.
func (e *Engine) release(ent *entry) {
	e.mu.Lock()
	e.releaseLocked(ent)
	e.mu.Unlock()
}

// releaseN drops n references taken by acquire.
func (e *Engine) releaseN(ent *entry, n int) {
	e.mu.Lock()
	for range n {
		e.releaseLocked(ent)
	}
	e.mu.Unlock()
}

func (e *Engine) releaseLocked(ent *entry) {
	ent.refs--
	ent.lastUsed = e.clock.Now()
	if ent.refs == 0 && ent.retired {
		// Not here: the last reference may be dropped by the model's own
		// dispatcher, which eviction stops and waits for.
		go e.evictRetired(ent)
	}
	e.signalLocked()
}

// evictRetired unloads a retired model if it is still idle.
func (e *Engine) evictRetired(ent *entry) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ent.refs == 0 && ent.retired && ent.ready && !ent.pinned && e.models[ent.key] == ent {
		e.evictLocked(ent)
	}
}

// load loads, warms up and profiles ent's model:
//  1. read the manifest, find its runtime, and look up what an earlier
//     load of the same files and settings measured (profilecache.go);
//  2. reserve its memory (its own figure from that load, else the
//     runtime's estimate), evicting idle models as the admission rule
//     allows (admit.go) or waiting for room while a request still wants
//     it;
//  3. wait for a load slot (Options.MaxLoads), load, then make the
//     reservation the model's own figure;
//  4. profile it, or only warm it up if its profile is known; start its
//     dispatcher, and mark it ready.
//
// A failure removes the entry and fails its waiting requests, and nothing
// else.
func (e *Engine) load(ent *entry) {
	defer e.loads.Done()
	start := e.clock.Now()
	name := ent.key.name
	slot := false
	fail := func(err error) {
		if slot {
			<-e.loadSlots
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		if ent.model != nil {
			ent.model.Close()
		}
		e.used -= ent.reserved
		ent.reserved = 0
		e.metrics.memory.Set(float64(e.used))
		if e.models[ent.key] == ent {
			delete(e.models, ent.key)
		}
		if _, refused := errors.AsType[*serve.RefusedError](err); refused {
			// Not admitted: nothing is wrong with the model.
			ent.err = err
			close(ent.done)
			e.signalLocked()
			return
		}
		if !errors.Is(err, serve.ErrUnavailable) {
			err = fmt.Errorf("%w: loading %s: %w", serve.ErrUnavailable, ent.key, err)
		}
		e.failed[ent.key] = err.Error()
		ent.err = err
		close(ent.done)
		e.metrics.loads.WithLabelValues(name, "failed").Inc()
		e.signalLocked()
	}

	// 1. The manifest, the runtime, and what earlier loads measured.
	m, err := ReadManifest(ent.dir)
	if err != nil {
		fail(err)
		return
	}
	loader := e.opts.Runtimes[m.Format]
	if loader == nil {
		fail(fmt.Errorf("%s: format: %q, want one of %s", filepath.Join(ent.dir, serve.ManifestFile), m.Format, formats(e.opts.Runtimes)))
		return
	}
	cacheKey, err := e.profiles.key(ent.dir, m, loader, e.opts.Instances)
	if err != nil {
		fail(err)
		return
	}
	rec, known := e.profiles.get(cacheKey)
	if known {
		e.mu.Lock()
		ent.expect = rec.Load
		e.mu.Unlock()
	}
	estimate, err := e.profiles.estimate(cacheKey, loader, ent.dir, m)
	if err != nil {
		fail(err)
		return
	}

	// 2. Room in the budget.
	if err := e.reserve(ent, estimate); err != nil {
		fail(err)
		return
	}

	// 3. A load slot, and the model.
	if err := e.takeLoadSlot(ent); err != nil {
		fail(err)
		return
	}
	slot = true
	began := e.clock.Now()
	model, err := loader.Load(ent.dir, m)
	if err != nil {
		fail(err)
		return
	}
	decoded := e.clock.Now()
	ent.model = model
	if err := e.reserve(ent, model.Memory()-ent.reserved); err != nil {
		fail(err)
		return
	}

	// 4. Profile (or warm-up), dispatcher.
	var prof *Profile
	if known {
		if err := warmUp(e.ctx, model); err != nil {
			fail(err)
			return
		}
		prof = rec.Profile
		rec.Memory, rec.Load = model.Memory(), e.clock.Now().Sub(began)
		e.profiles.put(cacheKey, rec, false)
	} else {
		if prof, err = Measure(e.ctx, model, e.clock.Now); err != nil {
			fail(err)
			return
		}
		// The next load decodes and warms up: about the decode's time.
		e.profiles.put(cacheKey, loadRecord{Profile: prof, Memory: model.Memory(), Load: decoded.Sub(began)}, true)
	}
	<-e.loadSlots
	slot = false
	ent.profile = prof
	ent.disp = newDispatcher(e, ent, e.opts.Policy(name, ent.key.version))
	e.mu.Lock()
	ent.ready = true
	ent.lastUsed = e.clock.Now()
	delete(e.failed, ent.key)
	close(ent.done)
	e.metrics.loads.WithLabelValues(name, "ok").Inc()
	e.metrics.loadTime.WithLabelValues(name).Observe(e.clock.Now().Sub(start).Seconds())
	if known {
		e.metrics.profileReuse.Inc()
	}
	e.metrics.loaded.Inc()
	e.metrics.modelBytes.WithLabelValues(name, ent.key.version).Set(float64(ent.reserved))
	if ent.refs == 0 && !ent.pinned {
		// Every request gave up: it stays, idle, as the least recently used.
		ent.lastUsed = time.Time{}
	}
	e.signalLocked()
	e.mu.Unlock()
}

// takeLoadSlot waits for one of the Options.MaxLoads load slots; a load
// nobody waits for any more (no request, no pin, no request refused for
// its slowness) gives up instead.
func (e *Engine) takeLoadSlot(ent *entry) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		if e.closed {
			return fmt.Errorf("%w: the server is shutting down", serve.ErrUnavailable)
		}
		if ent.refs == 0 && !ent.pinned && !ent.keep {
			return fmt.Errorf("%w: %s: no request waits for it any more", serve.ErrUnavailable, ent.key)
		}
		select {
		case e.loadSlots <- struct{}{}:
			ent.started = e.clock.Now()
			return nil
		default:
		}
		ch := e.changed
		e.mu.Unlock()
		select {
		case e.loadSlots <- struct{}{}:
			e.mu.Lock()
			ent.started = e.clock.Now()
			return nil
		case <-ch:
		}
		e.mu.Lock()
	}
}

// loadWaitLocked is the least time before ent's load can end: what is
// left of the loads under way (spread over the slots) and its own, when
// every one of those is known.
func (e *Engine) loadWaitLocked(ent *entry, now time.Time) (time.Duration, bool) {
	if ent.expect <= 0 {
		return 0, false
	}
	if !ent.started.IsZero() {
		return max(ent.started.Add(ent.expect).Sub(now), 0), true
	}
	var ahead time.Duration
	for _, o := range e.models {
		if o == ent || o.ready || o.started.IsZero() {
			continue
		}
		if o.expect <= 0 {
			return 0, false
		}
		ahead += max(o.started.Add(o.expect).Sub(now), 0)
	}
	if len(e.loadSlots) < cap(e.loadSlots) {
		ahead = 0 // a slot is free
	}
	return ahead/time.Duration(cap(e.loadSlots)) + ent.expect, true
}

// estimateMemory is the runtime's estimate, or twice the model file's size.
func estimateMemory(l runtime.Loader, dir string, m serve.Manifest) (int64, error) {
	if est, ok := l.(runtime.Estimator); ok {
		return est.Estimate(dir, m)
	}
	st, err := os.Stat(filepath.Join(dir, m.File))
	if err != nil {
		return 0, err
	}
	return 2 * st.Size(), nil
}

func formats(rs map[string]runtime.Loader) string {
	var fs []string
	for f := range rs {
		fs = append(fs, fmt.Sprintf("%q", f))
	}
	sort.Strings(fs)
	s := ""
	for i, f := range fs {
		if i > 0 {
			s += ", "
		}
		s += f
	}
	return s
}

// reserve adds need bytes (possibly negative) to ent's reservation,
// evicting idle models least recently used first, or waiting for room
// while a request or a pin still wants ent.
func (e *Engine) reserve(ent *entry, need int64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	defer func() { ent.waiting = false }()
	for {
		if e.closed {
			return fmt.Errorf("%w: the server is shutting down", serve.ErrUnavailable)
		}
		if need <= 0 || e.used+need <= e.opts.MemoryBudget {
			e.used += need
			e.peak = max(e.peak, e.used)
			ent.reserved += need
			e.metrics.memory.Set(float64(e.used))
			return nil
		}
		if ent.reserved+need > e.opts.MemoryBudget {
			return fmt.Errorf("%w: %s needs %d bytes, more than the whole memory budget (%d bytes)", serve.ErrUnavailable, ent.key, ent.reserved+need, e.opts.MemoryBudget)
		}
		if ent.refs == 0 && !ent.pinned {
			return fmt.Errorf("%w: %s: no room in the memory budget and no request waits for it any more", serve.ErrUnavailable, ent.key)
		}
		if e.opts.CostAware {
			victims, err := e.costVictimsLocked(ent, e.used+need-e.opts.MemoryBudget)
			if err != nil {
				return err
			}
			for _, v := range victims {
				e.evictLocked(v)
			}
			if len(victims) > 0 {
				continue
			}
		} else if victim := e.lruLocked(); victim != nil {
			if err := e.admitLocked(ent, victim); err != nil {
				return err
			}
			e.evictLocked(victim)
			continue
		}
		if pinned := e.pinnedLocked(); pinned+ent.reserved+need > e.opts.MemoryBudget {
			return fmt.Errorf("%w: %s needs %d bytes; pinned models hold %d of the memory budget's %d", serve.ErrUnavailable, ent.key, ent.reserved+need, pinned, e.opts.MemoryBudget)
		}
		ent.waiting = true
		ch := e.changed
		e.mu.Unlock()
		<-ch
		e.mu.Lock()
	}
}

// lruLocked is the least recently used model that may be evicted: loaded,
// idle (no request waiting for it, queued or running) and not pinned.
func (e *Engine) lruLocked() *entry {
	var best *entry
	for _, ent := range e.models {
		if !ent.ready || ent.refs > 0 || ent.pinned {
			continue
		}
		if best == nil || ent.lastUsed.Before(best.lastUsed) {
			best = ent
		}
	}
	return best
}

func (e *Engine) pinnedLocked() int64 {
	var n int64
	for _, ent := range e.models {
		if ent.pinned {
			n += ent.reserved
		}
	}
	return n
}

// evictLocked unloads an idle model and returns its memory to the budget.
func (e *Engine) evictLocked(ent *entry) {
	e.unloadLocked(ent)
	delete(e.models, ent.key)
	e.metrics.evictions.WithLabelValues(ent.key.name).Inc()
	e.signalLocked()
}

// unloadLocked stops an idle model's dispatcher and closes it (under the
// lock, so its memory is free before the budget counts it free).
func (e *Engine) unloadLocked(ent *entry) error {
	ent.disp.stop()
	err := ent.model.Close()
	ent.ready = false
	e.used -= ent.reserved
	ent.reserved = 0
	e.metrics.memory.Set(float64(e.used))
	e.metrics.loaded.Dec()
	e.metrics.modelBytes.DeleteLabelValues(ent.key.name, ent.key.version)
	return err
}

// Swap makes name serve version once that version is loaded and warm; the
// version served until then keeps serving meanwhile, and is unloaded once
// its last request ends. If the new version fails to load, nothing changes
// and the error says why. The registry's alias moves call it.
func (e *Engine) Swap(ctx context.Context, name, version string) error {
	r, err := e.opts.Source.Resolve(ctx, name, version)
	if err != nil {
		return err
	}
	k := key{r.Name, r.Version}
	ent, err := e.acquire(ctx, k, r.Dir, time.Time{})
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	old, had := e.current[name]
	e.current[name] = r.Version
	ent.retired = false
	if had && old != r.Version {
		if prev := e.models[key{name, old}]; prev != nil {
			prev.retired = true
			if prev.pinned {
				prev.pinned = false
				ent.pinned = true
			}
			if prev.ready && prev.refs == 0 {
				e.evictLocked(prev)
			}
		}
	}
	e.releaseLocked(ent)
	return nil
}
