package elastic

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
)

// ModelFormat names the one file format every built-in algorithm saves its
// model in, and the serving side loads:
//
//	{
//	  "format": "virga.elastic.model/v1",
//	  "algorithm": "linear-learner",          // who made it
//	  "params": {"learning_rate": 0.1, ...},  // scalar settings it was made with
//	  "tensors": {                              // named dense tensors, row-major
//	    "weights": {"shape": [10, 64], "data": [...]},
//	    "bias":    {"shape": [10], "data": [...]}
//	  },
//	  "meta": {"classes": "0,1,...", ...}      // free-form strings
//	}
//
// Numbers are JSON numbers (finite only); the shape's product is the data's
// length.
const ModelFormat = "virga.elastic.model/v1"

// SavedModel is a model as saved.
type SavedModel struct {
	Format    string                 `json:"format"`
	Algorithm string                 `json:"algorithm"`
	Params    map[string]float64     `json:"params,omitempty"`
	Tensors   map[string]SavedTensor `json:"tensors"`
	Meta      map[string]string      `json:"meta,omitempty"`
}

// SavedTensor is one tensor with its shape.
type SavedTensor struct {
	Shape []int     `json:"shape"`
	Data  []float64 `json:"data"`
}

// Validate checks the format, that every shape matches its data, and that
// every number is finite.
func (m *SavedModel) Validate() error {
	if m.Format != ModelFormat {
		return fmt.Errorf("model format %q; want %q", m.Format, ModelFormat)
	}
	if m.Algorithm == "" {
		return fmt.Errorf("model: algorithm is empty")
	}
	names := make([]string, 0, len(m.Tensors))
	for k := range m.Tensors {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		t := m.Tensors[k]
		n := 1
		for _, d := range t.Shape {
			if d < 0 || (d > 0 && n > math.MaxInt32/d) {
				return fmt.Errorf("model tensor %q: bad shape %v", k, t.Shape)
			}
			n *= d
		}
		if n != len(t.Data) {
			return fmt.Errorf("model tensor %q: shape %v holds %d numbers, data has %d", k, t.Shape, n, len(t.Data))
		}
		for i, v := range t.Data {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("model tensor %q: element %d is %v", k, i, v)
			}
		}
	}
	return nil
}

// WriteModel writes m to w.
func WriteModel(w io.Writer, m *SavedModel) error {
	if m.Format == "" {
		m.Format = ModelFormat
	}
	if err := m.Validate(); err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(m)
}

// ReadModel reads and validates a model.
func ReadModel(r io.Reader) (*SavedModel, error) {
	var m SavedModel
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("reading model: %w", err)
	}
	// One JSON object and nothing after it: a file with two models
	// concatenated (a botched copy) must not load as the first one.
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("reading model: data after the model's JSON object (offset %d); a model file holds one object", dec.InputOffset())
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// SaveModelFile writes m to path atomically (a temporary file renamed over
// it).
func SaveModelFile(path string, m *SavedModel) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".model-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := WriteModel(f, m); err != nil {
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

// LoadModelFile reads a model file.
func LoadModelFile(path string) (*SavedModel, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, err := ReadModel(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}
