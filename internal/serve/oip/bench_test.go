package oip

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/virga-ml/virga/internal/serve"
	pb "github.com/virga-ml/virga/internal/serve/oip/inferencepb"
)

// BenchmarkRoundTrip64 sends one FP32 [64,64] tensor through the identity
// model and back over loopback: REST with JSON, REST with the binary tensor
// data extension, gRPC with typed contents, and gRPC with raw contents.
func BenchmarkRoundTrip64(b *testing.B) {
	body := inferBody64()
	b.Run("rest-json", func(b *testing.B) {
		srv := httptest.NewServer(NewHandler(newTestService(), Options{}))
		defer srv.Close()
		url := srv.URL + "/v2/models/identity/infer"
		b.ReportAllocs()
		for b.Loop() {
			resp, err := srv.Client().Post(url, "application/json", bytes.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatal(resp.Status)
			}
		}
	})
	r, err := decodeInfer(body, "identity", "")
	if err != nil {
		b.Fatal(err)
	}
	data := r.Inputs[0].Data.([]float32)
	b.Run("rest-binary", func(b *testing.B) {
		srv := httptest.NewServer(NewHandler(newTestService(), Options{}))
		defer srv.Close()
		js := `{"inputs":[{"name":"pixels","shape":[64,64],"datatype":"FP32","parameters":{"binary_data_size":16384}}],` +
			`"outputs":[{"name":"pixels","parameters":{"binary_data":true}}]}`
		bin := append([]byte(js), encodeRaw(serve.FP32, data)...)
		b.ReportAllocs()
		for b.Loop() {
			req, err := http.NewRequest("POST", srv.URL+"/v2/models/identity/infer", bytes.NewReader(bin))
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("Inference-Header-Content-Length", strconv.Itoa(len(js)))
			resp, err := srv.Client().Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Inference-Header-Content-Length") == "" {
				b.Fatal(resp.Status)
			}
		}
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := NewGRPCServer(newTestService(), Options{})
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewGRPCInferenceServiceClient(conn)
	for _, raw := range []bool{false, true} {
		in := &pb.ModelInferRequest_InferInputTensor{Name: "pixels", Datatype: "FP32", Shape: []int64{64, 64}}
		name := "grpc-typed"
		req := &pb.ModelInferRequest{ModelName: "identity", Inputs: []*pb.ModelInferRequest_InferInputTensor{in}}
		if raw {
			name = "grpc-raw"
			req.RawInputContents = [][]byte{encodeRaw(serve.FP32, data)}
		} else {
			in.Contents = &pb.InferTensorContents{Fp32Contents: data}
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.ModelInfer(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
