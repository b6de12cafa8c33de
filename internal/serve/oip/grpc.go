package oip

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/virga-ml/virga/internal/serve"
	pb "github.com/virga-ml/virga/internal/serve/oip/inferencepb"
)

// GRPCService is inference.GRPCInferenceService over a serve.Service.
type GRPCService struct {
	pb.UnimplementedGRPCInferenceServiceServer
	svc  serve.Service
	opts Options
}

var _ pb.GRPCInferenceServiceServer = (*GRPCService)(nil)

// NewGRPCService returns the gRPC service of svc. NewGRPCServer registers
// it, with Triton's repository methods, the options' token check and
// message size limit; pb.RegisterGRPCInferenceServiceServer registers the
// specification's methods only.
func NewGRPCService(svc serve.Service, opts Options) *GRPCService {
	return &GRPCService{svc: svc, opts: opts.withDefaults()}
}

// NewGRPCServer returns a gRPC server serving svc as
// inference.GRPCInferenceService, the specification's six methods and
// Triton's RepositoryIndex, RepositoryModelLoad and RepositoryModelUnload:
// received messages are bounded by
// Options.MaxBody, and with Options.CheckToken set every call but
// ServerLive and ServerReady needs "authorization: Bearer <token>" metadata.
// extra options are appended (TLS credentials, keepalive).
func NewGRPCServer(svc serve.Service, opts Options, extra ...grpc.ServerOption) *grpc.Server {
	opts = opts.withDefaults()
	pool := &bufferPool{}
	so := []grpc.ServerOption{grpc.MaxRecvMsgSize(int(min(opts.MaxBody, 1<<31-1))), experimental.BufferPool(pool), grpc.ForceServerCodecV2(codec{pool})}
	if opts.CheckToken != nil {
		so = append(so, grpc.UnaryInterceptor(AuthInterceptor(opts.CheckToken)))
	}
	s := grpc.NewServer(append(so, extra...)...)
	s.RegisterService(serviceDesc(), NewGRPCService(svc, opts))
	return s
}

// AuthInterceptor refuses (Unauthenticated) a call whose "authorization"
// metadata is not "Bearer <token>" with a token check accepts; the health
// checks ServerLive and ServerReady pass without one.
func AuthInterceptor(check func(ctx context.Context, token string) error) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		switch info.FullMethod {
		case pb.GRPCInferenceService_ServerLive_FullMethodName, pb.GRPCInferenceService_ServerReady_FullMethodName:
			return handler(ctx, req)
		}
		var header string
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if v := md.Get("authorization"); len(v) > 0 {
				header = v[0]
			}
		}
		if err := checkBearer(ctx, check, header); err != nil {
			return nil, status.Error(codes.Unauthenticated, err.Error())
		}
		return handler(ctx, req)
	}
}

// grpcError maps a Service's error to a gRPC status; a refusal carries its
// reason as an errdetails.ErrorInfo too.
func grpcError(err error) error {
	var ie *serve.InputError
	var re *serve.RefusedError
	switch {
	case errors.As(err, &ie):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.As(err, &re):
		st := status.New(codes.ResourceExhausted, err.Error())
		if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: re.Reason, Domain: "virga"}); derr == nil {
			st = d
		}
		return st.Err()
	case errors.Is(err, serve.ErrModelNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, serve.ErrUnavailable):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// ServerLive implements the protocol's ServerLive.
func (g *GRPCService) ServerLive(ctx context.Context, _ *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	return &pb.ServerLiveResponse{Live: g.svc.Live()}, nil
}

// ServerReady implements the protocol's ServerReady.
func (g *GRPCService) ServerReady(ctx context.Context, _ *pb.ServerReadyRequest) (*pb.ServerReadyResponse, error) {
	return &pb.ServerReadyResponse{Ready: g.svc.Ready()}, nil
}

// ModelReady implements the protocol's ModelReady: NotFound for an unknown model.
func (g *GRPCService) ModelReady(ctx context.Context, r *pb.ModelReadyRequest) (*pb.ModelReadyResponse, error) {
	if r.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name: missing: want the model's name")
	}
	ok, err := g.svc.ModelReady(ctx, r.GetName(), r.GetVersion())
	if err != nil {
		return nil, grpcError(err)
	}
	return &pb.ModelReadyResponse{Ready: ok}, nil
}

// ServerMetadata implements the protocol's ServerMetadata.
func (g *GRPCService) ServerMetadata(ctx context.Context, _ *pb.ServerMetadataRequest) (*pb.ServerMetadataResponse, error) {
	md := g.svc.Metadata()
	ext := slices.Clone(md.Extensions)
	if !slices.Contains(ext, "system_shared_memory") { // this front end's, whatever the Service says
		ext = append(ext, "system_shared_memory")
	}
	return &pb.ServerMetadataResponse{Name: md.Name, Version: md.Version, Extensions: ext}, nil
}

// ModelMetadata implements the protocol's ModelMetadata.
func (g *GRPCService) ModelMetadata(ctx context.Context, r *pb.ModelMetadataRequest) (*pb.ModelMetadataResponse, error) {
	if r.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name: missing: want the model's name")
	}
	md, err := g.svc.ModelMetadata(ctx, r.GetName(), r.GetVersion())
	if err != nil {
		return nil, grpcError(err)
	}
	out := &pb.ModelMetadataResponse{Name: md.Name, Versions: md.Versions, Platform: md.Platform}
	for _, t := range md.Inputs {
		out.Inputs = append(out.Inputs, &pb.ModelMetadataResponse_TensorMetadata{Name: t.Name, Datatype: string(t.Datatype), Shape: t.Shape})
	}
	for _, t := range md.Outputs {
		out.Outputs = append(out.Outputs, &pb.ModelMetadataResponse_TensorMetadata{Name: t.Name, Datatype: string(t.Datatype), Shape: t.Shape})
	}
	return out, nil
}

// ModelInfer implements the protocol's ModelInfer. Outputs are answered in
// raw_output_contents when the request sent raw_input_contents or an output
// is FP16 (which has no typed field), else in each output's contents.
func (g *GRPCService) ModelInfer(ctx context.Context, in *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	arrived := g.opts.Now()
	// The buffers of inputs read from shared memory are not given back:
	// the response, which gRPC marshals after this returns, may share an
	// input's memory (a model answering an input as an output).
	req, shmOut, _, err := decodeGRPCInfer(in, g.opts.SharedMemory)
	if err != nil {
		return nil, grpcError(err)
	}
	req.Arrived = arrived
	resp, err := g.svc.Infer(ctx, req)
	if err != nil {
		return nil, grpcError(err)
	}
	if err := finishResponse(req, resp); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := writeSharedOutputs(g.opts.SharedMemory, resp, shmOut, req.Outputs); err != nil {
		return nil, grpcError(err)
	}
	raw := len(in.GetRawInputContents()) > 0
	for _, t := range resp.Outputs {
		raw = raw || t.Datatype == serve.FP16
	}
	out := &pb.ModelInferResponse{ModelName: resp.ModelName, ModelVersion: resp.ModelVersion, Id: resp.ID,
		Outputs: make([]*pb.ModelInferResponse_InferOutputTensor, len(resp.Outputs))}
	if raw {
		out.RawOutputContents = make([][]byte, len(resp.Outputs))
	}
	for i, t := range resp.Outputs {
		o := &pb.ModelInferResponse_InferOutputTensor{Name: t.Name, Datatype: string(t.Datatype), Shape: t.Shape}
		if ref, ok := shmOut[t.Name]; ok {
			// In its region: no contents (an empty raw entry keeps the
			// others at their outputs' positions).
			o.Parameters = map[string]*pb.InferParameter{
				"shared_memory_region":    {ParameterChoice: &pb.InferParameter_StringParam{StringParam: ref.region}},
				"shared_memory_byte_size": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: int64(rawSize(t.Datatype, t.Data))}},
			}
			if ref.offset != 0 {
				o.Parameters["shared_memory_offset"] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: int64(ref.offset)}}
			}
			if raw {
				out.RawOutputContents[i] = []byte{}
			}
		} else if raw {
			out.RawOutputContents[i] = encodeRaw(t.Datatype, t.Data)
		} else {
			o.Contents = encodeContents(t.Datatype, t.Data)
		}
		out.Outputs[i] = o
	}
	return out, nil
}

// decodeGRPCInfer turns a ModelInferRequest into a serve.Request, and
// says which outputs go to which region of shm; bufs hold the inputs read
// from shared memory (give them back with putShmBufs once Infer has
// returned). Every error is a *serve.InputError naming the field.
//
// An input in shared memory has no contents and no raw_input_contents
// entry: raw_input_contents has one entry for each other input, in order.
func decodeGRPCInfer(in *pb.ModelInferRequest, shm *SharedMemory) (_ *serve.Request, _ map[string]shmRef, bufs []*[]byte, _ error) {
	if in.GetModelName() == "" {
		return nil, nil, nil, serve.Inputf("model_name", "missing: want the model's name")
	}
	r := &serve.Request{ID: in.GetId(), Model: in.GetModelName(), Version: in.GetModelVersion()}
	if err := applyParams(r, "parameters", grpcParams(in.GetParameters())); err != nil {
		return nil, nil, nil, err
	}
	raw := in.GetRawInputContents()
	nraw := 0 // raw entries used
	r.Inputs = make([]serve.Tensor, len(in.GetInputs()))
	seen := make(map[string]int, len(in.GetInputs()))
	for i, x := range in.GetInputs() {
		f := "inputs[" + strconv.Itoa(i) + "]"
		dt := serve.Datatype(x.GetDatatype())
		if err := checkInputHeader(f, x.GetName(), dt, true, seen, i); err != nil {
			return nil, nil, nil, err
		}
		tp := grpcParams(x.GetParameters())
		if err := checkTensorParams(f+".parameters", tp); err != nil {
			return nil, nil, nil, err
		}
		if _, ok := tp["binary_data_size"]; ok {
			return nil, nil, nil, serve.Inputf(f+".parameters.binary_data_size", "the binary tensor extension is HTTP's: over gRPC send the data in raw_input_contents")
		}
		n, err := elements(f+".shape", x.GetShape(), 1<<40)
		if err != nil {
			return nil, nil, nil, err
		}
		ref, inShm, err := sharedMemoryRef(f+".parameters", tp)
		if err != nil {
			return nil, nil, nil, err
		}
		var data any
		if inShm {
			if x.GetContents() != nil {
				return nil, nil, nil, serve.Inputf(f+".contents", "given with shared_memory_region (send the tensor's data one way)")
			}
			var buf *[]byte
			if data, buf, err = shm.read(f, ref, dt, x.GetShape(), n); err == nil {
				bufs = append(bufs, buf)
			}
		} else if len(raw) > 0 {
			if x.GetContents() != nil {
				return nil, nil, nil, serve.Inputf(f+".contents", "given with raw_input_contents (send every input's data one way: all raw, or all in contents)")
			}
			if nraw == len(raw) {
				return nil, nil, nil, serve.Inputf("raw_input_contents", "%d entries for more inputs (want one per input not in shared memory, in the order of inputs)", len(raw))
			}
			data, err = decodeRaw("raw_input_contents["+strconv.Itoa(nraw)+"]", dt, x.GetShape(), n, raw[nraw])
			nraw++
		} else {
			data, err = decodeContents(f+".contents", dt, x.GetShape(), n, x.GetContents())
		}
		if err != nil {
			return nil, nil, nil, err
		}
		r.Inputs[i] = serve.Tensor{Name: x.GetName(), Datatype: dt, Shape: x.GetShape(), Data: data}
	}
	if nraw != len(raw) {
		return nil, nil, nil, serve.Inputf("raw_input_contents", "%d entries for %d inputs not in shared memory (want one per such input, in the order of inputs)", len(raw), nraw)
	}
	var shmOut map[string]shmRef
	if outs := in.GetOutputs(); len(outs) > 0 {
		r.Outputs = make([]string, len(outs))
		seenOut := make(map[string]int, len(outs))
		for i, o := range outs {
			f := "outputs[" + strconv.Itoa(i) + "]"
			if err := checkOutputRequest(f, o.GetName(), seenOut, i); err != nil {
				return nil, nil, nil, err
			}
			op := grpcParams(o.GetParameters())
			if err := checkTensorParams(f+".parameters", op); err != nil {
				return nil, nil, nil, err
			}
			ref, inShm, err := sharedMemoryRef(f+".parameters", op)
			if err != nil {
				return nil, nil, nil, err
			}
			if inShm {
				if err := shm.checkRef(f+".parameters", ref); err != nil {
					return nil, nil, nil, err
				}
				if shmOut == nil {
					shmOut = make(map[string]shmRef)
				}
				shmOut[o.GetName()] = ref
			}
			r.Outputs[i] = o.GetName()
		}
	}
	return r, shmOut, bufs, nil
}

// grpcParams converts InferParameters; one with no value set is left out.
func grpcParams(in map[string]*pb.InferParameter) map[string]param {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]param, len(in))
	for k, v := range in {
		switch c := v.GetParameterChoice().(type) {
		case *pb.InferParameter_BoolParam:
			out[k] = param{kind: kindBool, b: c.BoolParam}
		case *pb.InferParameter_Int64Param:
			out[k] = param{kind: kindInt, i: c.Int64Param}
		case *pb.InferParameter_Uint64Param:
			out[k] = param{kind: kindUint, u: c.Uint64Param}
		case *pb.InferParameter_DoubleParam:
			out[k] = param{kind: kindFloat, f: c.DoubleParam}
		case *pb.InferParameter_StringParam:
			out[k] = param{kind: kindString, s: c.StringParam}
		}
	}
	return out
}

// contentsField names the InferTensorContents field that carries dt.
func contentsField(dt serve.Datatype) string {
	switch dt {
	case serve.Bool:
		return "bool_contents"
	case serve.Int8, serve.Int16, serve.Int32:
		return "int_contents"
	case serve.Int64:
		return "int64_contents"
	case serve.Uint8, serve.Uint16, serve.Uint32:
		return "uint_contents"
	case serve.Uint64:
		return "uint64_contents"
	case serve.FP32:
		return "fp32_contents"
	case serve.FP64:
		return "fp64_contents"
	case serve.Bytes:
		return "bytes_contents"
	}
	return ""
}

// decodeContents reads a tensor's typed contents: the field of its
// datatype must hold exactly n values, and no other field any.
func decodeContents(f string, dt serve.Datatype, shape []int64, n int, c *pb.InferTensorContents) (any, error) {
	want := contentsField(dt)
	if want == "" {
		return nil, serve.Inputf(f, "%s has no typed contents field: send it in raw_input_contents", dt)
	}
	lens := map[string]int{
		"bool_contents": len(c.GetBoolContents()), "int_contents": len(c.GetIntContents()),
		"int64_contents": len(c.GetInt64Contents()), "uint_contents": len(c.GetUintContents()),
		"uint64_contents": len(c.GetUint64Contents()), "fp32_contents": len(c.GetFp32Contents()),
		"fp64_contents": len(c.GetFp64Contents()), "bytes_contents": len(c.GetBytesContents()),
	}
	for name, l := range lens {
		if name != want && l > 0 {
			return nil, serve.Inputf(f+"."+name, "%d values for a %s input (want its values in %s)", l, dt, want)
		}
	}
	if lens[want] != n {
		return nil, serve.Inputf(f+"."+want, "%d values for shape %s (%d expected)", lens[want], shapeString(shape), n)
	}
	switch dt {
	case serve.Bool:
		return c.GetBoolContents(), nil
	case serve.Int8:
		return narrow[int32, int8](f+".int_contents", dt, c.GetIntContents(), -1<<7, 1<<7-1)
	case serve.Int16:
		return narrow[int32, int16](f+".int_contents", dt, c.GetIntContents(), -1<<15, 1<<15-1)
	case serve.Int32:
		return c.GetIntContents(), nil
	case serve.Int64:
		return c.GetInt64Contents(), nil
	case serve.Uint8:
		return narrow[uint32, uint8](f+".uint_contents", dt, c.GetUintContents(), 0, 1<<8-1)
	case serve.Uint16:
		return narrow[uint32, uint16](f+".uint_contents", dt, c.GetUintContents(), 0, 1<<16-1)
	case serve.Uint32:
		return c.GetUintContents(), nil
	case serve.Uint64:
		return c.GetUint64Contents(), nil
	case serve.FP32:
		return c.GetFp32Contents(), nil
	case serve.FP64:
		return c.GetFp64Contents(), nil
	}
	return c.GetBytesContents(), nil
}

// narrow converts the values of a wider contents field to dt's Go type,
// refusing one outside [lo, hi].
func narrow[W int32 | uint32, T int8 | int16 | uint8 | uint16](f string, dt serve.Datatype, in []W, lo, hi int64) ([]T, error) {
	out := make([]T, len(in))
	for i, v := range in {
		if int64(v) < lo || int64(v) > hi {
			return nil, serve.Inputf(f+"["+strconv.Itoa(i)+"]", "%d is not a %s value (want an integer from %d to %d)", v, dt, lo, hi)
		}
		out[i] = T(v)
	}
	return out, nil
}

// encodeContents puts a tensor's values in the typed contents field of its datatype.
func encodeContents(dt serve.Datatype, data any) *pb.InferTensorContents {
	c := &pb.InferTensorContents{}
	switch dt {
	case serve.Bool:
		c.BoolContents = data.([]bool)
	case serve.Int8:
		c.IntContents = widen[int8, int32](data.([]int8))
	case serve.Int16:
		c.IntContents = widen[int16, int32](data.([]int16))
	case serve.Int32:
		c.IntContents = data.([]int32)
	case serve.Int64:
		c.Int64Contents = data.([]int64)
	case serve.Uint8:
		c.UintContents = widen[uint8, uint32](data.([]uint8))
	case serve.Uint16:
		c.UintContents = widen[uint16, uint32](data.([]uint16))
	case serve.Uint32:
		c.UintContents = data.([]uint32)
	case serve.Uint64:
		c.Uint64Contents = data.([]uint64)
	case serve.FP32:
		c.Fp32Contents = data.([]float32)
	case serve.FP64:
		c.Fp64Contents = data.([]float64)
	case serve.Bytes:
		c.BytesContents = data.([][]byte)
	default:
		panic(fmt.Sprintf("oip: no typed contents for %s", dt)) // FP16 goes raw: ModelInfer's choice
	}
	return c
}

func widen[T int8 | int16 | uint8 | uint16, W int32 | uint32](in []T) []W {
	out := make([]W, len(in))
	for i, v := range in {
		out[i] = W(v)
	}
	return out
}
