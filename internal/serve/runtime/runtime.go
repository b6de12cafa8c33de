// Package runtime is what Virga's inference engine asks of a model runtime:
// load a model directory described by its manifest, run batches, say how
// much memory it holds, close. Each runtime is a subpackage (onnx: ONNX
// Runtime; mlp: the native Go digits network); the engine picks one by the
// manifest's format. A runtime never queues, batches or caches: the engine
// does.
package runtime

import (
	"context"
	"fmt"

	"github.com/virga-ml/virga/internal/serve"
)

// Loader loads the models of one format.
type Loader interface {
	// Load reads the model of the directory dir described by m (already
	// read from dir's virga-model.json). The error names the file and what
	// is wrong with it.
	Load(dir string, m serve.Manifest) (Model, error)
}

// LoaderFunc is a Loader as a function.
type LoaderFunc func(dir string, m serve.Manifest) (Model, error)

// Load calls f.
func (f LoaderFunc) Load(dir string, m serve.Manifest) (Model, error) { return f(dir, m) }

// Estimator is a Loader that can tell the memory a model will hold before
// loading it (the engine reserves it in its budget first); without it the
// engine reserves twice the model file's size, then the model's Memory.
type Estimator interface {
	Estimate(dir string, m serve.Manifest) (int64, error)
}

// Model is one loaded model.
type Model interface {
	// Signature is the model's inputs and outputs, as checked at load.
	Signature() serve.Signature
	// MaxBatch is the most rows Run takes along the first dimension; 0
	// means the model does not batch (Run takes the signature's shapes).
	MaxBatch() int
	// Run computes the outputs, in the signature's order, of inputs given in
	// the signature's order whose shapes and datatypes the caller has
	// checked. Run may be called from several goroutines at once. Run keeps
	// no reference to its inputs' data once it returns, and its outputs
	// share no memory with them: the engine reuses a batch's input buffers.
	Run(ctx context.Context, inputs []serve.Tensor) ([]serve.Tensor, error)
	// Memory is the bytes the model holds while loaded (an estimate).
	Memory() int64
	// Close releases the model; no Run is under way or follows.
	Close() error
}

// ElementSize is the bytes of one element of d, 0 for BYTES.
func ElementSize(d serve.Datatype) int {
	switch d {
	case serve.Bool, serve.Uint8, serve.Int8:
		return 1
	case serve.Uint16, serve.Int16, serve.FP16:
		return 2
	case serve.Uint32, serve.Int32, serve.FP32:
		return 4
	case serve.Uint64, serve.Int64, serve.FP64:
		return 8
	}
	return 0
}

// Len is the number of elements of t's Data, or -1 if Data is not the Go
// slice type t's Datatype names.
func Len(t serve.Tensor) int {
	switch d := t.Data.(type) {
	case []bool:
		return check(t.Datatype == serve.Bool, len(d))
	case []uint8:
		return check(t.Datatype == serve.Uint8, len(d))
	case []uint16:
		return check(t.Datatype == serve.Uint16 || t.Datatype == serve.FP16, len(d))
	case []uint32:
		return check(t.Datatype == serve.Uint32, len(d))
	case []uint64:
		return check(t.Datatype == serve.Uint64, len(d))
	case []int8:
		return check(t.Datatype == serve.Int8, len(d))
	case []int16:
		return check(t.Datatype == serve.Int16, len(d))
	case []int32:
		return check(t.Datatype == serve.Int32, len(d))
	case []int64:
		return check(t.Datatype == serve.Int64, len(d))
	case []float32:
		return check(t.Datatype == serve.FP32, len(d))
	case []float64:
		return check(t.Datatype == serve.FP64, len(d))
	case [][]byte:
		return check(t.Datatype == serve.Bytes, len(d))
	}
	return -1
}

func check(ok bool, n int) int {
	if !ok {
		return -1
	}
	return n
}

// GoType names the Go slice type a Tensor of d holds.
func GoType(d serve.Datatype) string {
	switch d {
	case serve.Bool:
		return "[]bool"
	case serve.FP16:
		return "[]uint16"
	case serve.Bytes:
		return "[][]byte"
	case serve.FP32:
		return "[]float32"
	case serve.FP64:
		return "[]float64"
	}
	return "[]" + lower(string(d))
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// Zeros returns a tensor of shape filled with zeros.
func Zeros(name string, d serve.Datatype, shape []int64) (serve.Tensor, error) {
	n := 1
	for _, s := range shape {
		n *= int(s)
	}
	var data any
	switch d {
	case serve.Bool:
		data = make([]bool, n)
	case serve.Uint8:
		data = make([]uint8, n)
	case serve.Uint16, serve.FP16:
		data = make([]uint16, n)
	case serve.Uint32:
		data = make([]uint32, n)
	case serve.Uint64:
		data = make([]uint64, n)
	case serve.Int8:
		data = make([]int8, n)
	case serve.Int16:
		data = make([]int16, n)
	case serve.Int32:
		data = make([]int32, n)
	case serve.Int64:
		data = make([]int64, n)
	case serve.FP32:
		data = make([]float32, n)
	case serve.FP64:
		data = make([]float64, n)
	case serve.Bytes:
		bs := make([][]byte, n)
		for i := range bs {
			bs[i] = []byte{}
		}
		data = bs
	default:
		return serve.Tensor{}, fmt.Errorf("unknown datatype %q", d)
	}
	return serve.Tensor{Name: name, Datatype: d, Shape: append([]int64(nil), shape...), Data: data}, nil
}

// Concat joins tensors of one datatype and one shape past the first
// dimension along the first dimension.
func Concat(ts []serve.Tensor) (serve.Tensor, error) {
	return ConcatInto(nil, ts)
}

// ConcatInto is Concat writing into buf's memory when buf (a slice, such as
// a tensor's Data) is of the tensors' Go type and large enough: a caller
// that joins batches over and over reuses one buffer. A single tensor is
// returned as it is, without a copy. BYTES tensors always get a new slice.
func ConcatInto(buf any, ts []serve.Tensor) (serve.Tensor, error) {
	if len(ts) == 0 {
		return serve.Tensor{}, fmt.Errorf("concatenating no tensors")
	}
	if len(ts) == 1 {
		return ts[0], nil
	}
	first := ts[0]
	out := serve.Tensor{Name: first.Name, Datatype: first.Datatype, Shape: append([]int64(nil), first.Shape...)}
	if len(first.Shape) == 0 {
		return serve.Tensor{}, fmt.Errorf("tensor %q: a scalar has no first dimension to concatenate along", first.Name)
	}
	for _, t := range ts[1:] {
		if t.Datatype != first.Datatype || len(t.Shape) != len(first.Shape) {
			return serve.Tensor{}, fmt.Errorf("tensor %q: concatenating %s%v with %s%v", first.Name, first.Datatype, first.Shape, t.Datatype, t.Shape)
		}
		for i := 1; i < len(t.Shape); i++ {
			if t.Shape[i] != first.Shape[i] {
				return serve.Tensor{}, fmt.Errorf("tensor %q: concatenating shape %v with %v", first.Name, first.Shape, t.Shape)
			}
		}
		out.Shape[0] += t.Shape[0]
	}
	switch first.Data.(type) {
	case []bool:
		out.Data = concat[bool](buf, ts)
	case []uint8:
		out.Data = concat[uint8](buf, ts)
	case []uint16:
		out.Data = concat[uint16](buf, ts)
	case []uint32:
		out.Data = concat[uint32](buf, ts)
	case []uint64:
		out.Data = concat[uint64](buf, ts)
	case []int8:
		out.Data = concat[int8](buf, ts)
	case []int16:
		out.Data = concat[int16](buf, ts)
	case []int32:
		out.Data = concat[int32](buf, ts)
	case []int64:
		out.Data = concat[int64](buf, ts)
	case []float32:
		out.Data = concat[float32](buf, ts)
	case []float64:
		out.Data = concat[float64](buf, ts)
	case [][]byte:
		out.Data = concat[[]byte](nil, ts)
	default:
		return serve.Tensor{}, fmt.Errorf("tensor %q: data of Go type %T", first.Name, first.Data)
	}
	return out, nil
}

func concat[T any](buf any, ts []serve.Tensor) []T {
	n := 0
	for _, t := range ts {
		n += len(t.Data.([]T))
	}
	out, _ := buf.([]T)
	if cap(out) < n {
		out = make([]T, 0, n)
	}
	out = out[:0]
	for _, t := range ts {
		out = append(out, t.Data.([]T)...)
	}
	return out
}

// Split cuts t along its first dimension into parts of rows[i] rows each
// (their sum is t's first dimension). The parts share t's data.
func Split(t serve.Tensor, rows []int) ([]serve.Tensor, error) {
	if len(t.Shape) == 0 {
		return nil, fmt.Errorf("tensor %q: a scalar has no first dimension to split", t.Name)
	}
	total := 0
	for _, r := range rows {
		total += r
	}
	if int64(total) != t.Shape[0] {
		return nil, fmt.Errorf("tensor %q: splitting %d rows into parts of %v rows", t.Name, t.Shape[0], rows)
	}
	per := 1
	for _, s := range t.Shape[1:] {
		per *= int(s)
	}
	n := Len(t)
	if n != total*per {
		return nil, fmt.Errorf("tensor %q: shape %v but %d elements of %T", t.Name, t.Shape, n, t.Data)
	}
	out := make([]serve.Tensor, len(rows))
	at := 0
	for i, r := range rows {
		shape := append([]int64{int64(r)}, t.Shape[1:]...)
		out[i] = serve.Tensor{Name: t.Name, Datatype: t.Datatype, Shape: shape, Data: slice(t.Data, at*per, (at+r)*per)}
		at += r
	}
	return out, nil
}

func slice(data any, i, j int) any {
	switch d := data.(type) {
	case []bool:
		return d[i:j:j]
	case []uint8:
		return d[i:j:j]
	case []uint16:
		return d[i:j:j]
	case []uint32:
		return d[i:j:j]
	case []uint64:
		return d[i:j:j]
	case []int8:
		return d[i:j:j]
	case []int16:
		return d[i:j:j]
	case []int32:
		return d[i:j:j]
	case []int64:
		return d[i:j:j]
	case []float32:
		return d[i:j:j]
	case []float64:
		return d[i:j:j]
	case [][]byte:
		return d[i:j:j]
	}
	return nil
}

// CheckSignature checks a signature read from a model file (file) against
// the manifest's (want): the same names, datatypes and ranks in the same
// order, and every fixed dimension of the manifest fixed alike in the file
// (a file's variable dimension may be fixed in the manifest, not the
// reverse). where names the model file for the error.
func CheckSignature(where string, want, file serve.Signature) error {
	if err := checkSpecs(where, "inputs", want.Inputs, file.Inputs); err != nil {
		return err
	}
	return checkSpecs(where, "outputs", want.Outputs, file.Outputs)
}

func checkSpecs(where, kind string, want, got []serve.TensorSpec) error {
	if len(want) != len(got) {
		return fmt.Errorf("%s: the file has %d %s (%s), the manifest's signature %d (%s)", where, len(got), kind, names(got), len(want), names(want))
	}
	for i, w := range want {
		g := got[i]
		field := fmt.Sprintf("signature.%s[%d]", kind, i)
		if w.Name != g.Name {
			return fmt.Errorf("%s: %s is named %q in the manifest but %q in the file (the file's %s: %s)", where, field, w.Name, g.Name, kind, names(got))
		}
		if w.Datatype != g.Datatype {
			return fmt.Errorf("%s: %s (%q) is %s in the manifest but %s in the file", where, field, w.Name, w.Datatype, g.Datatype)
		}
		if len(w.Shape) != len(g.Shape) {
			return fmt.Errorf("%s: %s (%q) has shape %v in the manifest but %v in the file", where, field, w.Name, w.Shape, g.Shape)
		}
		for j := range w.Shape {
			if g.Shape[j] >= 0 && w.Shape[j] != g.Shape[j] {
				return fmt.Errorf("%s: %s (%q) has shape %v in the manifest but %v in the file (dimension %d)", where, field, w.Name, w.Shape, g.Shape, j)
			}
		}
	}
	return nil
}

func names(specs []serve.TensorSpec) string {
	s := ""
	for i, t := range specs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %s%v", t.Name, t.Datatype, t.Shape)
	}
	if s == "" {
		return "none"
	}
	return s
}
