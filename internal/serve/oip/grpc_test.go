package oip

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/virga-ml/virga/internal/serve"
	pb "github.com/virga-ml/virga/internal/serve/oip/inferencepb"
)

// grpcEnv is NewGRPCServer over a testService on a loopback listener, and
// a client of the generated code connected to it.
type grpcEnv struct {
	svc    *testService
	conn   *grpc.ClientConn
	client pb.GRPCInferenceServiceClient
}

func newGRPCEnv(t *testing.T, opts Options) *grpcEnv {
	t.Helper()
	svc := newTestService()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewGRPCServer(svc, opts)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &grpcEnv{svc: svc, conn: conn, client: pb.NewGRPCInferenceServiceClient(conn)}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestGRPCSpecExample: the specification's inference example (input1 with
// the three values its shape holds) through gRPC, typed and raw.
func TestGRPCSpecExample(t *testing.T) {
	e := newGRPCEnv(t, Options{})
	ctx := ctxT(t)
	req := &pb.ModelInferRequest{ModelName: "mymodel", Id: "42",
		Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "input0", Datatype: "UINT32", Shape: []int64{2, 2}, Contents: &pb.InferTensorContents{UintContents: []uint32{1, 2, 3, 4}}},
			{Name: "input1", Datatype: "BOOL", Shape: []int64{3}, Contents: &pb.InferTensorContents{BoolContents: []bool{true, false, true}}},
		},
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "output0"}},
	}
	resp, err := e.client.ModelInfer(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want := &pb.ModelInferResponse{ModelName: "mymodel", Id: "42", Outputs: []*pb.ModelInferResponse_InferOutputTensor{
		{Name: "output0", Datatype: "FP32", Shape: []int64{3, 2}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{1, 1.1, 2, 2.1, 3, 3.1}}}}}
	if !proto.Equal(resp, want) {
		t.Errorf("typed: got %v\nwant %v", resp, want)
	}

	// The same in raw contents: answered raw.
	raw := &pb.ModelInferRequest{ModelName: "mymodel", Id: "42",
		Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "input0", Datatype: "UINT32", Shape: []int64{2, 2}},
			{Name: "input1", Datatype: "BOOL", Shape: []int64{3}},
		},
		RawInputContents: [][]byte{encodeRaw(serve.Uint32, []uint32{1, 2, 3, 4}), {1, 0, 1}},
	}
	resp, err = e.client.ModelInfer(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	wantRaw := &pb.ModelInferResponse{ModelName: "mymodel", Id: "42",
		Outputs:           []*pb.ModelInferResponse_InferOutputTensor{{Name: "output0", Datatype: "FP32", Shape: []int64{3, 2}}},
		RawOutputContents: [][]byte{encodeRaw(serve.FP32, []float32{1, 1.1, 2, 2.1, 3, 3.1})}}
	if !proto.Equal(resp, wantRaw) {
		t.Errorf("raw: got %v\nwant %v", resp, wantRaw)
	}
	var f []float32
	for b := resp.RawOutputContents[0]; len(b) > 0; b = b[4:] {
		f = append(f, math.Float32frombits(binary.LittleEndian.Uint32(b)))
	}
	if !reflect.DeepEqual(f, []float32{1, 1.1, 2, 2.1, 3, 3.1}) {
		t.Errorf("raw output decodes to %v", f)
	}
}

func TestGRPCHealthAndMetadata(t *testing.T) {
	e := newGRPCEnv(t, Options{})
	ctx := ctxT(t)
	if r, err := e.client.ServerLive(ctx, &pb.ServerLiveRequest{}); err != nil || !r.Live {
		t.Errorf("ServerLive = %v, %v", r, err)
	}
	if r, err := e.client.ServerReady(ctx, &pb.ServerReadyRequest{}); err != nil || !r.Ready {
		t.Errorf("ServerReady = %v, %v", r, err)
	}
	sm, err := e.client.ServerMetadata(ctx, &pb.ServerMetadataRequest{})
	if err != nil || !proto.Equal(sm, &pb.ServerMetadataResponse{Name: "virga", Version: "test", Extensions: []string{"model_repository", "system_shared_memory"}}) {
		t.Errorf("ServerMetadata = %v, %v", sm, err)
	}
	mm, err := e.client.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "sum", Version: "1"})
	wantMM := &pb.ModelMetadataResponse{Name: "sum", Versions: []string{"1"}, Platform: "virga_test",
		Inputs: []*pb.ModelMetadataResponse_TensorMetadata{{Name: "x", Datatype: "FP32", Shape: []int64{-1, 4}}},
		Outputs: []*pb.ModelMetadataResponse_TensorMetadata{{Name: "sum", Datatype: "FP64", Shape: []int64{-1}},
			{Name: "double", Datatype: "FP32", Shape: []int64{-1, 4}}}}
	if err != nil || !proto.Equal(mm, wantMM) {
		t.Errorf("ModelMetadata = %v, %v\nwant %v", mm, err, wantMM)
	}
	if r, err := e.client.ModelReady(ctx, &pb.ModelReadyRequest{Name: "sum"}); err != nil || !r.Ready {
		t.Errorf("ModelReady(sum) = %v, %v", r, err)
	}
	if r, err := e.client.ModelReady(ctx, &pb.ModelReadyRequest{Name: "broken"}); err != nil || r.Ready {
		t.Errorf("ModelReady(broken) = %v, %v; want not ready", r, err)
	}
	for _, call := range []func() error{
		func() error { _, err := e.client.ModelReady(ctx, &pb.ModelReadyRequest{Name: "nope"}); return err },
		func() error {
			_, err := e.client.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "sum", Version: "9"})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.NotFound {
			t.Errorf("unknown model: %v, want NotFound", err)
		}
	}
}

// TestGRPCTypes sends every datatype through the identity model, raw and
// (but FP16) typed, and checks the values come back as they went.
func TestGRPCTypes(t *testing.T) {
	e := newGRPCEnv(t, Options{})
	ctx := ctxT(t)
	tensors := []serve.Tensor{
		{Datatype: serve.Bool, Data: []bool{true, false, true, true}},
		{Datatype: serve.Uint8, Data: []uint8{0, 1, 254, 255}},
		{Datatype: serve.Uint16, Data: []uint16{0, 1, 65534, 65535}},
		{Datatype: serve.Uint32, Data: []uint32{0, 1, 7, math.MaxUint32}},
		{Datatype: serve.Uint64, Data: []uint64{0, 1, 7, math.MaxUint64}},
		{Datatype: serve.Int8, Data: []int8{-128, -1, 0, 127}},
		{Datatype: serve.Int16, Data: []int16{-32768, -1, 0, 32767}},
		{Datatype: serve.Int32, Data: []int32{math.MinInt32, -1, 0, math.MaxInt32}},
		{Datatype: serve.Int64, Data: []int64{math.MinInt64, -1, 0, math.MaxInt64}},
		{Datatype: serve.FP16, Data: []uint16{0x3c00, 0xc000, 0x7bff, 0x0001}},
		{Datatype: serve.FP32, Data: []float32{1.5, -2, float32(math.Inf(1)), 3.4e38}},
		{Datatype: serve.FP64, Data: []float64{1.5, -2, math.Inf(-1), 1e300}},
		{Datatype: serve.Bytes, Data: [][]byte{[]byte("a"), {}, []byte("héllo"), {0, 1, 2}}},
	}
	for _, tt := range tensors {
		for _, raw := range []bool{true, false} {
			if !raw && tt.Datatype == serve.FP16 {
				continue
			}
			in := &pb.ModelInferRequest_InferInputTensor{Name: "t", Datatype: string(tt.Datatype), Shape: []int64{2, 2}}
			req := &pb.ModelInferRequest{ModelName: "identity", Inputs: []*pb.ModelInferRequest_InferInputTensor{in}}
			if raw {
				req.RawInputContents = [][]byte{encodeRaw(tt.Datatype, tt.Data)}
			} else {
				in.Contents = encodeContents(tt.Datatype, tt.Data)
			}
			resp, err := e.client.ModelInfer(ctx, req)
			if err != nil {
				t.Errorf("%s raw=%v: %v", tt.Datatype, raw, err)
				continue
			}
			out := resp.Outputs[0]
			var got any
			if raw {
				if out.Contents != nil || len(resp.RawOutputContents) != 1 {
					t.Errorf("%s: raw request answered with contents %v and %d raw", tt.Datatype, out.Contents, len(resp.RawOutputContents))
					continue
				}
				got, err = decodeRaw("", tt.Datatype, out.Shape, 4, resp.RawOutputContents[0])
			} else {
				if len(resp.RawOutputContents) != 0 {
					t.Errorf("%s: typed request answered raw", tt.Datatype)
					continue
				}
				got, err = decodeContents("", tt.Datatype, out.Shape, 4, out.Contents)
			}
			if err != nil || !reflect.DeepEqual(normBytes(got), normBytes(tt.Data)) || out.Datatype != string(tt.Datatype) || !reflect.DeepEqual(out.Shape, []int64{2, 2}) {
				t.Errorf("%s raw=%v: got %v %v %v (%v), want %v", tt.Datatype, raw, out.Datatype, out.Shape, got, err, tt.Data)
			}
		}
	}
}

// normBytes makes empty BYTES elements comparable (nil and []byte{} are both empty).
func normBytes(v any) any {
	b, ok := v.([][]byte)
	if !ok {
		return v
	}
	s := make([]string, len(b))
	for i, x := range b {
		s[i] = string(x)
	}
	return s
}

func TestGRPCErrors(t *testing.T) {
	e := newGRPCEnv(t, Options{MaxBody: 1 << 16})
	ctx := ctxT(t)
	x := func(dt string, shape []int64, c *pb.InferTensorContents) *pb.ModelInferRequest {
		return &pb.ModelInferRequest{ModelName: "identity", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: dt, Shape: shape, Contents: c}}}
	}
	rawReq := func(model, dt string, shape []int64, raw ...[]byte) *pb.ModelInferRequest {
		return &pb.ModelInferRequest{ModelName: model, Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: dt, Shape: shape}}, RawInputContents: raw}
	}
	mixed := rawReq("identity", "FP32", []int64{1}, make([]byte, 4))
	mixed.Inputs[0].Contents = &pb.InferTensorContents{Fp32Contents: []float32{1}}
	twoRaw := rawReq("identity", "FP32", []int64{1}, make([]byte, 4), make([]byte, 4))
	for _, c := range []struct {
		name     string
		req      *pb.ModelInferRequest
		wantCode codes.Code
		want     string
	}{
		{"no model", &pb.ModelInferRequest{}, codes.InvalidArgument, "model_name: missing"},
		{"too few values", x("FP32", []int64{1, 64}, &pb.InferTensorContents{Fp32Contents: make([]float32, 63)}), codes.InvalidArgument, "inputs[0].contents.fp32_contents: 63 values for shape [1,64] (64 expected)"},
		{"wrong field", x("FP32", []int64{2}, &pb.InferTensorContents{Fp64Contents: []float64{1, 2}}), codes.InvalidArgument, "inputs[0].contents.fp64_contents: 2 values for a FP32 input (want its values in fp32_contents)"},
		{"INT8 out of range", x("INT8", []int64{2}, &pb.InferTensorContents{IntContents: []int32{1, 200}}), codes.InvalidArgument, "inputs[0].contents.int_contents[1]: 200 is not a INT8 value (want an integer from -128 to 127)"},
		{"typed FP16", x("FP16", []int64{1}, &pb.InferTensorContents{UintContents: []uint32{1}}), codes.InvalidArgument, "FP16 has no typed contents field: send it in raw_input_contents"},
		{"unknown datatype", x("FLOAT32", []int64{1}, nil), codes.InvalidArgument, `inputs[0].datatype: unknown datatype "FLOAT32"`},
		{"negative dimension", x("FP32", []int64{-1}, nil), codes.InvalidArgument, "inputs[0].shape: dimension 0 is -1"},
		{"raw size", rawReq("identity", "FP32", []int64{1, 64}, make([]byte, 252)), codes.InvalidArgument, "raw_input_contents[0]: 252 bytes for shape [1,64] of FP32 (256 expected: 64 values of 4 bytes)"},
		{"raw BOOL", rawReq("identity", "BOOL", []int64{2}, []byte{1, 2}), codes.InvalidArgument, "raw_input_contents[0]: byte 1 is 2, not a BOOL value (want 0 or 1)"},
		{"raw BYTES short", rawReq("identity", "BYTES", []int64{1}, []byte{9, 0, 0, 0, 'a'}), codes.InvalidArgument, "raw_input_contents[0]: element 0 claims 9 bytes at byte 4, but only 1 remain"},
		{"raw BYTES extra", rawReq("identity", "BYTES", []int64{1}, []byte{1, 0, 0, 0, 'a', 'b'}), codes.InvalidArgument, "raw_input_contents[0]: 1 bytes left after the 1 BYTES elements of shape [1]"},
		{"raw and contents", mixed, codes.InvalidArgument, "inputs[0].contents: given with raw_input_contents"},
		{"raw count", twoRaw, codes.InvalidArgument, "raw_input_contents: 2 entries for 1 inputs"},
		{"priority", &pb.ModelInferRequest{ModelName: "identity", Parameters: map[string]*pb.InferParameter{"priority": {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "high"}}}}, codes.InvalidArgument, `parameters.priority: want a non-negative integer, got "high"`},
		{"unknown model", rawReq("nope", "FP32", []int64{1}, make([]byte, 4)), codes.NotFound, "model not found"},
		{"unavailable", rawReq("broken", "FP32", []int64{1}, make([]byte, 4)), codes.Unavailable, "model unavailable"},
		{"refused", rawReq("busy", "FP32", []int64{1}, make([]byte, 4)), codes.ResourceExhausted, "the model's queue is full (QueueFull)"},
		{"too large", rawReq("identity", "FP32", []int64{1 << 15}, make([]byte, 1<<17)), codes.ResourceExhausted, "larger than max"},
	} {
		_, err := e.client.ModelInfer(ctx, c.req)
		st, _ := status.FromError(err)
		if st.Code() != c.wantCode || !strings.Contains(st.Message(), c.want) {
			t.Errorf("%s: %v %q\nwant %v %q", c.name, st.Code(), st.Message(), c.wantCode, c.want)
		}
		if c.name == "refused" {
			var reason string
			for _, d := range st.Details() {
				if ei, ok := d.(*errdetails.ErrorInfo); ok {
					reason = ei.Reason
				}
			}
			if reason != "QueueFull" {
				t.Errorf("refusal details %v, want an ErrorInfo with reason QueueFull", st.Details())
			}
		}
	}
}

// TestGRPCParameters: priority and timeout parameters reach the Service.
func TestGRPCParameters(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	e := newGRPCEnv(t, Options{Now: func() time.Time { return now }})
	req := &pb.ModelInferRequest{ModelName: "sum", ModelVersion: "1", Id: "q",
		Parameters: map[string]*pb.InferParameter{
			"priority": {ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: 2}},
			"timeout":  {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 1500}},
		},
		Inputs:  []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, 4}, Contents: &pb.InferTensorContents{Fp32Contents: []float32{1, 2, 3, 4}}}},
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "sum"}},
	}
	resp, err := e.client.ModelInfer(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	want := &pb.ModelInferResponse{ModelName: "sum", ModelVersion: "1", Id: "q", Outputs: []*pb.ModelInferResponse_InferOutputTensor{
		{Name: "sum", Datatype: "FP64", Shape: []int64{1}, Contents: &pb.InferTensorContents{Fp64Contents: []float64{10}}}}}
	if !proto.Equal(resp, want) {
		t.Errorf("got %v\nwant %v", resp, want)
	}
	r := e.svc.lastRequest()
	if r.Priority != 1 || r.Timeout != 1500*time.Microsecond || !r.Arrived.Equal(now) || !reflect.DeepEqual(r.Outputs, []string{"sum"}) {
		t.Errorf("request priority %d timeout %v arrived %v outputs %v; want 1, 1.5ms, %v, [sum]", r.Priority, r.Timeout, r.Arrived, r.Outputs, now)
	}
}

// TestGRPCAuth: with CheckToken set, calls but the health checks need
// "authorization: Bearer <token>" metadata the check accepts.
func TestGRPCAuth(t *testing.T) {
	e := newGRPCEnv(t, Options{CheckToken: func(ctx context.Context, tok string) error {
		if tok != "secret" {
			return errors.New("not an admin token")
		}
		return nil
	}})
	ctx := ctxT(t)
	if _, err := e.client.ServerLive(ctx, &pb.ServerLiveRequest{}); err != nil {
		t.Errorf("ServerLive without a token: %v", err)
	}
	if _, err := e.client.ServerReady(ctx, &pb.ServerReadyRequest{}); err != nil {
		t.Errorf("ServerReady without a token: %v", err)
	}
	for _, c := range []struct {
		auth     string
		wantCode codes.Code
		want     string
	}{
		{"", codes.Unauthenticated, "a token is required"},
		{"Bearer wrong", codes.Unauthenticated, "the token is not accepted: not an admin token"},
		{"Bearer secret", codes.OK, ""},
	} {
		cctx := ctx
		if c.auth != "" {
			cctx = metadata.AppendToOutgoingContext(ctx, "authorization", c.auth)
		}
		_, err := e.client.ServerMetadata(cctx, &pb.ServerMetadataRequest{})
		if st, _ := status.FromError(err); st.Code() != c.wantCode || !strings.Contains(st.Message(), c.want) {
			t.Errorf("authorization %q: %v, want %v %q", c.auth, err, c.wantCode, c.want)
		}
	}
}

// TestGRPCRepository calls Triton's repository methods as Triton's clients
// do (same method names and messages).
func TestGRPCRepository(t *testing.T) {
	e := newGRPCEnv(t, Options{CheckToken: func(ctx context.Context, tok string) error {
		if tok != "secret" {
			return errors.New("not an admin token")
		}
		return nil
	}})
	ctx := metadata.AppendToOutgoingContext(ctxT(t), "authorization", "Bearer secret")
	index := func(ready bool) []string {
		t.Helper()
		var resp pb.RepositoryIndexResponse
		if err := e.conn.Invoke(ctx, methodRepositoryIndex, &pb.RepositoryIndexRequest{Ready: ready}, &resp); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range resp.Models {
			got = append(got, m.Name+":"+m.State)
		}
		return got
	}
	if got, want := index(false), []string{"broken:UNAVAILABLE", "busy:READY", "identity:READY", "mymodel:READY", "sum:READY"}; !reflect.DeepEqual(got, want) {
		t.Errorf("index %v, want %v", got, want)
	}
	unload := &pb.RepositoryModelUnloadRequest{ModelName: "sum", Parameters: map[string]*pb.ModelRepositoryParameter{
		"unload_dependents": {ParameterChoice: &pb.ModelRepositoryParameter_BoolParam{BoolParam: true}}}}
	if err := e.conn.Invoke(ctx, methodRepositoryUnload, unload, &pb.RepositoryModelUnloadResponse{}); err != nil {
		t.Fatal(err)
	}
	if got, want := index(true), []string{"busy:READY", "identity:READY", "mymodel:READY"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ready index after unload %v, want %v", got, want)
	}
	if err := e.conn.Invoke(ctx, methodRepositoryLoad, &pb.RepositoryModelLoadRequest{ModelName: "sum"}, &pb.RepositoryModelLoadResponse{}); err != nil {
		t.Fatal(err)
	}
	if r, err := e.client.ModelReady(ctx, &pb.ModelReadyRequest{Name: "sum"}); err != nil || !r.Ready {
		t.Errorf("ModelReady after load = %v, %v", r, err)
	}
	for _, c := range []struct {
		name, method string
		req          proto.Message
		ctx          context.Context
		wantCode     codes.Code
		want         string
	}{
		{"unknown model", methodRepositoryLoad, &pb.RepositoryModelLoadRequest{ModelName: "nope"}, ctx, codes.NotFound, "model not found"},
		{"load fails", methodRepositoryLoad, &pb.RepositoryModelLoadRequest{ModelName: "broken"}, ctx, codes.Unavailable, "model unavailable"},
		{"no name", methodRepositoryUnload, &pb.RepositoryModelUnloadRequest{}, ctx, codes.InvalidArgument, "model_name: missing"},
		{"config override", methodRepositoryLoad, &pb.RepositoryModelLoadRequest{ModelName: "sum", Parameters: map[string]*pb.ModelRepositoryParameter{
			"config": {ParameterChoice: &pb.ModelRepositoryParameter_StringParam{StringParam: "{}"}}}}, ctx, codes.InvalidArgument, "parameters.config: not supported"},
		{"other repository", methodRepositoryIndex, &pb.RepositoryIndexRequest{RepositoryName: "models2"}, ctx, codes.InvalidArgument, `repository_name: "models2": this server has one model repository`},
		{"no token", methodRepositoryIndex, &pb.RepositoryIndexRequest{}, ctxT(t), codes.Unauthenticated, "a token is required"},
	} {
		var resp pb.RepositoryIndexResponse // every response here is empty or an index
		err := e.conn.Invoke(c.ctx, c.method, c.req, &resp)
		if st, _ := status.FromError(err); st.Code() != c.wantCode || !strings.Contains(st.Message(), c.want) {
			t.Errorf("%s: %v, want %v %q", c.name, err, c.wantCode, c.want)
		}
	}
}
