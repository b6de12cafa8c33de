package mlp_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	digits "github.com/virga-ml/virga/examples/digits-go/mlp"
	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/runtime/mlp"
)

// writeModel trains the digits-go network for epochs and writes it as a
// virga.mlp/v1 model directory.
func writeModel(t *testing.T, ds *digits.Dataset, epochs int) (string, *digits.MLP) {
	t.Helper()
	s := digits.Settings{LR: 0.1, Hidden: 16, L2: 1e-4, Momentum: 0.9, Batch: 32, Seed: 3}
	net := digits.New(s)
	for e := 0; e < epochs; e++ {
		net.TrainEpoch(ds, s, e, nil)
	}
	dir := t.TempDir()
	f := mlp.File{Inputs: 64, Hidden: 16, Classes: 10, InputScale: 1.0 / 16, Params: net.Params}
	writeJSON(t, filepath.Join(dir, "mlp.json"), f)
	writeJSON(t, filepath.Join(dir, serve.ManifestFile), manifest())
	return dir, net
}

func manifest() serve.Manifest {
	return serve.Manifest{Format: mlp.Format, File: "mlp.json", Signature: (&mlp.File{Inputs: 64, Classes: 10}).Signature()}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The served label of every validation row is the trainer's own prediction
// (the trainer's Evaluate gives accuracy 1 on a row only for the label it predicts).
func TestPredictsAsTheTrainer(t *testing.T) {
	ds, err := digits.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	for _, epochs := range []int{1, 5} {
		dir, net := writeModel(t, ds, epochs)
		m, err := mlp.Loader{}.Load(dir, manifest())
		if err != nil {
			t.Fatal(err)
		}
		rows := len(ds.ValX)
		x := make([]float32, 0, rows*64)
		for _, r := range ds.ValX {
			for _, v := range r {
				x = append(x, float32(v*16)) // the raw pixel counts, as in the CSV
			}
		}
		out, err := m.Run(context.Background(), []serve.Tensor{{Name: "pixels", Datatype: serve.FP32, Shape: []int64{int64(rows), 64}, Data: x}})
		if err != nil {
			t.Fatal(err)
		}
		labels := out[1].Data.([]int64)
		probs := out[0].Data.([]float32)
		agree := 0
		for i, r := range ds.ValX {
			if _, acc := net.Evaluate([][]float64{r}, []int{int(labels[i])}); acc != 1 {
				t.Errorf("%d epochs: row %d: served label %d, the trainer predicts another", epochs, i, labels[i])
			} else {
				agree++
			}
			var sum float32
			for _, p := range probs[i*10 : (i+1)*10] {
				sum += p
			}
			if sum < 0.999 || sum > 1.001 {
				t.Errorf("row %d: probabilities sum to %v", i, sum)
			}
		}
		if agree != rows {
			t.Fatalf("%d epochs: %d of %d labels agree with the trainer", epochs, agree, rows)
		}
	}
}

func TestBadFilesNameTheField(t *testing.T) {
	good := mlp.File{Inputs: 64, Hidden: 2, Classes: 10, InputScale: 1, Params: make([]float64, 2*64+2+10*2+10)}
	for _, tc := range []struct {
		name   string
		change func(*mlp.File)
		raw    string
		want   string
	}{
		{name: "params count", change: func(f *mlp.File) { f.Params = f.Params[:5] }, want: "params: 5 numbers, want 160"},
		{name: "hidden", change: func(f *mlp.File) { f.Hidden = 0 }, want: "hidden: 0, want a positive count"},
		{name: "inputs differ from the manifest", change: func(f *mlp.File) {
			f.Inputs = 32
			f.Params = make([]float64, 2*32+2+10*2+10)
		}, want: `signature.inputs[0] ("pixels") has shape [-1 64] in the manifest but [-1 32] in the file`},
		{name: "not JSON", raw: "{\"inputs\": 64,", want: "not a virga.mlp/v1 file"},
		{name: "unknown field", raw: `{"inputs":64,"hiden":3}`, want: `unknown field "hiden"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "mlp.json")
			if tc.raw != "" {
				if err := os.WriteFile(path, []byte(tc.raw), 0o644); err != nil {
					t.Fatal(err)
				}
			} else {
				f := good
				f.Params = append([]float64(nil), good.Params...)
				tc.change(&f)
				writeJSON(t, path, f)
			}
			_, err := mlp.Loader{}.Load(dir, manifest())
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("got %v, want an error naming %s and containing %q", err, path, tc.want)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"inputs":2,"hidden":1,"classes":2,"input_scale":1,"params":[1,2,3,4,5,6,7]}`))
	f.Add([]byte(`{"inputs":64}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := mlp.Decode(data)
		if err != nil {
			return
		}
		if got := file.Hidden*file.Inputs + file.Hidden + file.Classes*file.Hidden + file.Classes; got != len(file.Params) {
			t.Fatalf("decoded %d params for sizes needing %d", len(file.Params), got)
		}
	})
}

// TestEstimateIsTheLoadedMemory: the estimate read from the file's sizes
// alone is the Memory of the model Load returns, for the default and a given
// max_batch, and a file Load refuses is refused by Estimate too.
func TestEstimateIsTheLoadedMemory(t *testing.T) {
	dir := t.TempDir()
	f := mlp.File{Inputs: 64, Hidden: 48, Classes: 10, InputScale: 1, Params: make([]float64, 48*64+48+10*48+10)}
	writeJSON(t, filepath.Join(dir, "mlp.json"), f)
	for _, maxBatch := range []int{0, 7, 1024} {
		m := manifest()
		m.MaxBatch = maxBatch
		est, err := mlp.Loader{}.Estimate(dir, m)
		if err != nil {
			t.Fatal(err)
		}
		model, err := mlp.Loader{}.Load(dir, m)
		if err != nil {
			t.Fatal(err)
		}
		if got := model.Memory(); est != got {
			t.Errorf("max_batch %d: Estimate %d, loaded model's Memory %d", maxBatch, est, got)
		}
	}
	f.Hidden = 0
	writeJSON(t, filepath.Join(dir, "mlp.json"), f)
	if _, err := (mlp.Loader{}).Estimate(dir, manifest()); err == nil || !strings.Contains(err.Error(), "hidden") {
		t.Errorf("Estimate of a file with hidden 0: %v; want an error naming hidden", err)
	}
}
