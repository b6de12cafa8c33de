// Package serve is Virga's inference engine: models loaded from a source
// (the registry, or a directory laid out as a model repository) through a
// runtime (ONNX Runtime, or native Go for Virga's own model formats), a cache
// of loaded models under a memory budget, and per-model queues whose batching
// policies decide what runs when. The protocol front ends (internal/serve/oip:
// Open Inference Protocol over REST and gRPC) speak to it through Service,
// in the types of this file.
package serve

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Datatype is a tensor element type, named as the Open Inference Protocol names it.
type Datatype string

// The datatypes of the Open Inference Protocol. In a Tensor, Data holds a
// slice of the Go type given beside each.
const (
	Bool   Datatype = "BOOL"   // []bool
	Uint8  Datatype = "UINT8"  // []uint8
	Uint16 Datatype = "UINT16" // []uint16
	Uint32 Datatype = "UINT32" // []uint32
	Uint64 Datatype = "UINT64" // []uint64
	Int8   Datatype = "INT8"   // []int8
	Int16  Datatype = "INT16"  // []int16
	Int32  Datatype = "INT32"  // []int32
	Int64  Datatype = "INT64"  // []int64
	FP16   Datatype = "FP16"   // []uint16, IEEE 754 half-precision bits
	FP32   Datatype = "FP32"   // []float32
	FP64   Datatype = "FP64"   // []float64
	Bytes  Datatype = "BYTES"  // [][]byte
)

// Tensor is a named, typed, shaped array; Data is flat, in row-major order,
// of the Go slice type its Datatype names.
type Tensor struct {
	Name     string
	Datatype Datatype
	Shape    []int64
	Data     any
}

// TensorSpec describes a model's input or output: a dimension of -1 is
// variable (the first, when the model batches, is the batch dimension).
type TensorSpec struct {
	Name     string   `json:"name"`
	Datatype Datatype `json:"datatype"`
	Shape    []int64  `json:"shape"`
}

// Signature is what a model takes and gives.
type Signature struct {
	Inputs  []TensorSpec `json:"inputs"`
	Outputs []TensorSpec `json:"outputs"`
}

// ManifestFile is the name of a model directory's manifest.
const ManifestFile = "virga-model.json"

// Manifest is a model directory's virga-model.json: which runtime reads
// which file, and the model's signature (a runtime that can read the
// signature from the file itself checks the two agree).
type Manifest struct {
	Format    string    `json:"format"` // "onnx", "virga.mlp/v1", "virga.elastic.model/v1"
	File      string    `json:"file"`   // relative to the directory
	Signature Signature `json:"signature"`
	// MaxBatch is the most rows the model takes in one call along its first
	// dimension; 0 means it does not batch (every input's first dimension is
	// fixed by the signature).
	MaxBatch int `json:"max_batch,omitempty"`
}

// Request is one inference request, whichever protocol it came by.
type Request struct {
	ID      string
	Model   string
	Version string // "" for the version the model's name serves now
	Inputs  []Tensor
	// Outputs names the outputs wanted; empty means all of them.
	Outputs []string
	// Priority: a lower level goes first (0 is the default and the highest).
	Priority int
	// Timeout bounds the request's time in the server; 0 means the model's
	// latency objective.
	Timeout time.Duration
	// Arrived is when the front end received the request.
	Arrived time.Time
}

// Response answers a Request.
type Response struct {
	ID           string
	ModelName    string
	ModelVersion string
	Outputs      []Tensor
}

// ServerMetadata is the Open Inference Protocol's server metadata.
type ServerMetadata struct {
	Name       string   `json:"name"`
	Version    string   `json:"version"`
	Extensions []string `json:"extensions"`
}

// ModelMetadata is the Open Inference Protocol's model metadata.
type ModelMetadata struct {
	Name     string       `json:"name"`
	Versions []string     `json:"versions,omitempty"`
	Platform string       `json:"platform"`
	Inputs   []TensorSpec `json:"inputs"`
	Outputs  []TensorSpec `json:"outputs"`
}

// ModelStatus is one entry of the model repository index.
type ModelStatus struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	State   string `json:"state"` // "READY", "LOADING", "UNAVAILABLE"
	Reason  string `json:"reason,omitempty"`
}

// Service is what the protocol front ends serve.
type Service interface {
	Live() bool
	Ready() bool
	Metadata() ServerMetadata
	ModelMetadata(ctx context.Context, name, version string) (*ModelMetadata, error)
	ModelReady(ctx context.Context, name, version string) (bool, error)
	// Infer answers r. It keeps no reference to r's input data once it
	// returns, canceled or not: the caller may reuse that memory.
	Infer(ctx context.Context, r *Request) (*Response, error)
	Index(ctx context.Context, readyOnly bool) ([]ModelStatus, error)
	Load(ctx context.Context, name string) error
	Unload(ctx context.Context, name string) error
}

// Errors a Service returns, each with the status its protocol gives it.
var (
	// ErrModelNotFound: no such model or version (HTTP 404, gRPC NotFound).
	ErrModelNotFound = errors.New("model not found")
	// ErrUnavailable: the model exists but cannot serve now, e.g. its load
	// failed (HTTP 503, gRPC Unavailable).
	ErrUnavailable = errors.New("model unavailable")
)

// InputError is a request the model cannot take (HTTP 400, gRPC
// InvalidArgument); Field names the part of the request at fault, such as
// `inputs[0].shape`.
type InputError struct {
	Field string
	Msg   string
}

func (e *InputError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// Inputf returns an InputError about field.
func Inputf(field, format string, args ...any) error {
	return &InputError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// RefusedError is a request refused rather than served late: it could not
// meet its deadline, or its queue was full (HTTP 429, gRPC
// ResourceExhausted). Reason is a stable CamelCase word
// ("DeadlineUnmeetable", "QueueFull", "LoadTooSlow"); Msg says it for people.
type RefusedError struct {
	Reason string
	Msg    string
}

func (e *RefusedError) Error() string { return e.Msg + " (" + e.Reason + ")" }
