package elastic_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	velastic "github.com/virga-ml/virga/elastic"
	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/runtime"
	elasticrt "github.com/virga-ml/virga/internal/serve/runtime/elastic"
)

// FuzzDecode: any bytes either fail to decode or make a model whose
// outputs, for a few rows, have the rows and datatypes its signature says.
func FuzzDecode(f *testing.F) {
	t := func(shape []int, data ...float64) velastic.SavedTensor {
		return velastic.SavedTensor{Shape: shape, Data: data}
	}
	seeds := []*velastic.SavedModel{
		smallLinear(),
		{Algorithm: "linear-learner", Meta: map[string]string{"predictor": "multiclass_classifier"}, Tensors: map[string]velastic.SavedTensor{
			"weights": t([]int{3, 2}, 1, 2, 3, 4, 5, 6), "bias": t([]int{3}, 0, 1, 2), "mean": t([]int{2}, 0, 0), "scale": t([]int{2}, 1, 2)}},
		{Algorithm: "factorization-machines", Meta: map[string]string{"predictor": "binary_classifier"}, Tensors: map[string]velastic.SavedTensor{
			"w0": t([]int{1}, 0.5), "w": t([]int{2}, 1, -1), "v": t([]int{2, 2}, 0.1, 0.2, 0.3, 0.4)}},
		{Algorithm: "factorization-machines", Meta: map[string]string{"predictor": "regressor"}, Tensors: map[string]velastic.SavedTensor{
			"w0": t([]int{1}, 0.5), "w": t([]int{1}, 2), "v": t([]int{1, 1}, 0.1)}},
		{Algorithm: "kmeans", Tensors: map[string]velastic.SavedTensor{"centers": t([]int{2, 2}, 0, 0, 1, 1)}},
		{Algorithm: "pca", Tensors: map[string]velastic.SavedTensor{"components": t([]int{1, 2}, 0.6, 0.8), "mean": t([]int{2}, 1, 1),
			"explained_variance": t([]int{1}, 2), "explained_variance_ratio": t([]int{1}, 0.9)}},
	}
	for _, sm := range seeds {
		sm.Format = velastic.ModelFormat
		data, err := json.Marshal(sm)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"format":"virga.elastic.model/v1","algorithm":"kmeans","tensors":{"centers":{"shape":[1,1],"data":[0]}}}`))
	f.Add([]byte(`{"format":"virga.elastic.model/v1","algorithm":"pca","tensors":{"components":{"shape":[1,0],"data":[]},"mean":{"shape":[0],"data":[]},"explained_variance":{"shape":[1],"data":[1]}}}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := elasticrt.Decode(data)
		if err != nil {
			return
		}
		sig := s.Signature()
		if s.D <= 0 || len(sig.Inputs) != 1 || sig.Inputs[0].Shape[1] != int64(s.D) {
			t.Fatalf("decoded a model of %d features with inputs %+v", s.D, sig.Inputs)
		}
		if s.D > 1<<16 {
			return // too wide to run quickly
		}
		dir := t.TempDir()
		if err := writeFile(dir, data); err != nil {
			t.Fatal(err)
		}
		m, err := elasticrt.Loader{}.Load(dir, s.Manifest(elasticrt.File))
		if err != nil {
			t.Fatalf("decoded but does not load: %v", err)
		}
		const rows = 3
		in := make([]float32, rows*s.D)
		for i := range in {
			in[i] = float32(i%7) - 3
		}
		outs, err := m.Run(context.Background(), []serve.Tensor{{Name: "features", Datatype: serve.FP32, Shape: []int64{rows, int64(s.D)}, Data: in}})
		if err != nil {
			t.Fatal(err)
		}
		if len(outs) != len(sig.Outputs) {
			t.Fatalf("%d outputs, signature %d", len(outs), len(sig.Outputs))
		}
		for i, o := range outs {
			spec := sig.Outputs[i]
			n := int64(1)
			for _, d := range o.Shape {
				n *= d
			}
			if o.Name != spec.Name || o.Datatype != spec.Datatype || len(o.Shape) != len(spec.Shape) || o.Shape[0] != rows || int64(runtime.Len(o)) != n {
				t.Fatalf("output %d: %s %s%v with %d elements; signature %+v", i, o.Name, o.Datatype, o.Shape, runtime.Len(o), spec)
			}
		}
	})
}

func writeFile(dir string, data []byte) error {
	return os.WriteFile(filepath.Join(dir, elasticrt.File), data, 0o644)
}
