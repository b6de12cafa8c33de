package oip

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/virga-ml/virga/internal/serve"
	pb "github.com/virga-ml/virga/internal/serve/oip/inferencepb"
)

// FuzzDecodeRaw: decodeRaw never panics; what it accepts has as many
// values as the shape holds and encodes back to the same bytes.
func FuzzDecodeRaw(f *testing.F) {
	f.Add(uint8(10), int64(2), int64(2), encodeRaw(serve.FP32, []float32{1, 2, 3, 4}))
	f.Add(uint8(12), int64(1), int64(2), []byte{1, 0, 0, 0, 'a', 0, 0, 0, 0})
	f.Add(uint8(0), int64(3), int64(1), []byte{1, 0, 1})
	f.Add(uint8(9), int64(1), int64(1), []byte{0, 0x3c})
	f.Fuzz(func(t *testing.T, dti uint8, d0, d1 int64, raw []byte) {
		dt := datatypes[int(dti)%len(datatypes)]
		shape := []int64{d0, d1}
		n, err := elements("", shape, 1<<40)
		if err != nil {
			return
		}
		data, err := decodeRaw("raw", dt, shape, n, raw)
		if err != nil {
			if _, ok := err.(*serve.InputError); !ok {
				t.Fatalf("error %T %v is not an InputError", err, err)
			}
			return
		}
		if got := dataLen(dt, data); got != n {
			t.Fatalf("%s %v: %d values, want %d", dt, shape, got, n)
		}
		if back := encodeRaw(dt, data); !bytes.Equal(back, raw) {
			t.Fatalf("%s %v: %x encodes back to %x", dt, shape, raw, back)
		}
	})
}

// FuzzDecodeGRPCInfer: a ModelInferRequest of any bytes decodes without
// panicking, and an accepted one has inputs whose data match their shapes.
func FuzzDecodeGRPCInfer(f *testing.F) {
	seeds := []*pb.ModelInferRequest{
		{ModelName: "m", Id: "1", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, 2},
			Contents: &pb.InferTensorContents{Fp32Contents: []float32{1, 2}}}}},
		{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "BYTES", Shape: []int64{1}}},
			RawInputContents: [][]byte{{1, 0, 0, 0, 'a'}}},
		{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "INT8", Shape: []int64{2},
			Contents: &pb.InferTensorContents{IntContents: []int32{-1, 5}}}},
			Parameters: map[string]*pb.InferParameter{"priority": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 3}}}},
	}
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var in pb.ModelInferRequest
		if proto.Unmarshal(b, &in) != nil {
			return
		}
		r, _, _, err := decodeGRPCInfer(&in, nil)
		if err != nil {
			if _, ok := err.(*serve.InputError); !ok {
				t.Fatalf("error %T %v is not an InputError", err, err)
			}
			return
		}
		for i, x := range r.Inputs {
			n, err := elements("", x.Shape, 1<<40)
			if err != nil || dataLen(x.Datatype, x.Data) != n {
				t.Fatalf("inputs[%d]: %d values of %T for shape %v (%v)", i, dataLen(x.Datatype, x.Data), x.Data, x.Shape, err)
			}
		}
	})
}

// Raw contents are little-endian whatever the host: 1.0 and -2 as FP32 and
// INT64 bytes decode to those values and encode back to the same bytes.
func TestRawContentsAreLittleEndian(t *testing.T) {
	fp := []byte{0, 0, 0x80, 0x3f}
	data, err := decodeRaw("raw", serve.FP32, []int64{1}, 1, fp)
	if err != nil || data.([]float32)[0] != 1 {
		t.Fatalf("FP32 %x: %v, %v, want [1]", fp, data, err)
	}
	i64 := []byte{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	data, err = decodeRaw("raw", serve.Int64, []int64{1}, 1, i64)
	if err != nil || data.([]int64)[0] != -2 {
		t.Fatalf("INT64 %x: %v, %v, want [-2]", i64, data, err)
	}
	if back := encodeRaw(serve.FP32, []float32{1}); !bytes.Equal(back, fp) {
		t.Errorf("FP32 1 encodes to %x, want %x", back, fp)
	}
}
