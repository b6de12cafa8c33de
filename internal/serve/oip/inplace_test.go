package oip

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/virga-ml/virga/internal/serve"
)

// firstValues is a Service that checks each request's FP32 input holds
// want, and answers one number.
type firstValues struct {
	*testService
	want []float32
	bad  error
}

func (s *firstValues) Infer(ctx context.Context, r *serve.Request) (*serve.Response, error) {
	x, _ := r.Inputs[0].Data.([]float32)
	switch {
	case len(x) != len(s.want):
		s.bad = fmt.Errorf("input of %d values, want %d", len(x), len(s.want))
	default:
		for i := range x {
			if x[i] != s.want[i] {
				s.bad = fmt.Errorf("input[%d] = %v, want %v", i, x[i], s.want[i])
				break
			}
		}
	}
	return &serve.Response{Outputs: []serve.Tensor{{Name: "y", Datatype: serve.FP32, Shape: []int64{1}, Data: []float32{1}}}}, nil
}

// Binary tensor data is read once and decoded in place: a request of
// half a megabyte of FP32 costs the server a small fraction of its size
// in new memory (it was read into a buffer that grew past the body, copied
// again, then decoded into a new slice), and the numbers are right
// whatever the JSON header's length.
func TestBinaryInputDecodesInPlace(t *testing.T) {
	const rows = 32768
	x := make([]float32, rows*4)
	raw := make([]byte, 0, 4*len(x))
	for i := range x {
		x[i] = float32(i%1000) / 8
		raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(x[i]))
	}
	svc := &firstValues{testService: newTestService(), want: x}
	h := NewHandler(svc, Options{MaxBody: 8 << 20})
	for pad := range 8 { // every header length modulo 8
		header := fmt.Sprintf(`{"inputs":[{"name":"x","shape":[%d,4],"datatype":"FP32","parameters":{"binary_data_size":%d}}]}`, rows, len(raw)) + strings.Repeat(" ", pad)
		body := append([]byte(header), raw...)
		call := func() {
			req := httptest.NewRequest(http.MethodPost, "http://localhost/v2/models/sum/infer", bytes.NewReader(body))
			req.Header.Set("Inference-Header-Content-Length", strconv.Itoa(len(header)))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				t.Fatalf("header of %d bytes: %d %s", len(header), rec.Code, rec.Body)
			}
		}
		call() // the buffer pool warms up
		var before, after goruntime.MemStats
		goruntime.ReadMemStats(&before)
		const calls = 10
		for range calls {
			call()
		}
		goruntime.ReadMemStats(&after)
		if svc.bad != nil {
			t.Fatalf("header of %d bytes: %v", len(header), svc.bad)
		}
		if per := int(after.TotalAlloc-before.TotalAlloc) / calls; per > len(body)/4 && !raceEnabled {
			t.Errorf("header of %d bytes: %d bytes allocated a request of %d", len(header), per, len(body))
		}
	}
}
