package oip

import (
	"context"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/virga-ml/virga/internal/serve"
	pb "github.com/virga-ml/virga/internal/serve/oip/inferencepb"
)

// The full names of the repository methods Virga adds to the service.
const (
	methodRepositoryIndex  = "/inference.GRPCInferenceService/RepositoryIndex"
	methodRepositoryLoad   = "/inference.GRPCInferenceService/RepositoryModelLoad"
	methodRepositoryUnload = "/inference.GRPCInferenceService/RepositoryModelUnload"
)

// serviceDesc is the specification's inference.GRPCInferenceService with
// Triton's three model repository methods and three system shared memory
// methods added (same service name, same messages as Triton's
// grpc_service.proto), so that Triton's gRPC clients can load and unload
// models and register regions too.
func serviceDesc() *grpc.ServiceDesc {
	d := pb.GRPCInferenceService_ServiceDesc
	d.Methods = append(slices.Clone(d.Methods),
		grpc.MethodDesc{MethodName: "RepositoryIndex", Handler: unary(methodRepositoryIndex, (*GRPCService).RepositoryIndex)},
		grpc.MethodDesc{MethodName: "RepositoryModelLoad", Handler: unary(methodRepositoryLoad, (*GRPCService).RepositoryModelLoad)},
		grpc.MethodDesc{MethodName: "RepositoryModelUnload", Handler: unary(methodRepositoryUnload, (*GRPCService).RepositoryModelUnload)},
		grpc.MethodDesc{MethodName: "SystemSharedMemoryStatus", Handler: unary(methodShmStatus, (*GRPCService).SystemSharedMemoryStatus)},
		grpc.MethodDesc{MethodName: "SystemSharedMemoryRegister", Handler: unary(methodShmRegister, (*GRPCService).SystemSharedMemoryRegister)},
		grpc.MethodDesc{MethodName: "SystemSharedMemoryUnregister", Handler: unary(methodShmUnregister, (*GRPCService).SystemSharedMemoryUnregister)},
	)
	return &d
}

// unary makes a grpc method handler of a GRPCService method, as
// protoc-gen-go-grpc generates them.
func unary[Req any, PReq interface {
	*Req
}, Resp any](fullMethod string, m func(*GRPCService, context.Context, PReq) (Resp, error)) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := PReq(new(Req))
		if err := dec(in); err != nil {
			return nil, err
		}
		g := srv.(*GRPCService)
		if interceptor == nil {
			return m(g, ctx, in)
		}
		info := &grpc.UnaryServerInfo{Server: srv, FullMethod: fullMethod}
		return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) { return m(g, ctx, req.(PReq)) })
	}
}

// checkRepository refuses a repository other than Virga's one.
func checkRepository(name string) error {
	if name != "" {
		return status.Errorf(codes.InvalidArgument, "repository_name: %q: this server has one model repository (send no name)", name)
	}
	return nil
}

// RepositoryIndex implements Triton's RepositoryIndex.
func (g *GRPCService) RepositoryIndex(ctx context.Context, r *pb.RepositoryIndexRequest) (*pb.RepositoryIndexResponse, error) {
	if err := checkRepository(r.GetRepositoryName()); err != nil {
		return nil, err
	}
	idx, err := g.svc.Index(ctx, r.GetReady())
	if err != nil {
		return nil, grpcError(err)
	}
	out := &pb.RepositoryIndexResponse{Models: make([]*pb.RepositoryIndexResponse_ModelIndex, len(idx))}
	for i, m := range idx {
		out.Models[i] = &pb.RepositoryIndexResponse_ModelIndex{Name: m.Name, Version: m.Version, State: m.State, Reason: m.Reason}
	}
	return out, nil
}

// RepositoryModelLoad implements Triton's RepositoryModelLoad; it takes no
// parameters (Triton's "config" and "file:" overrides are refused).
func (g *GRPCService) RepositoryModelLoad(ctx context.Context, r *pb.RepositoryModelLoadRequest) (*pb.RepositoryModelLoadResponse, error) {
	if err := checkRepository(r.GetRepositoryName()); err != nil {
		return nil, err
	}
	if r.GetModelName() == "" {
		return nil, status.Error(codes.InvalidArgument, "model_name: missing: want the model's name")
	}
	for k := range r.GetParameters() {
		return nil, grpcError(serve.Inputf("parameters."+k, "not supported by this server: a model is loaded as its repository holds it (send no parameters)"))
	}
	if err := g.svc.Load(ctx, r.GetModelName()); err != nil {
		return nil, grpcError(err)
	}
	return &pb.RepositoryModelLoadResponse{}, nil
}

// RepositoryModelUnload implements Triton's RepositoryModelUnload; the
// parameter unload_dependents is accepted and has no effect (no model
// depends on another here).
func (g *GRPCService) RepositoryModelUnload(ctx context.Context, r *pb.RepositoryModelUnloadRequest) (*pb.RepositoryModelUnloadResponse, error) {
	if err := checkRepository(r.GetRepositoryName()); err != nil {
		return nil, err
	}
	if r.GetModelName() == "" {
		return nil, status.Error(codes.InvalidArgument, "model_name: missing: want the model's name")
	}
	for k := range r.GetParameters() {
		if k != "unload_dependents" {
			return nil, grpcError(serve.Inputf("parameters."+k, "unknown parameter (unload takes only unload_dependents)"))
		}
	}
	if err := g.svc.Unload(ctx, r.GetModelName()); err != nil {
		return nil, grpcError(err)
	}
	return &pb.RepositoryModelUnloadResponse{}, nil
}
