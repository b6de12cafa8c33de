package elastic_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	velastic "github.com/virga-ml/virga/elastic"
	"github.com/virga-ml/virga/elastic/algo/linear"
	"github.com/virga-ml/virga/internal/serve"
	elasticrt "github.com/virga-ml/virga/internal/serve/runtime/elastic"
)

// smallLinear is a binary linear learner's model of 3 features, written by
// hand.
func smallLinear() *velastic.SavedModel {
	return &velastic.SavedModel{
		Format: velastic.ModelFormat, Algorithm: linear.Algorithm,
		Tensors: map[string]velastic.SavedTensor{
			"weights": {Shape: []int{1, 3}, Data: []float64{1, -2, 0.5}},
			"bias":    {Shape: []int{1}, Data: []float64{0.25}},
			"mean":    {Shape: []int{3}, Data: []float64{0, 1, 2}},
			"scale":   {Shape: []int{3}, Data: []float64{1, 1, 0.5}},
		},
		Meta: map[string]string{"predictor": string(linear.Binary)},
	}
}

// TestCorruptFilesFailWithTheReason: a model file that is not one, or one
// the manifest does not describe, fails to load with an error naming the
// file and what is wrong.
func TestCorruptFilesFailWithTheReason(t *testing.T) {
	for _, tc := range []struct {
		name     string
		raw      string                     // the file, if set
		change   func(*velastic.SavedModel) // else smallLinear changed
		manifest func(*serve.Manifest)      // the manifest changed
		want     string
	}{
		{name: "not JSON", raw: `{"format": "virga.elastic.model/v1", "tensors": {`, want: "reading model: unexpected EOF"},
		{name: "unknown field", raw: `{"format": "virga.elastic.model/v1", "algorithm": "pca", "tensor": {}}`, want: `unknown field "tensor"`},
		{name: "another format", change: func(m *velastic.SavedModel) { m.Format = "virga.mlp/v1" }, want: `model format "virga.mlp/v1"; want "virga.elastic.model/v1"`},
		{name: "short data", change: func(m *velastic.SavedModel) {
			m.Tensors["weights"] = velastic.SavedTensor{Shape: []int{1, 3}, Data: []float64{1, 2}}
		}, want: `model tensor "weights": shape [1 3] holds 3 numbers, data has 2`},
		{name: "shapes disagree", change: func(m *velastic.SavedModel) {
			m.Tensors["mean"] = velastic.SavedTensor{Shape: []int{2}, Data: []float64{0, 1}}
		}, want: "linear: shapes weights [1 3] bias [1] mean [2] scale [3] disagree"},
		{name: "unknown predictor", change: func(m *velastic.SavedModel) { m.Meta["predictor"] = "ranker" }, want: `linear: unknown predictor "ranker"`},
		{name: "a model that predicts nothing", change: func(m *velastic.SavedModel) { m.Algorithm = "median" },
			want: `algorithm: "median", want linear-learner, factorization-machines, kmeans or pca`},
		{name: "pca without components", change: func(m *velastic.SavedModel) {
			m.Algorithm = "pca"
			m.Tensors = map[string]velastic.SavedTensor{"components": {Shape: []int{0, 3}}, "mean": {Shape: []int{3}, Data: []float64{1, 2, 3}}}
		}, want: "pca: the model has no components tensor of shape [k, d] with k, d > 0"},
		{name: "the manifest's width", manifest: func(m *serve.Manifest) { m.Signature.Inputs[0].Shape = []int64{-1, 4} },
			want: `signature.inputs[0] ("features") has shape [-1 4] in the manifest but [-1 3] in the file`},
		{name: "the manifest's outputs", manifest: func(m *serve.Manifest) { m.Signature.Outputs[0].Name = "score" },
			want: `signature.outputs[0] is named "score" in the manifest but "probability" in the file`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			good, err := elasticrt.FromSaved(smallLinear())
			if err != nil {
				t.Fatal(err)
			}
			man := good.Manifest(elasticrt.File)
			if tc.manifest != nil {
				tc.manifest(&man)
			}
			data := []byte(tc.raw)
			if tc.raw == "" {
				sm := smallLinear()
				if tc.change != nil {
					tc.change(sm)
				}
				if data, err = json.Marshal(sm); err != nil {
					t.Fatal(err)
				}
			}
			path := filepath.Join(dir, elasticrt.File)
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = elasticrt.Loader{}.Load(dir, man)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Load: %v; want an error naming %s and saying %q", err, path, tc.want)
			}
		})
	}
}

// TestHandWrittenModel: a linear learner's model computes the logistic of
// the standardised row's dot product, and a manifest fixing the batch
// dimension makes a model that does not batch.
func TestHandWrittenModel(t *testing.T) {
	dir := t.TempDir()
	if err := elasticrt.WriteDir(dir, smallLinear()); err != nil {
		t.Fatal(err)
	}
	good, _ := elasticrt.FromSaved(smallLinear())
	man := good.Manifest(elasticrt.File)
	for _, s := range []*serve.TensorSpec{&man.Signature.Inputs[0], &man.Signature.Outputs[0], &man.Signature.Outputs[1]} {
		s.Shape[0] = 1
	}
	man.MaxBatch = 0
	m, err := elasticrt.Loader{}.Load(dir, man)
	if err != nil {
		t.Fatal(err)
	}
	if m.MaxBatch() != 0 {
		t.Errorf("MaxBatch %d for a manifest of one row a call; want 0", m.MaxBatch())
	}
	// z = 0.25 + 1·(1-0) - 2·(1-1) + 0.5·(4-2)·0.5 = 1.75
	out, err := m.Run(context.Background(), []serve.Tensor{{Name: "features", Datatype: serve.FP32, Shape: []int64{1, 3}, Data: []float32{1, 1, 4}}})
	if err != nil {
		t.Fatal(err)
	}
	if p := out[0].Data.([]float32)[0]; p < 0.8519 || p > 0.8520 { // 1/(1+e^-1.75) = 0.851953
		t.Errorf("probability %v, want 0.85195", p)
	}
	if l := out[1].Data.([]int64)[0]; l != 1 {
		t.Errorf("label %d, want 1", l)
	}
	man.MaxBatch = 8
	if _, err := (elasticrt.Loader{}).Load(dir, man); err == nil || !strings.Contains(err.Error(), "max_batch 8 but the input's first dimension is fixed") {
		t.Errorf("max_batch with a fixed first dimension: %v", err)
	}
}
