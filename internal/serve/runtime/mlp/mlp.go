// Package mlp runs the "virga.mlp/v1" model format natively in Go: the
// digits-go example's network (one ReLU hidden layer, softmax), in float64
// as the trainer computes it, so the served labels are the trainer's. It
// never reads anything but the model directory it is given.
package mlp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/runtime"
)

// Format is the manifest format this package loads.
const Format = "virga.mlp/v1"

// DefaultMaxBatch is the most rows one call takes when the manifest sets no
// max_batch.
const DefaultMaxBatch = 256

// File is a virga.mlp/v1 model file: params laid out as digits-go's
// mlp.MLP.Params (W1 [hidden x inputs] row-major, b1, W2 [classes x
// hidden], b2); a row x gives softmax(W2·relu(W1·(input_scale·x)+b1)+b2).
type File struct {
	Inputs     int       `json:"inputs"`
	Hidden     int       `json:"hidden"`
	Classes    int       `json:"classes"`
	InputScale float64   `json:"input_scale"`
	Params     []float64 `json:"params"`
}

// Signature is the signature of a model of f's sizes: input "pixels" FP32
// [-1,inputs]; outputs "probabilities" FP32 [-1,classes] and "label"
// INT64 [-1].
func (f *File) Signature() serve.Signature {
	return serve.Signature{
		Inputs: []serve.TensorSpec{{Name: "pixels", Datatype: serve.FP32, Shape: []int64{-1, int64(f.Inputs)}}},
		Outputs: []serve.TensorSpec{
			{Name: "probabilities", Datatype: serve.FP32, Shape: []int64{-1, int64(f.Classes)}},
			{Name: "label", Datatype: serve.Int64, Shape: []int64{-1}},
		},
	}
}

// Decode reads a model file, naming the field at fault in its errors.
func Decode(data []byte) (*File, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f File
	f.InputScale = 1
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("not a virga.mlp/v1 file: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("not a virga.mlp/v1 file: data after the JSON object")
	}
	switch {
	case f.Inputs <= 0:
		return nil, fmt.Errorf("inputs: %d, want a positive count", f.Inputs)
	case f.Hidden <= 0:
		return nil, fmt.Errorf("hidden: %d, want a positive count", f.Hidden)
	case f.Classes <= 0:
		return nil, fmt.Errorf("classes: %d, want a positive count", f.Classes)
	case f.Inputs > 1<<20 || f.Hidden > 1<<20 || f.Classes > 1<<20:
		return nil, fmt.Errorf("inputs %d, hidden %d, classes %d: want each at most %d", f.Inputs, f.Hidden, f.Classes, 1<<20)
	case math.IsNaN(f.InputScale) || math.IsInf(f.InputScale, 0) || f.InputScale == 0:
		return nil, fmt.Errorf("input_scale: %v, want a finite non-zero number (1 if the trainer does not scale)", f.InputScale)
	}
	want := f.Hidden*f.Inputs + f.Hidden + f.Classes*f.Hidden + f.Classes
	if len(f.Params) != want {
		return nil, fmt.Errorf("params: %d numbers, want %d for inputs %d, hidden %d, classes %d (W1, b1, W2, b2)",
			len(f.Params), want, f.Inputs, f.Hidden, f.Classes)
	}
	for i, p := range f.Params {
		if math.IsNaN(p) || math.IsInf(p, 0) {
			return nil, fmt.Errorf("params[%d]: %v, want a finite number", i, p)
		}
	}
	return &f, nil
}

// Loader loads virga.mlp/v1 models.
type Loader struct{}

var _ runtime.Loader = Loader{}

var _ runtime.Estimator = Loader{}

// Estimate implements runtime.Estimator: the Memory of the model Load
// would return, from the file's sizes alone (its params are skipped, not
// decoded: an engine that refuses a load asks this at every request).
func (Loader) Estimate(dir string, m serve.Manifest) (int64, error) {
	if m.Format != Format {
		return 0, fmt.Errorf("%s: format %q, want %q", filepath.Join(dir, serve.ManifestFile), m.Format, Format)
	}
	path := filepath.Join(dir, m.File)
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var sz struct {
		Inputs  int `json:"inputs"`
		Hidden  int `json:"hidden"`
		Classes int `json:"classes"`
	}
	if err := json.Unmarshal(data, &sz); err != nil {
		return 0, fmt.Errorf("%s: not a virga.mlp/v1 file: %w", path, err)
	}
	if sz.Inputs <= 0 || sz.Hidden <= 0 || sz.Classes <= 0 || sz.Inputs > 1<<20 || sz.Hidden > 1<<20 || sz.Classes > 1<<20 {
		// Load names the field at fault.
		_, err := Decode(data)
		if err == nil {
			err = fmt.Errorf("inputs %d, hidden %d, classes %d out of range", sz.Inputs, sz.Hidden, sz.Classes)
		}
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return memory(sz.Inputs, sz.Hidden, sz.Classes, maxBatch(m)), nil
}

func maxBatch(m serve.Manifest) int {
	if m.MaxBatch <= 0 {
		return DefaultMaxBatch
	}
	return m.MaxBatch
}

// memory is what a loaded model of these sizes holds: the parameters and a
// batch's scratch.
func memory(inputs, hidden, classes, maxBatch int) int64 {
	params := hidden*inputs + hidden + classes*hidden + classes
	return int64(8*params) + int64(maxBatch)*int64(8*(hidden+classes)+4*(inputs+classes)+8) + 4096
}

// Load reads dir's model file and checks its sizes against the manifest's
// signature.
func (Loader) Load(dir string, m serve.Manifest) (runtime.Model, error) {
	if m.Format != Format {
		return nil, fmt.Errorf("%s: format %q, want %q", filepath.Join(dir, serve.ManifestFile), m.Format, Format)
	}
	path := filepath.Join(dir, m.File)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sig := f.Signature()
	if err := runtime.CheckSignature(path, m.Signature, sig); err != nil {
		return nil, err
	}
	return &Model{f: f, sig: sig, maxBatch: maxBatch(m)}, nil
}

// Model is a loaded virga.mlp/v1 network.
type Model struct {
	f        *File
	sig      serve.Signature
	maxBatch int
}

var _ runtime.Model = (*Model)(nil)

// Signature implements runtime.Model.
func (m *Model) Signature() serve.Signature { return m.sig }

// MaxBatch implements runtime.Model.
func (m *Model) MaxBatch() int { return m.maxBatch }

// Memory implements runtime.Model: the parameters and a batch's scratch.
func (m *Model) Memory() int64 { return memory(m.f.Inputs, m.f.Hidden, m.f.Classes, m.maxBatch) }

// Close implements runtime.Model.
func (m *Model) Close() error { return nil }

// Run implements runtime.Model.
func (m *Model) Run(ctx context.Context, inputs []serve.Tensor) ([]serve.Tensor, error) {
	if len(inputs) != 1 {
		return nil, fmt.Errorf("%d inputs, want 1 (pixels)", len(inputs))
	}
	x, ok := inputs[0].Data.([]float32)
	f := m.f
	if !ok || len(inputs[0].Shape) != 2 || inputs[0].Shape[1] != int64(f.Inputs) || len(x) != int(inputs[0].Shape[0])*f.Inputs {
		return nil, fmt.Errorf("pixels: want FP32 [rows,%d] data", f.Inputs)
	}
	rows := len(x) / f.Inputs
	probs := make([]float32, rows*f.Classes)
	labels := make([]int64, rows)
	n1 := f.Hidden * f.Inputs
	w1, b1 := f.Params[:n1], f.Params[n1:n1+f.Hidden]
	w2 := f.Params[n1+f.Hidden : n1+f.Hidden+f.Classes*f.Hidden]
	b2 := f.Params[n1+f.Hidden+f.Classes*f.Hidden:]
	h := make([]float64, f.Hidden)
	z := make([]float64, f.Classes)
	xs := make([]float64, f.Inputs)
	for r := 0; r < rows; r++ {
		if r%64 == 63 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		for i, v := range x[r*f.Inputs : (r+1)*f.Inputs] {
			xs[i] = float64(v) * f.InputScale
		}
		// The trainer's order of operations, so that its argmax is ours.
		for j := range h {
			s := b1[j]
			row := w1[j*f.Inputs : (j+1)*f.Inputs]
			for i, xi := range xs {
				if xi != 0 {
					s += row[i] * xi
				}
			}
			h[j] = max(s, 0)
		}
		maxZ := math.Inf(-1)
		for k := range z {
			s := b2[k]
			row := w2[k*f.Hidden : (k+1)*f.Hidden]
			for j, hj := range h {
				s += row[j] * hj
			}
			z[k] = s
			maxZ = max(maxZ, s)
		}
		var sum float64
		for k, zk := range z {
			z[k] = math.Exp(zk - maxZ)
			sum += z[k]
		}
		best := 0
		for k := range z {
			z[k] /= sum
			probs[r*f.Classes+k] = float32(z[k])
			if z[k] > z[best] {
				best = k
			}
		}
		labels[r] = int64(best)
	}
	return []serve.Tensor{
		{Name: "probabilities", Datatype: serve.FP32, Shape: []int64{int64(rows), int64(f.Classes)}, Data: probs},
		{Name: "label", Datatype: serve.Int64, Shape: []int64{int64(rows)}, Data: labels},
	}, nil
}
