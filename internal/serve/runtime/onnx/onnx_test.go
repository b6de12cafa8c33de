//go:build cgo

package onnx_test

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"

	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/runtime"
	"github.com/virga-ml/virga/internal/serve/runtime/onnx"
)

// ExportTorch makes a model directory of a seeded PyTorch MLP exported to
// ONNX (testdata/export.py) and returns it with PyTorch's outputs for 9 rows.
func exportTorch(t *testing.T) (dir string, want map[string][]float64) {
	t.Helper()
	if _, err := onnx.Library(); err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	cmd := exec.Command("/usr/bin/python3", "testdata/export.py", dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("exporting the PyTorch model (needs /usr/bin/python3 with torch): %v\n%s", err, out)
	}
	data, err := os.ReadFile(filepath.Join(dir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	return dir, want
}

func readManifest(t *testing.T, dir string) serve.Manifest {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, serve.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	var m serve.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestMatchesPyTorch(t *testing.T) {
	dir, want := exportTorch(t)
	l := &onnx.Loader{}
	m, err := l.Load(dir, readManifest(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.MaxBatch() != 16 {
		t.Errorf("MaxBatch %d, want the manifest's 16", m.MaxBatch())
	}
	if m.Memory() <= 0 {
		t.Errorf("Memory %d, want a positive estimate", m.Memory())
	}
	// The 9 rows in batches of 1, 3 and 5: the batch dimension is dynamic.
	row := 0
	for _, rows := range []int{1, 3, 5} {
		x := make([]float32, rows*64)
		for i := range x {
			x[i] = float32(want["pixels"][row*64+i])
		}
		out, err := m.Run(context.Background(), []serve.Tensor{{Name: "pixels", Datatype: serve.FP32, Shape: []int64{int64(rows), 64}, Data: x}})
		if err != nil {
			t.Fatal(err)
		}
		if len(out) != 2 || out[0].Name != "probabilities" || out[1].Name != "label" {
			t.Fatalf("outputs %+v, want probabilities and label", out)
		}
		if got := out[0].Shape; len(got) != 2 || got[0] != int64(rows) || got[1] != 10 {
			t.Fatalf("probabilities shape %v, want [%d 10]", got, rows)
		}
		p := out[0].Data.([]float32)
		for i, v := range p {
			if w := want["probabilities"][row*10+i]; math.Abs(float64(v)-w) > 1e-5 {
				t.Errorf("batch of %d: probabilities[%d] = %v, PyTorch %v (more than 1e-5 apart)", rows, i, v, w)
			}
		}
		for i, v := range out[1].Data.([]int64) {
			if w := int64(want["label"][row+i]); v != w {
				t.Errorf("batch of %d: label[%d] = %d, PyTorch %d", rows, i, v, w)
			}
		}
		row += rows
	}
}

func TestCorruptFileFailsWithTheReason(t *testing.T) {
	dir, _ := exportTorch(t)
	path := filepath.Join(dir, "model.onnx")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data[:len(data)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = (&onnx.Loader{}).Load(dir, readManifest(t, dir))
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("loading a truncated file: %v, want an error naming %s", err, path)
	}
}

func TestSignatureCheckedAgainstTheFile(t *testing.T) {
	dir, _ := exportTorch(t)
	for _, tc := range []struct {
		name   string
		change func(*serve.Manifest)
		want   string
	}{
		{"input name", func(m *serve.Manifest) { m.Signature.Inputs[0].Name = "image" }, `signature.inputs[0] is named "image" in the manifest but "pixels" in the file`},
		{"datatype", func(m *serve.Manifest) { m.Signature.Outputs[1].Datatype = serve.Int32 }, `signature.outputs[1] ("label") is INT32 in the manifest but INT64 in the file`},
		{"shape", func(m *serve.Manifest) { m.Signature.Inputs[0].Shape = []int64{-1, 32} }, `signature.inputs[0] ("pixels") has shape [-1 32] in the manifest but [-1 64] in the file`},
		{"outputs", func(m *serve.Manifest) { m.Signature.Outputs = m.Signature.Outputs[:1] }, `the file has 2 outputs`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := readManifest(t, dir)
			tc.change(&m)
			_, err := (&onnx.Loader{}).Load(dir, m)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestLibraryMissingSaysHowToInstall(t *testing.T) {
	t.Setenv(onnx.EnvLibrary, "")
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	_, err := onnx.Library()
	if err == nil || !strings.Contains(err.Error(), "install it with scripts/onnxruntime.sh") {
		t.Fatalf("got %v, want an error saying to run scripts/onnxruntime.sh", err)
	}
	t.Setenv(onnx.EnvLibrary, "/nonexistent/libonnxruntime.so")
	if _, err := onnx.Library(); err == nil || !strings.Contains(err.Error(), "VIRGA_ONNXRUNTIME=/nonexistent/libonnxruntime.so") {
		t.Fatalf("got %v, want an error naming the setting", err)
	}
}

var _ runtime.Loader = (*onnx.Loader)(nil)

// Outputs are written by ONNX Runtime straight into the Go memory Run
// returns: the Go heap grows by the outputs' bytes once a call, not by a
// copy out of ONNX Runtime's buffers on top (twice, before).
func TestOutputsAreNotCopied(t *testing.T) {
	dir, _ := exportTorch(t)
	m, err := (&onnx.Loader{}).Load(dir, readManifest(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const rows = 4096
	in := []serve.Tensor{{Name: "pixels", Datatype: serve.FP32, Shape: []int64{rows, 64}, Data: make([]float32, rows*64)}}
	run := func() []serve.Tensor {
		out, err := m.Run(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	first := run()
	outBytes := rows*10*4 + rows*8
	var before, after goruntime.MemStats
	goruntime.ReadMemStats(&before)
	const calls = 20
	for range calls {
		run()
	}
	goruntime.ReadMemStats(&after)
	if per := int(after.TotalAlloc-before.TotalAlloc) / calls; per > outBytes*3/2 {
		t.Errorf("%d bytes allocated a call, the outputs are %d: they are copied", per, outBytes)
	}
	// Each call's outputs are its own: a later call did not write over them.
	for i, v := range first[0].Data.([]float32) {
		if v <= 0 || v >= 1 {
			t.Fatalf("probabilities[%d] = %v after later calls, want a probability", i, v)
		}
	}
}
