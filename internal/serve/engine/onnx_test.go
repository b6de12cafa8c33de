//go:build cgo

package engine

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/runtime/onnx"
)

// The engine serves an ONNX model exported from PyTorch through ONNX
// Runtime, requests from many goroutines batched together, each answered
// with PyTorch's own outputs for its rows.
func TestServesONNXFromPyTorch(t *testing.T) {
	if _, err := onnx.Library(); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	dir := filepath.Join(root, "torch", "1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("/usr/bin/python3", "../runtime/onnx/testdata/export.py", dir).CombinedOutput(); err != nil {
		t.Fatalf("exporting the PyTorch model: %v\n%s", err, out)
	}
	var want map[string][]float64
	data, err := os.ReadFile(filepath.Join(dir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, Options{Source: DirSource{Root: root}, Instances: 2, Objective: time.Minute})
	var wg sync.WaitGroup
	for row := range 9 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := make([]float32, 64)
			for i := range x {
				x[i] = float32(want["pixels"][row*64+i])
			}
			resp, err := e.Infer(context.Background(), &serve.Request{Model: "torch", Inputs: []serve.Tensor{{Name: "pixels", Datatype: serve.FP32, Shape: []int64{1, 64}, Data: x}}})
			if err != nil {
				t.Error(err)
				return
			}
			for i, v := range resp.Outputs[0].Data.([]float32) {
				if w := want["probabilities"][row*10+i]; math.Abs(float64(v)-w) > 1e-5 {
					t.Errorf("row %d: probabilities[%d] = %v, PyTorch %v", row, i, v, w)
				}
			}
			if got := resp.Outputs[1].Data.([]int64)[0]; got != int64(want["label"][row]) {
				t.Errorf("row %d: label %d, PyTorch %v", row, got, want["label"][row])
			}
		}()
	}
	wg.Wait()
	md, err := e.ModelMetadata(context.Background(), "torch", "")
	if err != nil || md.Platform != "onnxruntime_onnx" {
		t.Errorf("metadata %+v, %v", md, err)
	}
}
