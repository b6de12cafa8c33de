package oip

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/virga-ml/virga/internal/serve"
	pb "github.com/virga-ml/virga/internal/serve/oip/inferencepb"
)

// The pool's buffers have the length asked, a power-of-two capacity, and
// come back; buffers not of its sizes are not kept.
func TestBufferPool(t *testing.T) {
	var p bufferPool
	for _, n := range []int{0, 1, 256, 257, 4096, 300 << 10, 1 << 26} {
		b := p.Get(n)
		if len(*b) != n {
			t.Fatalf("Get(%d): length %d", n, len(*b))
		}
		if c := cap(*b); c < n || c&(c-1) != 0 {
			t.Fatalf("Get(%d): capacity %d, want a power of two at least %d", n, c, n)
		}
		p.Put(b)
	}
	if b := p.Get(1<<26 + 1); len(*b) != 1<<26+1 {
		t.Fatalf("Get past the largest tier: length %d", len(*b))
	}
	odd := make([]byte, 1000)
	p.Put(&odd) // not a power of two: dropped, not handed out short
	for range 100 {
		if b := p.Get(1000); cap(*b) != 1024 {
			t.Fatalf("Get(1000): capacity %d, want 1024", cap(*b))
		}
	}
}

// BenchmarkGRPCRaw1024 sends a FP32 [1024,64] tensor (256 KiB) as raw
// contents through the identity model and back over loopback.
func BenchmarkGRPCRaw1024(b *testing.B) {
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
	data := make([]float32, 1024*64)
	req := &pb.ModelInferRequest{ModelName: "identity", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "pixels", Datatype: "FP32", Shape: []int64{1024, 64}}},
		RawInputContents: [][]byte{encodeRaw(serve.FP32, data)}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := client.ModelInfer(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}
