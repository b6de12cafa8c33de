#!/bin/sh
# Regenerates the Go code of the Open Inference Protocol's gRPC service from
# open_inference_grpc.proto, a verbatim copy of
# kserve/open-inference-protocol specification/protocol/open_inference_grpc.proto
# (commit d49cc23f89d709d87b210ef9449e273ae243984e), and the messages of
# Triton's repository RPCs from repository.proto and of its system shared
# memory RPCs from shm.proto.
#
# Needs protoc (Debian: apt-get install protobuf-compiler). The plugins are
# built here: protoc-gen-go at the google.golang.org/protobuf version of
# go.mod, protoc-gen-go-grpc at the version pinned below.
set -eu
cd "$(dirname "$0")"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
GOBIN=$bin go install google.golang.org/protobuf/cmd/protoc-gen-go
GOBIN=$bin go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
pkg=github.com/virga-ml/virga/internal/serve/oip/inferencepb
PATH=$bin:$PATH protoc -I . \
	--go_out=. --go_opt=paths=source_relative --go_opt=Mopen_inference_grpc.proto=$pkg --go_opt=Mrepository.proto=$pkg --go_opt=Mshm.proto=$pkg \
	--go-grpc_out=. --go-grpc_opt=paths=source_relative --go-grpc_opt=Mopen_inference_grpc.proto=$pkg --go-grpc_opt=Mrepository.proto=$pkg --go-grpc_opt=Mshm.proto=$pkg \
	open_inference_grpc.proto repository.proto shm.proto
