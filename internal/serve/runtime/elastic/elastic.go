// Package elastic runs the "virga.elastic.model/v1" format natively in Go:
// the model files of `virga algo`'s built-in learners (linear-learner,
// factorization-machines, kmeans, pca; package elastic and its algo/
// subpackages). Every prediction is made by the algorithm package's own
// code, the code its validation and its Predict use (linear.Loaded,
// fm.Loaded, kmeans.Model.Assign, pca.Model.Transform), so a served output
// is the trainer's. The signature is derived from the model file:
//
//	input   features       FP32  [-1, D]   dense rows of the D features the model was trained on
//	linear-learner, regressor:             score          FP32 [-1]
//	linear-learner, binary_classifier:     probability    FP32 [-1] (of label 1), label INT64 [-1]
//	linear-learner, multiclass_classifier: probabilities  FP32 [-1, K], label INT64 [-1]
//	factorization-machines, regressor:     score          FP32 [-1]
//	factorization-machines, binary:        probability    FP32 [-1] (of label 1), label INT64 [-1]
//	kmeans:                                cluster INT64 [-1] (the nearest centre), distance FP32 [-1] (Euclidean, to it)
//	pca:                                   projection     FP32 [-1, K]
//
// A sparse (libsvm) row "index:value ..." is the dense row whose column
// index-1 holds value and whose other columns are 0, which is how `virga
// algo` reads libsvm input: the runtime takes that dense row.
package elastic

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"

	velastic "github.com/virga-ml/virga/elastic"
	"github.com/virga-ml/virga/elastic/algo/fm"
	"github.com/virga-ml/virga/elastic/algo/kmeans"
	"github.com/virga-ml/virga/elastic/algo/linear"
	"github.com/virga-ml/virga/elastic/algo/pca"
	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/runtime"
)

// Format is the manifest format this package loads.
const Format = velastic.ModelFormat

// File is the model file's name in a model directory WriteDir writes.
const File = "model.json"

// Input is the name of the one input.
const Input = "features"

// DefaultMaxBatch is the most rows one call takes when the manifest sets no
// max_batch and its input's first dimension is variable.
const DefaultMaxBatch = 256

// Served is a model file decoded and ready to predict.
type Served struct {
	Algorithm string
	D         int // features per row
	sig       serve.Signature
	numbers   int // the model's numbers, for Memory
	// predict computes the outputs, in the signature's order, of rows
	// row-major rows of D features.
	predict func(x []float64, rows int) ([]serve.Tensor, error)
}

// Signature is the signature the model file implies.
func (s *Served) Signature() serve.Signature { return s.sig }

// Decode reads a model file, naming what is wrong with it.
func Decode(data []byte) (*Served, error) {
	sm, err := velastic.ReadModel(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	return FromSaved(sm)
}

// FromSaved prepares a saved model for serving.
func FromSaved(sm *velastic.SavedModel) (*Served, error) {
	if err := sm.Validate(); err != nil {
		return nil, err
	}
	s := &Served{Algorithm: sm.Algorithm}
	for _, t := range sm.Tensors {
		s.numbers += len(t.Data)
	}
	var outs []serve.TensorSpec
	switch sm.Algorithm {
	case linear.Algorithm:
		lm, err := linear.Load(sm)
		if err != nil {
			return nil, err
		}
		s.D = lm.D
		switch lm.Predictor {
		case linear.Regressor:
			outs = []serve.TensorSpec{vector("score")}
		case linear.Binary:
			outs = []serve.TensorSpec{vector("probability"), label()}
		default:
			outs = []serve.TensorSpec{{Name: "probabilities", Datatype: serve.FP32, Shape: []int64{-1, int64(lm.K)}}, label()}
		}
		s.predict = func(x []float64, rows int) ([]serve.Tensor, error) {
			pred, scores, err := lm.PredictScores(x)
			if err != nil {
				return nil, err
			}
			switch lm.Predictor {
			case linear.Regressor:
				return []serve.Tensor{fp32("score", scores, rows)}, nil
			case linear.Binary:
				return []serve.Tensor{fp32("probability", scores, rows), labels(pred)}, nil
			}
			return []serve.Tensor{fp32("probabilities", scores, rows, int64(lm.K)), labels(pred)}, nil
		}
	case fm.Algorithm:
		lm, err := fm.Load(sm)
		if err != nil {
			return nil, err
		}
		s.D = lm.D
		if lm.Predictor == fm.Regressor {
			outs = []serve.TensorSpec{vector("score")}
		} else {
			outs = []serve.TensorSpec{vector("probability"), label()}
		}
		s.predict = func(x []float64, rows int) ([]serve.Tensor, error) {
			pred, scores, err := lm.PredictScores(x)
			if err != nil {
				return nil, err
			}
			if lm.Predictor == fm.Regressor {
				return []serve.Tensor{fp32("score", scores, rows)}, nil
			}
			return []serve.Tensor{fp32("probability", scores, rows), labels(pred)}, nil
		}
	case kmeans.Algorithm:
		km, err := kmeans.FromSaved(sm)
		if err != nil {
			return nil, err
		}
		s.D = km.D
		outs = []serve.TensorSpec{{Name: "cluster", Datatype: serve.Int64, Shape: []int64{-1}}, vector("distance")}
		s.predict = func(x []float64, rows int) ([]serve.Tensor, error) {
			cluster, dist := make([]int64, rows), make([]float32, rows)
			for i := range rows {
				c, sq := km.Assign(x[i*km.D : (i+1)*km.D])
				cluster[i], dist[i] = int64(c), float32(math.Sqrt(sq))
			}
			return []serve.Tensor{
				{Name: "cluster", Datatype: serve.Int64, Shape: []int64{int64(rows)}, Data: cluster},
				{Name: "distance", Datatype: serve.FP32, Shape: []int64{int64(rows)}, Data: dist},
			}, nil
		}
	case pca.Algorithm:
		pm, err := pca.FromSaved(sm)
		if err != nil {
			return nil, err
		}
		s.D = pm.D
		outs = []serve.TensorSpec{{Name: "projection", Datatype: serve.FP32, Shape: []int64{-1, int64(pm.K)}}}
		s.predict = func(x []float64, rows int) ([]serve.Tensor, error) {
			return []serve.Tensor{fp32("projection", pm.Transform(x), rows, int64(pm.K))}, nil
		}
	default:
		return nil, fmt.Errorf("algorithm: %q, want %s, %s, %s or %s (the built-ins whose models predict)",
			sm.Algorithm, linear.Algorithm, fm.Algorithm, kmeans.Algorithm, pca.Algorithm)
	}
	s.sig = serve.Signature{
		Inputs:  []serve.TensorSpec{{Name: Input, Datatype: serve.FP32, Shape: []int64{-1, int64(s.D)}}},
		Outputs: outs,
	}
	return s, nil
}

func vector(name string) serve.TensorSpec {
	return serve.TensorSpec{Name: name, Datatype: serve.FP32, Shape: []int64{-1}}
}

func label() serve.TensorSpec {
	return serve.TensorSpec{Name: "label", Datatype: serve.Int64, Shape: []int64{-1}}
}

// fp32 is an FP32 tensor of rows rows (and the further dimensions dims).
func fp32(name string, v []float64, rows int, dims ...int64) serve.Tensor {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return serve.Tensor{Name: name, Datatype: serve.FP32, Shape: append([]int64{int64(rows)}, dims...), Data: out}
}

// labels is the INT64 tensor "label" of the algorithm's predictions (class
// indices, as float64).
func labels(pred []float64) serve.Tensor {
	out := make([]int64, len(pred))
	for i, p := range pred {
		out[i] = int64(p)
	}
	return serve.Tensor{Name: "label", Datatype: serve.Int64, Shape: []int64{int64(len(pred))}, Data: out}
}

// Manifest is the virga-model.json of a model directory whose model file
// is file: s's signature, batching up to DefaultMaxBatch rows.
func (s *Served) Manifest(file string) serve.Manifest {
	return serve.Manifest{Format: Format, File: file, Signature: s.sig, MaxBatch: DefaultMaxBatch}
}

// WriteDir writes sm into dir (created if need be) as a model directory:
// the model file File and its virga-model.json, each atomically (a
// temporary file renamed over it), the manifest last.
func WriteDir(dir string, sm *velastic.SavedModel) error {
	s, err := FromSaved(sm)
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(dir, File), err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := velastic.SaveModelFile(filepath.Join(dir, File), sm); err != nil {
		return err
	}
	data, err := json.MarshalIndent(s.Manifest(File), "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, serve.ManifestFile), append(data, '\n'))
}

func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".manifest-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// Loader loads virga.elastic.model/v1 models.
type Loader struct{}

var _ runtime.Loader = Loader{}

var _ runtime.Estimator = Loader{}

// Estimate implements runtime.Estimator: the Memory of the model Load
// would return.
func (l Loader) Estimate(dir string, m serve.Manifest) (int64, error) {
	model, err := l.Load(dir, m)
	if err != nil {
		return 0, err
	}
	return model.Memory(), nil
}

// Load reads dir's model file and checks the signature it implies against
// the manifest's.
func (Loader) Load(dir string, m serve.Manifest) (runtime.Model, error) {
	manifest := filepath.Join(dir, serve.ManifestFile)
	if m.Format != Format {
		return nil, fmt.Errorf("%s: format %q, want %q", manifest, m.Format, Format)
	}
	path := filepath.Join(dir, m.File)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := runtime.CheckSignature(path, m.Signature, s.sig); err != nil {
		return nil, err
	}
	batches := m.Signature.Inputs[0].Shape[0] == -1
	maxBatch := m.MaxBatch
	if maxBatch > 0 && !batches {
		return nil, fmt.Errorf("%s: max_batch %d but the input's first dimension is fixed (%v), want -1", manifest, maxBatch, m.Signature.Inputs[0].Shape)
	}
	if maxBatch == 0 && batches {
		maxBatch = DefaultMaxBatch
	}
	return &Model{s: s, sig: m.Signature, maxBatch: maxBatch}, nil
}

// Model is a loaded model of a built-in.
type Model struct {
	s        *Served
	sig      serve.Signature
	maxBatch int
}

var _ runtime.Model = (*Model)(nil)

// Signature implements runtime.Model.
func (m *Model) Signature() serve.Signature { return m.sig }

// MaxBatch implements runtime.Model.
func (m *Model) MaxBatch() int { return m.maxBatch }

// Memory implements runtime.Model: the model's numbers and a batch's
// inputs and outputs.
func (m *Model) Memory() int64 {
	width := int64(m.s.D)
	for _, o := range m.sig.Outputs {
		width += max(o.Shape[len(o.Shape)-1], 1)
	}
	return 8*int64(m.s.numbers) + int64(max(m.maxBatch, 1))*width*16 + 4096
}

// Close implements runtime.Model.
func (m *Model) Close() error { return nil }

// Run implements runtime.Model.
func (m *Model) Run(ctx context.Context, inputs []serve.Tensor) ([]serve.Tensor, error) {
	if len(inputs) != 1 {
		return nil, fmt.Errorf("%d inputs, want 1 (%s)", len(inputs), Input)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d := m.s.D
	x, ok := inputs[0].Data.([]float32)
	if !ok || len(inputs[0].Shape) != 2 || inputs[0].Shape[1] != int64(d) || len(x) != int(inputs[0].Shape[0])*d {
		return nil, fmt.Errorf("%s: want FP32 [rows,%d] data", Input, d)
	}
	rows := len(x) / d
	xs := make([]float64, len(x))
	for i, v := range x {
		xs[i] = float64(v)
	}
	return m.s.predict(xs, rows)
}
