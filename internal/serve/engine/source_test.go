package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virga-ml/virga/internal/serve"
)

func TestDirSourceVersions(t *testing.T) {
	root := t.TempDir()
	for _, v := range []string{"2", "10", "1"} {
		writeMLP(t, root, "m", v, 0, 1)
	}
	if err := os.MkdirAll(filepath.Join(root, "m", "99"), 0o755); err != nil { // no manifest: not a version
		t.Fatal(err)
	}
	writeMLP(t, root, "words", "beta", 0, 1)
	writeMLP(t, root, "words", "alpha", 0, 1)
	s := DirSource{Root: root}
	r, err := s.Resolve(context.Background(), "m", "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Version != "10" || strings.Join(r.Versions, ",") != "1,2,10" || r.Dir != filepath.Join(root, "m", "10") {
		t.Errorf("m resolves to %+v, want version 10 of 1,2,10", r)
	}
	if r, _ := s.Resolve(context.Background(), "words", ""); r.Version != "beta" {
		t.Errorf("words resolves to %q, want beta (names sort as strings)", r.Version)
	}
	names, err := s.Models(context.Background())
	if err != nil || strings.Join(names, ",") != "m,words" {
		t.Errorf("models %v, %v", names, err)
	}
	for _, tc := range []struct{ name, version, want string }{
		{"m", "99", "m has no version 99 (it has 1, 2, 10)"},
		{"nope", "", "no directory"},
		{"..", "", "not a model name"},
		{"m", "../m/1", "not a version"},
	} {
		if _, err := s.Resolve(context.Background(), tc.name, tc.version); !errors.Is(err, serve.ErrModelNotFound) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Resolve(%q, %q): %v, want ErrModelNotFound saying %q", tc.name, tc.version, err, tc.want)
		}
	}
}

func TestManifestErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`{"format":"onnx","file":"m.onnx","signature":{"inputs":[{"name":"x","datatype":"FP33","shape":[1]}],"outputs":[{"name":"y","datatype":"FP32","shape":[1]}]}}`,
			`signature.inputs[0].datatype: "FP33", want one of`},
		{`{"format":"onnx","file":"../m.onnx"}`, `file: "../m.onnx", want a path inside the model directory`},
		{`{"format":"onnx","file":"m.onnx","max_batch":4,"signature":{"inputs":[{"name":"x","datatype":"FP32","shape":[3]}],"outputs":[{"name":"y","datatype":"FP32","shape":[-1]}]}}`,
			"signature.inputs[0].shape: [3]: with max_batch 4 the first dimension is the batch's, want -1"},
		{"{\n\"format\": \"onnx\",\n\"file\": 3}", "line 3: file: number, want string"},
		{"{\n\"format\": \"onnx\",,\n}", "line 2: invalid character"},
		{`{"format":"onnx","file":"m","signature":{"inputs":[{"name":"x","datatype":"FP32","shape":[-2]}],"outputs":[{"name":"x","datatype":"FP32","shape":[1]}]}}`, "signature.inputs[0].shape[0]: -2"},
		{`{"file":"m"}`, "format: missing"},
		{`{"format":"onnx","file":"m","signatures":{}}`, `unknown field "signatures"`},
	} {
		if _, err := DecodeManifest([]byte(tc.json)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.json, err, tc.want)
		}
	}
}

func FuzzDecodeManifest(f *testing.F) {
	f.Add([]byte(`{"format":"virga.mlp/v1","file":"mlp.json","max_batch":8,"signature":{"inputs":[{"name":"pixels","datatype":"FP32","shape":[-1,64]}],"outputs":[{"name":"label","datatype":"INT64","shape":[-1]}]}}`))
	f.Add([]byte(`{"format":"onnx"`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeManifest(data)
		if err != nil {
			return
		}
		if m.Format == "" || m.File == "" || len(m.Signature.Inputs) == 0 || len(m.Signature.Outputs) == 0 || !filepath.IsLocal(m.File) {
			t.Fatalf("accepted an incomplete manifest %+v", m)
		}
	})
}
