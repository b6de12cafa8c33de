package elastic_test

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	velastic "github.com/virga-ml/virga/elastic"
	"github.com/virga-ml/virga/elastic/algo/fm"
	"github.com/virga-ml/virga/elastic/algo/kmeans"
	"github.com/virga-ml/virga/elastic/algo/linear"
	"github.com/virga-ml/virga/elastic/algo/pca"
	"github.com/virga-ml/virga/elastic/input"
	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/engine"
	elasticrt "github.com/virga-ml/virga/internal/serve/runtime/elastic"
	"github.com/virga-ml/virga/internal/serve/runtime/onnx"
)

const digitsPath = "../../../../examples/data/digits.csv.gz"

// loadDigits returns the 1797 digits' 64 pixel counts and their labels.
func loadDigits(t testing.TB) (x, y []float64) {
	t.Helper()
	x, y, cols, err := input.ReadAll(digitsPath, input.Options{Label: input.LastColumn})
	if err != nil || cols != 64 || len(y) != 1797 {
		t.Fatalf("digits: %d rows of %d columns, %v; want 1797 of 64", len(y), cols, err)
	}
	return x, y
}

// train runs alg over x, y in one pass (one worker, batches of 32) and saves
// its model with save.
func train(t testing.TB, alg velastic.Algorithm, x, y []float64, save func(velastic.Model) (*velastic.SavedModel, error)) *velastic.SavedModel {
	t.Helper()
	m, _, err := velastic.Local(context.Background(), alg, velastic.Shards(x, y, 64, 1, 32))
	if err != nil {
		t.Fatal(err)
	}
	sm, err := save(m)
	if err != nil {
		t.Fatal(err)
	}
	return sm
}

// builtins are a model of every kind the runtime serves, trained on the
// digits.
func builtins(t testing.TB, x, y []float64) map[string]*velastic.SavedModel {
	t.Helper()
	binary := make([]float64, len(y)) // 1 for the digits 5 to 9
	for i, v := range y {
		if v >= 5 {
			binary[i] = 1
		}
	}
	out := map[string]*velastic.SavedModel{}
	for name, cfg := range map[string]linear.Config{
		"linear-regressor":  {Predictor: linear.Regressor, Features: 64},
		"linear-binary":     {Predictor: linear.Binary, Features: 64},
		"linear-multiclass": {Predictor: linear.Multiclass, Features: 64, Classes: 10},
	} {
		l, err := linear.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		labels := y
		if cfg.Predictor == linear.Binary {
			labels = binary
		}
		out[name] = train(t, l, x, labels, l.Save)
	}
	for name, cfg := range map[string]fm.Config{
		"fm-regressor": {Predictor: fm.Regressor, Features: 64, Factors: 4, LearningRate: 0.01, Seed: 1},
		"fm-binary":    {Predictor: fm.Binary, Features: 64, Factors: 4, LearningRate: 0.01, Seed: 1},
	} {
		f, err := fm.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		labels := y
		if cfg.Predictor == fm.Binary {
			labels = binary
		}
		out[name] = train(t, f, x, labels, f.Save)
	}
	out["kmeans"] = train(t, &kmeans.KMeans{K: 10, Seed: 2}, x, nil, func(m velastic.Model) (*velastic.SavedModel, error) {
		km, err := kmeans.FromModel(m, 10)
		if err != nil {
			return nil, err
		}
		return km.Saved(map[string]float64{"k": 10}), nil
	})
	out["pca"] = train(t, &pca.PCA{K: 5}, x, nil, func(m velastic.Model) (*velastic.SavedModel, error) {
		pm, err := pca.FromModel(m)
		if err != nil {
			return nil, err
		}
		return pm.Saved(map[string]float64{"k": 5}), nil
	})
	return out
}

// serveAll loads dir's model with the engine's runtime of its manifest's
// format and runs x through it in batches of at most its MaxBatch rows;
// it returns each output, concatenated, by name.
func serveAll(t *testing.T, dir string, x []float64) map[string]serve.Tensor {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, serve.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	man, err := engine.DecodeManifest(data)
	if err != nil {
		t.Fatalf("%s: %v", serve.ManifestFile, err)
	}
	loader, ok := engine.DefaultRuntimes(onnx.Settings{})[man.Format]
	if !ok {
		t.Fatalf("no runtime of format %q among the engine's default runtimes", man.Format)
	}
	m, err := loader.Load(dir, man)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.MaxBatch() != elasticrt.DefaultMaxBatch {
		t.Errorf("MaxBatch %d, want %d", m.MaxBatch(), elasticrt.DefaultMaxBatch)
	}
	rows := len(x) / 64
	parts := map[string][]serve.Tensor{}
	for lo := 0; lo < rows; lo += m.MaxBatch() {
		hi := min(lo+m.MaxBatch(), rows)
		in := make([]float32, 0, (hi-lo)*64)
		for _, v := range x[lo*64 : hi*64] {
			in = append(in, float32(v))
		}
		outs, err := m.Run(context.Background(), []serve.Tensor{{Name: "features", Datatype: serve.FP32, Shape: []int64{int64(hi - lo), 64}, Data: in}})
		if err != nil {
			t.Fatal(err)
		}
		sig := m.Signature()
		if len(outs) != len(sig.Outputs) {
			t.Fatalf("%d outputs, the signature %d", len(outs), len(sig.Outputs))
		}
		for i, o := range outs {
			if o.Name != sig.Outputs[i].Name || o.Datatype != sig.Outputs[i].Datatype || o.Shape[0] != int64(hi-lo) {
				t.Fatalf("output %d is %s %s%v; the signature says %+v for %d rows", i, o.Name, o.Datatype, o.Shape, sig.Outputs[i], hi-lo)
			}
			parts[o.Name] = append(parts[o.Name], o)
		}
	}
	all := map[string]serve.Tensor{}
	for name, ts := range parts {
		var cat serve.Tensor
		switch ts[0].Data.(type) {
		case []float32:
			var d []float32
			for _, t := range ts {
				d = append(d, t.Data.([]float32)...)
			}
			cat = serve.Tensor{Name: name, Datatype: ts[0].Datatype, Data: d}
		case []int64:
			var d []int64
			for _, t := range ts {
				d = append(d, t.Data.([]int64)...)
			}
			cat = serve.Tensor{Name: name, Datatype: ts[0].Datatype, Data: d}
		}
		all[name] = cat
	}
	return all
}

// TestServesAsTheAlgorithm: every built-in's model, trained on the digits
// and written as a model directory, serves for every digit exactly the
// outputs the algorithm's own prediction code gives (in float32), through
// the runtime the engine picks for its manifest's format.
func TestServesAsTheAlgorithm(t *testing.T) {
	x, y := loadDigits(t)
	rows := len(y)
	for name, sm := range builtins(t, x, y) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := elasticrt.WriteDir(dir, sm); err != nil {
				t.Fatal(err)
			}
			out := serveAll(t, dir, x)
			row := func(i int) []float64 { return x[i*64 : (i+1)*64] }
			switch sm.Algorithm {
			case linear.Algorithm, fm.Algorithm:
				var predict func([]float64) ([]float64, error)
				var scores func([]float64) []float64
				if sm.Algorithm == linear.Algorithm {
					lm, err := linear.Load(sm)
					if err != nil {
						t.Fatal(err)
					}
					predict, scores = lm.Predict, lm.Scores
				} else {
					lm, err := fm.Load(sm)
					if err != nil {
						t.Fatal(err)
					}
					predict, scores = lm.Predict, lm.Scores
				}
				pred, err := predict(x)
				if err != nil {
					t.Fatal(err)
				}
				scoreName := "score"
				switch sm.Meta["predictor"] {
				case string(linear.Binary):
					scoreName = "probability"
				case string(linear.Multiclass):
					scoreName = "probabilities"
				}
				got := out[scoreName].Data.([]float32)
				k := len(got) / rows
				for i := range rows {
					for c, want := range scores(row(i)) {
						if got[i*k+c] != float32(want) {
							t.Fatalf("row %d: %s[%d] served %v, the algorithm gives %v", i, scoreName, c, got[i*k+c], want)
						}
					}
				}
				if lab, ok := out["label"]; ok {
					labels, right := lab.Data.([]int64), 0
					for i := range rows {
						if labels[i] != int64(pred[i]) {
							t.Fatalf("row %d: label %d served, the algorithm predicts %v", i, labels[i], pred[i])
						}
						want := y[i]
						if scoreName == "probability" {
							want = map[bool]float64{true: 1, false: 0}[y[i] >= 5]
						}
						if float64(labels[i]) == want {
							right++
						}
					}
					if acc := float64(right) / float64(rows); acc < 0.85 {
						t.Errorf("served labels %.3f accurate on the training digits; want a trained model's (above 0.85)", acc)
					}
				} else if sm.Meta["predictor"] != "regressor" {
					t.Errorf("a %s without a label output", sm.Meta["predictor"])
				}
			case kmeans.Algorithm:
				km, err := kmeans.FromSaved(sm)
				if err != nil {
					t.Fatal(err)
				}
				cluster, dist := out["cluster"].Data.([]int64), out["distance"].Data.([]float32)
				seen := map[int64]bool{}
				for i := range rows {
					c, sq := km.Assign(row(i))
					if cluster[i] != int64(c) || dist[i] != float32(math.Sqrt(sq)) {
						t.Fatalf("row %d: cluster %d at %v served; the algorithm assigns %d at squared distance %v", i, cluster[i], dist[i], c, sq)
					}
					seen[cluster[i]] = true
				}
				if len(seen) < 5 {
					t.Errorf("the digits fall in %d clusters of 10", len(seen))
				}
			case pca.Algorithm:
				pm, err := pca.FromSaved(sm)
				if err != nil {
					t.Fatal(err)
				}
				want, got := pm.Transform(x), out["projection"].Data.([]float32)
				if len(got) != rows*5 {
					t.Fatalf("%d projection numbers, want %d", len(got), rows*5)
				}
				for i, w := range want {
					if got[i] != float32(w) {
						t.Fatalf("projection[%d] served %v, the algorithm gives %v", i, got[i], w)
					}
				}
			}
		})
	}
}

// TestSignatures: each model's signature is derived from its file.
func TestSignatures(t *testing.T) {
	x, y := loadDigits(t)
	want := map[string]string{
		"linear-regressor":  "features FP32[-1 64] -> score FP32[-1]",
		"linear-binary":     "features FP32[-1 64] -> probability FP32[-1], label INT64[-1]",
		"linear-multiclass": "features FP32[-1 64] -> probabilities FP32[-1 10], label INT64[-1]",
		"fm-regressor":      "features FP32[-1 64] -> score FP32[-1]",
		"fm-binary":         "features FP32[-1 64] -> probability FP32[-1], label INT64[-1]",
		"kmeans":            "features FP32[-1 64] -> cluster INT64[-1], distance FP32[-1]",
		"pca":               "features FP32[-1 64] -> projection FP32[-1 5]",
	}
	for name, sm := range builtins(t, x, y) {
		s, err := elasticrt.FromSaved(sm)
		if err != nil {
			t.Fatal(err)
		}
		if got := sigString(s.Signature()); got != want[name] {
			t.Errorf("%s: signature %s, want %s", name, got, want[name])
		}
	}
}

func sigString(s serve.Signature) string {
	str := func(specs []serve.TensorSpec) string {
		var parts []string
		for _, t := range specs {
			b, _ := json.Marshal(t.Shape)
			parts = append(parts, t.Name+" "+string(t.Datatype)+strings.ReplaceAll(string(b), ",", " "))
		}
		return strings.Join(parts, ", ")
	}
	return str(s.Inputs) + " -> " + str(s.Outputs)
}

// BenchmarkRun: one call of a batch of 256 digits through each kind of
// model (-benchtime 200x is enough for a steady figure).
func BenchmarkRun(b *testing.B) {
	x, y := loadDigits(b)
	in := make([]float32, 256*64)
	for i := range in {
		in[i] = float32(x[i])
	}
	models := builtins(b, x, y)
	for _, name := range []string{"linear-multiclass", "fm-binary", "kmeans", "pca"} {
		sm := models[name]
		dir := b.TempDir()
		if err := elasticrt.WriteDir(dir, sm); err != nil {
			b.Fatal(err)
		}
		s, _ := elasticrt.FromSaved(sm)
		m, err := elasticrt.Loader{}.Load(dir, s.Manifest(elasticrt.File))
		if err != nil {
			b.Fatal(err)
		}
		inputs := []serve.Tensor{{Name: "features", Datatype: serve.FP32, Shape: []int64{256, 64}, Data: in}}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := m.Run(context.Background(), inputs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
