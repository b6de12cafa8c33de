package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/batch"
	"github.com/virga-ml/virga/internal/serve/runtime"
	"github.com/virga-ml/virga/internal/serve/runtime/onnx"
)

// Live implements serve.Service: the engine runs until Close.
func (e *Engine) Live() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.closed
}

// Ready implements serve.Service: live, and every pinned model loaded.
func (e *Engine) Ready() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	for _, name := range e.opts.Pinned {
		ent := e.models[key{name, e.current[name]}]
		if ent == nil || !ent.ready {
			return false
		}
	}
	return true
}

// Metadata implements serve.Service.
func (e *Engine) Metadata() serve.ServerMetadata {
	return serve.ServerMetadata{Name: e.opts.Name, Version: e.opts.Version, Extensions: []string{"model_repository"}}
}

// ModelMetadata implements serve.Service. It reads the manifest of a model
// not loaded, without loading it.
func (e *Engine) ModelMetadata(ctx context.Context, name, version string) (*serve.ModelMetadata, error) {
	k, dir, err := e.resolve(ctx, name, version)
	if err != nil {
		return nil, err
	}
	r, err := e.opts.Source.Resolve(ctx, k.name, k.version)
	if err != nil {
		return nil, err
	}
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", serve.ErrUnavailable, err)
	}
	platform := m.Format
	if m.Format == onnx.Format {
		platform = "onnxruntime_onnx" // as Triton names it
	}
	return &serve.ModelMetadata{Name: name, Versions: r.Versions, Platform: platform, Inputs: m.Signature.Inputs, Outputs: m.Signature.Outputs}, nil
}

// ModelReady implements serve.Service: a model is ready when it is loaded,
// or not loaded but loadable on its first request (its last load did not
// fail).
func (e *Engine) ModelReady(ctx context.Context, name, version string) (bool, error) {
	k, _, err := e.resolve(ctx, name, version)
	if err != nil {
		return false, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if ent := e.models[k]; ent != nil && ent.ready {
		return true, nil
	}
	_, failed := e.failed[k]
	return !failed && !e.closed, nil
}

// Index implements serve.Service: each model of the source with the version
// its name serves, READY when loaded, LOADING, or UNAVAILABLE with the
// reason (its last load failed, or it is not loaded and loads on its first
// request); readyOnly lists the loaded ones only.
func (e *Engine) Index(ctx context.Context, readyOnly bool) ([]serve.ModelStatus, error) {
	names, err := e.opts.Source.Models(ctx)
	if err != nil {
		return nil, err
	}
	var out []serve.ModelStatus
	for _, name := range names {
		k, _, err := e.resolve(ctx, name, "")
		if err != nil {
			if readyOnly {
				continue
			}
			out = append(out, serve.ModelStatus{Name: name, State: "UNAVAILABLE", Reason: err.Error()})
			continue
		}
		st := serve.ModelStatus{Name: name, Version: k.version}
		e.mu.Lock()
		ent := e.models[k]
		switch {
		case ent != nil && ent.ready:
			st.State = "READY"
		case ent != nil:
			st.State = "LOADING"
		case e.failed[k] != "":
			st.State, st.Reason = "UNAVAILABLE", e.failed[k]
		default:
			st.State, st.Reason = "UNAVAILABLE", "not loaded: it loads on its first request"
		}
		e.mu.Unlock()
		if readyOnly && st.State != "READY" {
			continue
		}
		out = append(out, st)
	}
	return out, nil
}

// Load implements serve.Service: the source's current version of name is
// loaded and warmed up, then served (Swap).
func (e *Engine) Load(ctx context.Context, name string) error {
	r, err := e.opts.Source.Resolve(ctx, name, "")
	if err != nil {
		return err
	}
	return e.Swap(ctx, name, r.Version)
}

// Unload implements serve.Service: name's loaded versions are unloaded now
// if idle, else when their last request ends; a later request loads the
// source's current version again.
func (e *Engine) Unload(ctx context.Context, name string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	found := false
	for k, ent := range e.models {
		if k.name != name {
			continue
		}
		found = true
		ent.retired = true
		ent.pinned = false
		if ent.ready && ent.refs == 0 {
			e.evictLocked(ent)
		}
	}
	delete(e.current, name)
	if !found {
		if _, err := e.opts.Source.Resolve(ctx, name, ""); err != nil {
			return err
		}
	}
	return nil
}

// Infer implements serve.Service:
//  1. the request's deadline: its arrival plus its timeout, or the
//     objective;
//  2. the model version, loaded (waiting for its load within the deadline);
//  3. the inputs checked against its signature;
//  4. queued for its dispatcher, and answered.
func (e *Engine) Infer(ctx context.Context, r *serve.Request) (*serve.Response, error) {
	resp, err := e.infer(ctx, r)
	e.metrics.requests.WithLabelValues(r.Model, outcome(ctx, err)).Inc()
	return resp, err
}

func outcome(ctx context.Context, err error) string {
	var inErr *serve.InputError
	var refused *serve.RefusedError
	switch {
	case err == nil:
		return OutcomeOK
	case errors.As(err, &inErr):
		return OutcomeInvalid
	case errors.As(err, &refused):
		return OutcomeRefused
	case errors.Is(err, serve.ErrModelNotFound):
		return OutcomeNotFound
	case errors.Is(err, serve.ErrUnavailable):
		return OutcomeUnavailable
	case ctx.Err() != nil:
		return OutcomeCanceled
	}
	return OutcomeError
}

func (e *Engine) infer(ctx context.Context, r *serve.Request) (*serve.Response, error) {
	// 1. The deadline.
	arrived := r.Arrived
	if arrived.IsZero() {
		arrived = e.clock.Now()
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = e.opts.Objective
	}
	deadline := arrived.Add(timeout)

	// 2. The model. A request naming no version that waited while a swap
	// moved its name on goes to the new version (and the old, loaded again
	// for it, goes once idle).
	var ent *entry
	var k key
	for {
		var dir string
		var err error
		k, dir, err = e.resolve(ctx, r.Model, r.Version)
		if err != nil {
			return nil, err
		}
		ent, err = e.acquire(ctx, k, dir, deadline)
		if err != nil {
			return nil, err
		}
		if r.Version != "" || e.serves(k) {
			break
		}
		e.mu.Lock()
		ent.retired = true
		e.releaseLocked(ent)
		e.mu.Unlock()
	}

	// 3. The inputs.
	sig := ent.model.Signature()
	inputs, rows, err := checkInputs(r, sig, ent.model.MaxBatch())
	if err == nil {
		err = checkOutputs(r, sig)
	}
	if err != nil {
		e.release(ent)
		return nil, err
	}

	// 4. The queue.
	c := &call{
		ctx:    ctx,
		item:   batch.Item{Arrived: arrived, Deadline: deadline, Priority: r.Priority, Rows: rows},
		inputs: inputs,
		res:    make(chan result, 1),
	}
	res, ok := ent.disp.infer(c)
	if !ok {
		e.release(ent)
		return nil, fmt.Errorf("%w: model %s was unloaded", serve.ErrUnavailable, k)
	}
	if res.err != nil {
		return nil, res.err
	}
	resp := &serve.Response{ID: r.ID, ModelName: k.name, ModelVersion: k.version}
	for i, o := range res.outputs {
		o.Name = sig.Outputs[i].Name
		if len(r.Outputs) == 0 || slices.Contains(r.Outputs, o.Name) {
			resp.Outputs = append(resp.Outputs, o)
		}
	}
	return resp, nil
}

// checkInputs checks a request's inputs against the signature and returns
// them in the signature's order with the request's rows (1 for a model that
// does not batch).
func checkInputs(r *serve.Request, sig serve.Signature, maxBatch int) ([]serve.Tensor, int, error) {
	ordered := make([]serve.Tensor, len(sig.Inputs))
	given := make([]bool, len(sig.Inputs))
	rows, rowsFrom := -1, -1
	for i, t := range r.Inputs {
		// The field's name is formatted for an error only: a request's
		// checks allocate nothing but what they return.
		field := inputField(i)
		j := slices.IndexFunc(sig.Inputs, func(s serve.TensorSpec) bool { return s.Name == t.Name })
		if j < 0 {
			return nil, 0, serve.Inputf(field.String()+".name", "%q: the model has no such input (it takes %s)", t.Name, specNames(sig.Inputs))
		}
		if given[j] {
			return nil, 0, serve.Inputf(field.String()+".name", "%q given twice", t.Name)
		}
		given[j] = true
		spec := sig.Inputs[j]
		if t.Datatype != spec.Datatype {
			return nil, 0, serve.Inputf(field.String()+".datatype", "%s, want %s", t.Datatype, spec.Datatype)
		}
		if len(t.Shape) != len(spec.Shape) {
			return nil, 0, serve.Inputf(field.String()+".shape", "%v has %d dimensions, want %d (%v, -1 any size)", t.Shape, len(t.Shape), len(spec.Shape), spec.Shape)
		}
		n := int64(1)
		for d, s := range t.Shape {
			if s < 0 {
				return nil, 0, serve.Inputf(field.String()+".shape", "%v: dimension %d is negative", t.Shape, d)
			}
			if spec.Shape[d] >= 0 && s != spec.Shape[d] {
				return nil, 0, serve.Inputf(field.String()+".shape", "%v: dimension %d is %d, want %d (%v, -1 any size)", t.Shape, d, s, spec.Shape[d], spec.Shape)
			}
			n *= s
			if n > 1<<31 {
				return nil, 0, serve.Inputf(field.String()+".shape", "%v: more than 2^31 elements", t.Shape)
			}
		}
		got := runtime.Len(t)
		if got < 0 {
			return nil, 0, serve.Inputf(field.String()+".data", "Go type %T, want %s for %s", t.Data, runtime.GoType(t.Datatype), t.Datatype)
		}
		if int64(got) != n {
			return nil, 0, serve.Inputf(field.String()+".data", "%d elements, shape %v holds %d", got, t.Shape, n)
		}
		if maxBatch > 0 {
			r := int(t.Shape[0])
			switch {
			case r == 0:
				return nil, 0, serve.Inputf(field.String()+".shape", "%v: no rows", t.Shape)
			case r > maxBatch:
				return nil, 0, serve.Inputf(field.String()+".shape", "%v: %d rows, the model takes at most %d in one request", t.Shape, r, maxBatch)
			case rows >= 0 && r != rows:
				return nil, 0, serve.Inputf(field.String()+".shape", "%v: %d rows, but inputs[%d] has %d", t.Shape, r, rowsFrom, rows)
			}
			rows, rowsFrom = r, i
		}
		t.Shape = slices.Clone(t.Shape)
		ordered[j] = t
	}
	var missing []string
	for j, ok := range given {
		if !ok {
			missing = append(missing, sig.Inputs[j].Name)
		}
	}
	if len(missing) > 0 {
		return nil, 0, serve.Inputf("inputs", "missing %s (the model takes %s)", strings.Join(missing, ", "), specNames(sig.Inputs))
	}
	return ordered, max(rows, 1), nil
}

// inputField names a request's input i in an error.
type inputField int

func (i inputField) String() string { return fmt.Sprintf("inputs[%d]", int(i)) }

func checkOutputs(r *serve.Request, sig serve.Signature) error {
	for i, name := range r.Outputs {
		if !slices.ContainsFunc(sig.Outputs, func(s serve.TensorSpec) bool { return s.Name == name }) {
			return serve.Inputf(fmt.Sprintf("outputs[%d].name", i), "%q: the model has no such output (it gives %s)", name, specNames(sig.Outputs))
		}
	}
	return nil
}

func specNames(specs []serve.TensorSpec) string {
	var s []string
	for _, t := range specs {
		s = append(s, fmt.Sprintf("%s %s%v", t.Name, t.Datatype, t.Shape))
	}
	return strings.Join(s, ", ")
}

// serves says whether k is the version its name serves now.
func (e *Engine) serves(k key) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.current[k.name] == k.version
}
