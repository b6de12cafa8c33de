package oip

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/virga-ml/virga/internal/serve"
)

// inferBody64 is an inference request of one FP32 [64,64] input, with
// values like a scaled image's.
func inferBody64() []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	b.WriteString(`{"id":"bench","inputs":[{"name":"pixels","shape":[64,64],"datatype":"FP32","data":[`)
	for i := range 64 * 64 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatFloat(float64(rng.Float32()*16), 'g', -1, 32))
	}
	b.WriteString(`]}]}`)
	return []byte(b.String())
}

// BenchmarkDecodeInfer decodes a [64,64] FP32 request: "virga" is
// decodeInfer; "encoding-json" decodes the same body with encoding/json's
// reflection straight into []float32, for comparison.
func BenchmarkDecodeInfer(b *testing.B) {
	body := inferBody64()
	b.Run("virga", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			r, err := decodeInfer(body, "m", "")
			if err != nil || len(r.Inputs[0].Data.([]float32)) != 4096 {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			var in struct {
				ID     string `json:"id"`
				Inputs []struct {
					Name     string    `json:"name"`
					Shape    []int64   `json:"shape"`
					Datatype string    `json:"datatype"`
					Data     []float32 `json:"data"`
				} `json:"inputs"`
			}
			if err := json.Unmarshal(body, &in); err != nil || len(in.Inputs[0].Data) != 4096 {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkEncodeInfer encodes a response of one FP32 [64,64] output:
// "virga" is appendInferResponse, "encoding-json" json.Marshal of the same
// response as a struct, for comparison.
func BenchmarkEncodeInfer(b *testing.B) {
	r, err := decodeInfer(inferBody64(), "m", "")
	if err != nil {
		b.Fatal(err)
	}
	resp := &serve.Response{ModelName: "m", Outputs: r.Inputs}
	b.Run("virga", func(b *testing.B) {
		var buf []byte
		b.ReportAllocs()
		for b.Loop() {
			buf, _ = appendInferResponse(buf[:0], resp, binaryOutputs{})
		}
		b.SetBytes(int64(len(buf)))
	})
	b.Run("encoding-json", func(b *testing.B) {
		type output struct {
			Name     string    `json:"name"`
			Datatype string    `json:"datatype"`
			Shape    []int64   `json:"shape"`
			Data     []float32 `json:"data"`
		}
		v := struct {
			ModelName string   `json:"model_name"`
			Outputs   []output `json:"outputs"`
		}{"m", []output{{"pixels", "FP32", []int64{64, 64}, r.Inputs[0].Data.([]float32)}}}
		var n int
		b.ReportAllocs()
		for b.Loop() {
			out, err := json.Marshal(v)
			if err != nil {
				b.Fatal(err)
			}
			n = len(out)
		}
		b.SetBytes(int64(n))
	})
}

// FuzzDecodeInfer: decodeInfer never panics; what it accepts has, for
// every input, as many values of the datatype's Go type as its shape
// holds, and encodes to a response that decodes back to the same values.
func FuzzDecodeInfer(f *testing.F) {
	f.Add([]byte(specRequest))
	f.Add(inferBody64()[:300])
	for _, s := range []string{
		`{"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[[1,2],[3,4]]}]}`,
		`{"inputs":[{"name":"x","shape":[2],"datatype":"BYTES","data":["a\"b","\u00e9"]}],"outputs":[{"name":"y"}]}`,
		`{"parameters":{"priority":2,"timeout":100},"inputs":[{"name":"x","shape":[],"datatype":"INT8","data":[-3]}]}`,
		`{"inputs":[{"name":"x","shape":[3],"datatype":"FP16","data":[1.5,"NaN",65504]}]}`,
		`{"inputs":[{"name":"x","shape":[2],"datatype":"BOOL","data":[true,false]},{"name":"z","shape":[1],"datatype":"UINT64","data":[18446744073709551615]}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := decodeInfer(body, "m", "")
		if err != nil {
			if _, ok := err.(*serve.InputError); !ok {
				t.Fatalf("error %T %v is not an InputError", err, err)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted a body that is not JSON: %q", body)
		}
		for i, in := range r.Inputs {
			want, err := elements("", in.Shape, 1<<40)
			if err != nil {
				t.Fatalf("inputs[%d]: accepted shape %v: %v", i, in.Shape, err)
			}
			if got := dataLen(in.Datatype, in.Data); got != want {
				t.Fatalf("inputs[%d]: %d values of %T for shape %v", i, got, in.Data, in.Shape)
			}
		}
		// Round trip: the response encoding of the inputs decodes to them.
		out, _ := appendInferResponse(nil, &serve.Response{ModelName: "m", Outputs: r.Inputs}, binaryOutputs{})
		var back struct {
			Outputs []inputJSON `json:"outputs"`
		}
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("response is not JSON: %v: %s", err, out)
		}
		for i, in := range r.Inputs {
			got, err := decodeData("", in.Datatype, in.Shape, dataLen(in.Datatype, in.Data), back.Outputs[i].Data)
			if err != nil {
				t.Fatalf("outputs[%d] does not decode: %v: %s", i, err, out)
			}
			if a, b := fmt.Sprint(got), fmt.Sprint(in.Data); a != b && !strings.Contains(a, "NaN") {
				t.Fatalf("outputs[%d] round trip: %s, want %s", i, a, b)
			}
		}
	})
}

// FuzzFastFloat: fastFloat, where it answers, agrees with strconv.ParseFloat
// to the bit, for FP32 and FP64.
func FuzzFastFloat(f *testing.F) {
	for _, s := range []string{"0", "-0", "1.1", "12.345678", "16777216", "16777217", "3.4e38", "1e-10", "-0.000001",
		"123456789012345", "9007199254740993", "1e22", "1.5e-22", "0.1e1", "5E+3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l := &lexer{b: []byte(s)}
		if l.number() != nil || l.i != len(s) {
			return // not a JSON number
		}
		for _, bits := range []int{32, 64} {
			got, ok := fastFloat([]byte(s), bits)
			if !ok {
				continue
			}
			want, err := strconv.ParseFloat(s, bits)
			if err != nil {
				t.Fatalf("fastFloat(%q, %d) = %v, strconv: %v", s, bits, got, err)
			}
			if bits == 32 && math.Float32bits(float32(got)) != math.Float32bits(float32(want)) ||
				bits == 64 && math.Float64bits(got) != math.Float64bits(want) {
				t.Fatalf("fastFloat(%q, %d) = %v, strconv %v", s, bits, got, want)
			}
		}
	})
}

// FuzzDecodeInferBinary: a body with binary data after its JSON
// (Triton's binary tensor data extension) never panics the decoder, and
// what it accepts has the values its shapes hold.
func FuzzDecodeInferBinary(f *testing.F) {
	bin := append(encodeRaw(serve.Uint32, []uint32{1, 2, 3, 4}), 1, 0, 1)
	f.Add(append([]byte(binaryExampleJSON), bin...), len(binaryExampleJSON))
	f.Add([]byte(`{"inputs":[{"name":"s","shape":[2],"datatype":"BYTES","parameters":{"binary_data_size":9}}]}`+"\x01\x00\x00\x00a\x00\x00\x00\x00"), 92)
	f.Fuzz(func(t *testing.T, body []byte, jsonLen int) {
		r, _, err := decodeInferBody(body, jsonLen, "mymodel", "", nil)
		if err != nil {
			if _, ok := err.(*serve.InputError); !ok {
				t.Fatalf("error %T %v is not an InputError", err, err)
			}
			return
		}
		for i, in := range r.Inputs {
			want, err := elements("", in.Shape, 1<<40)
			if err != nil || dataLen(in.Datatype, in.Data) != want {
				t.Fatalf("inputs[%d]: %d values of %T for shape %v (%v)", i, dataLen(in.Datatype, in.Data), in.Data, in.Shape, err)
			}
		}
	})
}
