//go:build cgo

package onnx

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/runtime"
)

// env guards the process's one ONNX Runtime environment.
var env struct {
	sync.Mutex
	library string
}

// initialize starts the ONNX Runtime environment on first use, from lib.
func initialize(lib string) error {
	env.Lock()
	defer env.Unlock()
	if ort.IsInitialized() {
		if lib != env.library {
			return fmt.Errorf("ONNX Runtime is already running from %s; one process uses one library (asked for %s)", env.library, lib)
		}
		return nil
	}
	ort.SetSharedLibraryPath(lib)
	if err := ort.InitializeEnvironment(ort.WithLogLevelError()); err != nil {
		return fmt.Errorf("starting ONNX Runtime from %s: %w", lib, err)
	}
	env.library = lib
	return nil
}

// Loader loads ONNX models into DynamicAdvancedSessions.
type Loader struct{ Settings Settings }

var _ runtime.Loader = (*Loader)(nil)

var _ runtime.Estimator = (*Loader)(nil)

// Estimate implements runtime.Estimator: twice the file and an 8 MiB arena.
func (l *Loader) Estimate(dir string, m serve.Manifest) (int64, error) {
	st, err := os.Stat(filepath.Join(dir, m.File))
	if err != nil {
		return 0, err
	}
	return memoryOf(st.Size()), nil
}

// memoryOf is a model's memory estimate from its file's size: the weights,
// once as read and once as ONNX Runtime's initializers, and its arena for a
// batch's intermediates.
func memoryOf(size int64) int64 { return 2*size + 8<<20 }

// Load opens dir's ONNX file, checks the inputs and outputs the file
// declares against the manifest's signature, and starts a session.
func (l *Loader) Load(dir string, m serve.Manifest) (runtime.Model, error) {
	lib := l.Settings.Library
	if lib == "" {
		var err error
		if lib, err = Library(); err != nil {
			return nil, err
		}
	}
	if err := initialize(lib); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, m.File)
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	ins, outs, err := ort.GetInputOutputInfo(path)
	if err != nil {
		return nil, fmt.Errorf("%s: not a model ONNX Runtime can read: %w", path, err)
	}
	file := serve.Signature{}
	for _, set := range []struct {
		infos []ort.InputOutputInfo
		specs *[]serve.TensorSpec
		kind  string
	}{{ins, &file.Inputs, "input"}, {outs, &file.Outputs, "output"}} {
		for _, info := range set.infos {
			spec, err := specOf(info)
			if err != nil {
				return nil, fmt.Errorf("%s: %s %q: %w", path, set.kind, info.Name, err)
			}
			*set.specs = append(*set.specs, spec)
		}
	}
	if err := runtime.CheckSignature(path, m.Signature, file); err != nil {
		return nil, err
	}
	maxBatch := m.MaxBatch
	batches := len(m.Signature.Inputs) > 0
	for _, in := range m.Signature.Inputs {
		if len(in.Shape) == 0 || in.Shape[0] != -1 {
			batches = false
		}
	}
	if maxBatch > 0 && !batches {
		return nil, fmt.Errorf("%s: max_batch %d but not every input's first dimension is variable (-1) in the signature", filepath.Join(dir, serve.ManifestFile), maxBatch)
	}
	if maxBatch == 0 && batches {
		maxBatch = DefaultMaxBatch
	}

	opts, err := ort.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("ONNX Runtime session options: %w", err)
	}
	defer opts.Destroy()
	threads := max(l.Settings.IntraOpThreads, 1)
	if err := opts.SetIntraOpNumThreads(threads); err != nil {
		return nil, fmt.Errorf("intra-op threads %d: %w", threads, err)
	}
	if err := opts.SetInterOpNumThreads(1); err != nil {
		return nil, fmt.Errorf("inter-op threads: %w", err)
	}
	var inNames, outNames []string
	for _, s := range m.Signature.Inputs {
		inNames = append(inNames, s.Name)
	}
	for _, s := range m.Signature.Outputs {
		outNames = append(outNames, s.Name)
	}
	sess, err := ort.NewDynamicAdvancedSession(path, inNames, outNames, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &Model{
		sess:     sess,
		sig:      m.Signature,
		maxBatch: maxBatch,
		memory:   memoryOf(st.Size()),
	}, nil
}

// specOf converts an input or output ONNX Runtime reads from a file.
func specOf(info ort.InputOutputInfo) (serve.TensorSpec, error) {
	if info.OrtValueType != ort.ONNXTypeTensor {
		return serve.TensorSpec{}, fmt.Errorf("is a %s; Virga serves tensors only", info.OrtValueType)
	}
	d, ok := datatypes[info.DataType]
	if !ok {
		return serve.TensorSpec{}, fmt.Errorf("element type %s is not served (want one of bool, uint8..uint64, int8..int64, float, double)", info.DataType)
	}
	shape := make([]int64, len(info.Dimensions))
	for i, s := range info.Dimensions {
		if s < 0 {
			s = -1 // a named (symbolic) dimension
		}
		shape[i] = s
	}
	return serve.TensorSpec{Name: info.Name, Datatype: d, Shape: shape}, nil
}

var datatypes = map[ort.TensorElementDataType]serve.Datatype{
	ort.TensorElementDataTypeBool:   serve.Bool,
	ort.TensorElementDataTypeUint8:  serve.Uint8,
	ort.TensorElementDataTypeUint16: serve.Uint16,
	ort.TensorElementDataTypeUint32: serve.Uint32,
	ort.TensorElementDataTypeUint64: serve.Uint64,
	ort.TensorElementDataTypeInt8:   serve.Int8,
	ort.TensorElementDataTypeInt16:  serve.Int16,
	ort.TensorElementDataTypeInt32:  serve.Int32,
	ort.TensorElementDataTypeInt64:  serve.Int64,
	ort.TensorElementDataTypeFloat:  serve.FP32,
	ort.TensorElementDataTypeDouble: serve.FP64,
}

// Model is an ONNX Runtime session.
type Model struct {
	// allocFailed is set once a run with outputs allocated from the
	// signature failed and its rerun with ONNX Runtime's did not.
	allocFailed atomic.Bool
	sess        *ort.DynamicAdvancedSession
	sig         serve.Signature
	maxBatch    int
	memory      int64
}

var _ runtime.Model = (*Model)(nil)

// Signature implements runtime.Model.
func (m *Model) Signature() serve.Signature { return m.sig }

// MaxBatch implements runtime.Model.
func (m *Model) MaxBatch() int { return m.maxBatch }

// Memory implements runtime.Model: twice the file and an 8 MiB arena.
func (m *Model) Memory() int64 { return m.memory }

// Close implements runtime.Model.
func (m *Model) Close() error { return m.sess.Destroy() }

// Run implements runtime.Model; ONNX Runtime's sessions take concurrent runs.
//
// Outputs whose shape the signature fixes past the batch dimension are
// allocated here, in Go memory, and ONNX Runtime writes them in place: no
// buffer of its own, no copies out of it. Others (a variable dimension past
// the first) ONNX Runtime allocates, and they are copied out.
func (m *Model) Run(ctx context.Context, inputs []serve.Tensor) ([]serve.Tensor, error) {
	if len(inputs) != len(m.sig.Inputs) {
		return nil, fmt.Errorf("%d inputs, want %d", len(inputs), len(m.sig.Inputs))
	}
	values := make([]ort.Value, 0, len(inputs))
	defer func() {
		for _, v := range values {
			v.Destroy()
		}
	}()
	for _, in := range inputs {
		v, err := toORT(in)
		if err != nil {
			return nil, fmt.Errorf("input %q: %w", in.Name, err)
		}
		values = append(values, v)
	}
	res := make([]serve.Tensor, len(m.sig.Outputs))
	outs := make([]ort.Value, len(m.sig.Outputs))
	defer func() {
		for _, v := range outs {
			if v != nil {
				v.Destroy()
			}
		}
	}()
	given := !m.allocFailed.Load() && m.allocate(inputs, res, outs)
	err := m.sess.Run(values, outs)
	if err != nil && given {
		// Perhaps the model's outputs are not the shapes the signature
		// says (a first dimension that is not the batch's): again with
		// outputs ONNX Runtime allocates, and so from now on if that works.
		for i, v := range outs {
			v.Destroy()
			outs[i] = nil
		}
		given = false
		if err = m.sess.Run(values, outs); err == nil {
			m.allocFailed.Store(true)
		}
	}
	if err != nil {
		return nil, err
	}
	if given {
		return res, nil
	}
	for i, v := range outs {
		t, err := fromORT(m.sig.Outputs[i].Name, v)
		if err != nil {
			return nil, fmt.Errorf("output %q: %w", m.sig.Outputs[i].Name, err)
		}
		res[i] = t
	}
	return res, nil
}

// allocate makes every output in Go memory (res) and as ONNX Runtime values
// over it (outs) when the signature fixes each output's shape but for a
// batch dimension (the inputs' rows); false, with nothing made, otherwise.
func (m *Model) allocate(inputs []serve.Tensor, res []serve.Tensor, outs []ort.Value) bool {
	rows := int64(-1)
	if m.maxBatch > 0 && len(inputs) > 0 && len(inputs[0].Shape) > 0 {
		rows = inputs[0].Shape[0]
	}
	for _, spec := range m.sig.Outputs {
		for d, s := range spec.Shape {
			if s < 0 && (d > 0 || rows < 0) {
				return false
			}
		}
	}
	for i, spec := range m.sig.Outputs {
		shape := append([]int64(nil), spec.Shape...)
		if len(shape) > 0 && shape[0] < 0 {
			shape[0] = rows
		}
		t, err := runtime.Zeros(spec.Name, spec.Datatype, shape)
		if err == nil {
			outs[i], err = toORT(t)
		}
		if err != nil {
			for j := range i {
				outs[j].Destroy()
				outs[j] = nil
			}
			return false
		}
		res[i] = t
	}
	return true
}

func toORT(t serve.Tensor) (ort.Value, error) {
	shape := ort.NewShape(t.Shape...)
	switch d := t.Data.(type) {
	case []bool:
		return ort.NewTensor(shape, d)
	case []uint8:
		return ort.NewTensor(shape, d)
	case []uint16:
		if t.Datatype == serve.FP16 {
			return nil, fmt.Errorf("FP16 is not served")
		}
		return ort.NewTensor(shape, d)
	case []uint32:
		return ort.NewTensor(shape, d)
	case []uint64:
		return ort.NewTensor(shape, d)
	case []int8:
		return ort.NewTensor(shape, d)
	case []int16:
		return ort.NewTensor(shape, d)
	case []int32:
		return ort.NewTensor(shape, d)
	case []int64:
		return ort.NewTensor(shape, d)
	case []float32:
		return ort.NewTensor(shape, d)
	case []float64:
		return ort.NewTensor(shape, d)
	}
	return nil, fmt.Errorf("data of Go type %T is not served", t.Data)
}

func fromORT(name string, v ort.Value) (serve.Tensor, error) {
	switch t := v.(type) {
	case *ort.Tensor[bool]:
		return tensor(name, serve.Bool, t), nil
	case *ort.Tensor[uint8]:
		return tensor(name, serve.Uint8, t), nil
	case *ort.Tensor[uint16]:
		return tensor(name, serve.Uint16, t), nil
	case *ort.Tensor[uint32]:
		return tensor(name, serve.Uint32, t), nil
	case *ort.Tensor[uint64]:
		return tensor(name, serve.Uint64, t), nil
	case *ort.Tensor[int8]:
		return tensor(name, serve.Int8, t), nil
	case *ort.Tensor[int16]:
		return tensor(name, serve.Int16, t), nil
	case *ort.Tensor[int32]:
		return tensor(name, serve.Int32, t), nil
	case *ort.Tensor[int64]:
		return tensor(name, serve.Int64, t), nil
	case *ort.Tensor[float32]:
		return tensor(name, serve.FP32, t), nil
	case *ort.Tensor[float64]:
		return tensor(name, serve.FP64, t), nil
	}
	return serve.Tensor{}, fmt.Errorf("ONNX Runtime gave a %T", v)
}

// tensor copies t out of ONNX Runtime's memory.
func tensor[T ort.TensorData](name string, d serve.Datatype, t *ort.Tensor[T]) serve.Tensor {
	return serve.Tensor{Name: name, Datatype: d, Shape: append([]int64(nil), t.GetShape()...), Data: append([]T(nil), t.GetData()...)}
}
