//go:build !cgo

package onnx

import (
	"fmt"

	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/runtime"
)

// Loader loads ONNX models; this build has no cgo, so it cannot.
type Loader struct{ Settings Settings }

var _ runtime.Loader = (*Loader)(nil)

// Load fails: ONNX Runtime needs cgo.
func (l *Loader) Load(dir string, m serve.Manifest) (runtime.Model, error) {
	return nil, fmt.Errorf("%s: format onnx needs ONNX Runtime, which this virga was built without (build with CGO_ENABLED=1)", dir)
}
