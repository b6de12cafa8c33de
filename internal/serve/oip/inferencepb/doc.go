// Package inferencepb is the generated Go code of the Open Inference
// Protocol's gRPC service (inference.GRPCInferenceService), from the
// specification's own open_inference_grpc.proto. Regenerate it with
// `go generate` (needs protoc); never edit the generated files.
package inferencepb

//go:generate sh gen.sh
