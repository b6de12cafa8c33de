// Package elastic is Virga's streaming computation model for training on data
// that streams past once, across workers that come and go: the model of
// Amazon SageMaker's built-in algorithms (Liberty et al., "Elastic Machine
// Learning Algorithms in Amazon SageMaker", SIGMOD 2020).
//
// An Algorithm is three functions over a shared parameter State:
// Initialize(state) once, Update(state, batch) for every mini-batch of the
// input, on whichever worker reads it, and Finalize(state) once at the end,
// which returns the model. The state is a key-value store of tensors shared
// by all workers, like a parameter server: Pull reads a tensor, Push adds a
// delta to it (pushes commute, so workers need not agree on an order), and
// Barrier waits for every current worker.
//
// This file holds the model and an in-process runtime (Local) whose workers
// are goroutines; the network runtime with a coordinator and worker
// processes builds on the same interfaces.
package elastic

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Tensor is a dense vector of float64; matrices are stored row-major.
type Tensor []float64

// State is the parameter state shared by all workers. Its methods are safe
// for concurrent use.
type State interface {
	// Pull returns a copy of the tensor at key, or nil if no push made it.
	Pull(ctx context.Context, key string) (Tensor, error)
	// Push adds delta to the tensor at key element by element; the first
	// push of a key creates it as delta. A delta of another length than the
	// tensor's is an error.
	Push(ctx context.Context, key string, delta Tensor) error
	// Barrier returns once every current worker has called it (the
	// membership may change while it waits: a worker that leaves no longer
	// counts).
	Barrier(ctx context.Context) error
}

// Batch is a mini-batch of rows: X holds Rows() rows of Cols features
// (row-major), Y one label per row when the input has labels.
type Batch struct {
	X    []float64
	Cols int
	Y    []float64
}

// Rows is the number of rows of the batch.
func (b *Batch) Rows() int {
	if b.Cols <= 0 {
		return 0
	}
	return len(b.X) / b.Cols
}

// Row returns row i's features.
func (b *Batch) Row(i int) []float64 { return b.X[i*b.Cols : (i+1)*b.Cols] }

// Model is what Finalize returns: named tensors (the format the serving
// side loads is built on it).
type Model map[string]Tensor

// Algorithm is a streaming algorithm in the initialize / update / finalize
// model. Update runs on many workers at once, each with its own batches.
type Algorithm interface {
	Initialize(ctx context.Context, s State) error
	Update(ctx context.Context, s State, b *Batch) error
	Finalize(ctx context.Context, s State) (Model, error)
}

// MemState is a State in memory, for workers in one process (Local) and as
// the coordinator's store.
type MemState struct {
	mu      sync.Mutex
	tensors map[string]Tensor
	pushes  int64

	// barrier
	members int
	waiting int
	gen     uint64
	release chan struct{}
}

// NewMemState returns an empty state with members workers.
func NewMemState(members int) *MemState {
	return &MemState{tensors: map[string]Tensor{}, members: members, release: make(chan struct{})}
}

// Pull implements State.
func (m *MemState) Pull(_ context.Context, key string) (Tensor, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tensors[key]
	if !ok {
		return nil, nil
	}
	return append(Tensor(nil), t...), nil
}

// Push implements State.
func (m *MemState) Push(_ context.Context, key string, delta Tensor) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tensors[key]
	switch {
	case !ok:
		m.tensors[key] = append(Tensor(nil), delta...)
	case len(t) != len(delta):
		return &ShapeError{Key: key, Delta: len(delta), Tensor: len(t)}
	default:
		for i, d := range delta {
			t[i] += d
		}
	}
	m.pushes++
	return nil
}

// Barrier implements State.
func (m *MemState) Barrier(ctx context.Context) error {
	m.mu.Lock()
	m.waiting++
	if m.waiting >= m.members {
		m.openLocked()
		m.mu.Unlock()
		return nil
	}
	gen, ch := m.gen, m.release
	m.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		m.mu.Lock()
		if m.gen == gen {
			m.waiting--
		}
		m.mu.Unlock()
		return ctx.Err()
	}
}

func (m *MemState) openLocked() {
	m.waiting = 0
	m.gen++
	close(m.release)
	m.release = make(chan struct{})
}

// Leave removes a worker from the membership (it was preempted, or it has
// no more input): a barrier waiting only for it opens.
func (m *MemState) Leave() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.members--
	if m.members > 0 && m.waiting >= m.members {
		m.openLocked()
	}
}

// Join adds a worker to the membership.
func (m *MemState) Join() {
	m.mu.Lock()
	m.members++
	m.mu.Unlock()
}

// Pushes is the number of pushes applied so far.
func (m *MemState) Pushes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pushes
}

// Snapshot returns a copy of every tensor (a checkpoint of the state).
func (m *MemState) Snapshot() map[string]Tensor {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]Tensor, len(m.tensors))
	for k, t := range m.tensors {
		out[k] = append(Tensor(nil), t...)
	}
	return out
}

// Source yields mini-batches; Next returns io.EOF at the end of the input.
// A Source is read by one worker at a time.
type Source interface {
	Next(ctx context.Context) (*Batch, error)
}

// Local runs alg over sources in this process, one goroutine per source
// (each a worker reading its own shard), on a fresh MemState: Initialize,
// every batch through Update, a barrier, then Finalize. A worker whose
// source ends leaves the membership.
func Local(ctx context.Context, alg Algorithm, sources []Source) (Model, *MemState, error) {
	if len(sources) == 0 {
		return nil, nil, errors.New("elastic: no input")
	}
	st := NewMemState(len(sources))
	if err := alg.Initialize(ctx, st); err != nil {
		return nil, st, fmt.Errorf("initialize: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(sources))
	var wg sync.WaitGroup
	for _, src := range sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer st.Leave()
			for {
				b, err := src.Next(ctx)
				if errors.Is(err, io.EOF) {
					return
				}
				if err == nil {
					err = alg.Update(ctx, st, b)
				}
				if err != nil {
					errs <- err
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, st, fmt.Errorf("update: %w", err)
	}
	m, err := alg.Finalize(ctx, st)
	if err != nil {
		return nil, st, fmt.Errorf("finalize: %w", err)
	}
	return m, st, nil
}
