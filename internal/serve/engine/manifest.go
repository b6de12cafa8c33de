package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/virga-ml/virga/internal/serve"
)

var datatypes = map[serve.Datatype]bool{
	serve.Bool: true, serve.Uint8: true, serve.Uint16: true, serve.Uint32: true, serve.Uint64: true,
	serve.Int8: true, serve.Int16: true, serve.Int32: true, serve.Int64: true,
	serve.FP16: true, serve.FP32: true, serve.FP64: true, serve.Bytes: true,
}

// DecodeManifest parses a virga-model.json, naming the line or the field at
// fault and what would be right.
func DecodeManifest(data []byte) (serve.Manifest, error) {
	var m serve.Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syn):
			return m, fmt.Errorf("line %d: %v", lineOf(data, syn.Offset), err)
		case errors.As(err, &typ):
			return m, fmt.Errorf("line %d: %s: %s, want %s", lineOf(data, typ.Offset), typ.Field, typ.Value, typ.Type)
		}
		return m, err
	}
	if dec.More() {
		return m, fmt.Errorf("line %d: data after the manifest's JSON object", lineOf(data, dec.InputOffset()))
	}
	switch {
	case m.Format == "":
		return m, fmt.Errorf(`format: missing, want "onnx", "virga.mlp/v1" or "virga.elastic.model/v1"`)
	case m.File == "":
		return m, fmt.Errorf("file: missing, want the model file's name in the directory")
	case filepath.IsAbs(m.File) || !filepath.IsLocal(m.File):
		return m, fmt.Errorf("file: %q, want a path inside the model directory", m.File)
	case m.MaxBatch < 0:
		return m, fmt.Errorf("max_batch: %d, want 0 (the model does not batch) or more", m.MaxBatch)
	case len(m.Signature.Inputs) == 0:
		return m, fmt.Errorf("signature.inputs: none, want at least one")
	case len(m.Signature.Outputs) == 0:
		return m, fmt.Errorf("signature.outputs: none, want at least one")
	}
	for _, set := range []struct {
		kind  string
		specs []serve.TensorSpec
	}{{"inputs", m.Signature.Inputs}, {"outputs", m.Signature.Outputs}} {
		seen := map[string]bool{}
		for i, s := range set.specs {
			field := fmt.Sprintf("signature.%s[%d]", set.kind, i)
			switch {
			case s.Name == "":
				return m, fmt.Errorf("%s.name: missing", field)
			case seen[s.Name]:
				return m, fmt.Errorf("%s.name: %q named twice", field, s.Name)
			case !datatypes[s.Datatype]:
				return m, fmt.Errorf("%s.datatype: %q, want one of BOOL, UINT8..UINT64, INT8..INT64, FP16, FP32, FP64, BYTES", field, s.Datatype)
			}
			seen[s.Name] = true
			for j, d := range s.Shape {
				if d < -1 {
					return m, fmt.Errorf("%s.shape[%d]: %d, want a size or -1 (variable)", field, j, d)
				}
			}
			if m.MaxBatch > 0 && (len(s.Shape) == 0 || s.Shape[0] != -1) {
				return m, fmt.Errorf("%s.shape: %v: with max_batch %d the first dimension is the batch's, want -1", field, s.Shape, m.MaxBatch)
			}
		}
	}
	return m, nil
}

func lineOf(data []byte, offset int64) int {
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	return 1 + strings.Count(string(data[:offset]), "\n")
}
