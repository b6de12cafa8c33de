package oip

import (
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/virga-ml/virga/internal/serve"
)

// testService is a serve.Service over small real computations:
//   - "sum": input "x" FP32 [-1,4]; outputs "sum" FP64 [-1] (each row's sum)
//     and "double" FP32 [-1,4] (x times 2).
//   - "identity": answers every input as an output of the same name.
//   - "mymodel": the specification's example model: inputs input0 UINT32
//     [2,2] and input1 BOOL [-1]; output0 FP32 [n,2] whose row i is
//     [i+1, i+1.1] for each of input1's n values.
//   - "broken" exists but cannot serve (ErrUnavailable); "busy" refuses
//     every request (RefusedError QueueFull).
type testService struct {
	mu     sync.Mutex
	last   *serve.Request // the last request Infer took
	loaded map[string]bool
}

var _ serve.Service = (*testService)(nil)

func newTestService() *testService {
	return &testService{loaded: map[string]bool{"sum": true, "identity": true, "mymodel": true, "busy": true}}
}

var testModels = map[string]serve.ModelMetadata{
	"sum": {Name: "sum", Versions: []string{"1"}, Platform: "virga_test",
		Inputs:  []serve.TensorSpec{{Name: "x", Datatype: serve.FP32, Shape: []int64{-1, 4}}},
		Outputs: []serve.TensorSpec{{Name: "sum", Datatype: serve.FP64, Shape: []int64{-1}}, {Name: "double", Datatype: serve.FP32, Shape: []int64{-1, 4}}}},
	"identity": {Name: "identity", Platform: "virga_test"},
	"mymodel": {Name: "mymodel", Platform: "virga_test",
		Inputs:  []serve.TensorSpec{{Name: "input0", Datatype: serve.Uint32, Shape: []int64{2, 2}}, {Name: "input1", Datatype: serve.Bool, Shape: []int64{-1}}},
		Outputs: []serve.TensorSpec{{Name: "output0", Datatype: serve.FP32, Shape: []int64{-1, 2}}}},
	"broken": {Name: "broken", Platform: "virga_test"},
	"busy":   {Name: "busy", Platform: "virga_test"},
}

func (s *testService) Live() bool  { return true }
func (s *testService) Ready() bool { return true }
func (s *testService) Metadata() serve.ServerMetadata {
	return serve.ServerMetadata{Name: "virga", Version: "test", Extensions: []string{"model_repository"}}
}

func (s *testService) ModelMetadata(ctx context.Context, name, version string) (*serve.ModelMetadata, error) {
	md, ok := testModels[name]
	if !ok || version != "" && !slices.Contains(md.Versions, version) {
		return nil, serve.ErrModelNotFound
	}
	return &md, nil
}

func (s *testService) ModelReady(ctx context.Context, name, version string) (bool, error) {
	if _, err := s.ModelMetadata(ctx, name, version); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loaded[name], nil
}

func (s *testService) Infer(ctx context.Context, r *serve.Request) (*serve.Response, error) {
	md, err := s.ModelMetadata(ctx, r.Model, r.Version)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.last = r
	s.mu.Unlock()
	resp := &serve.Response{ModelName: r.Model, ModelVersion: r.Version}
	switch r.Model {
	case "broken":
		return nil, serve.ErrUnavailable
	case "busy":
		return nil, &serve.RefusedError{Reason: "QueueFull", Msg: "the model's queue is full"}
	case "identity":
		resp.Outputs = r.Inputs
	case "sum":
		x, err := input(r, md, 0)
		if err != nil {
			return nil, err
		}
		v := x.Data.([]float32)
		rows := x.Shape[0]
		sums, double := make([]float64, rows), make([]float32, len(v))
		for i, f := range v {
			sums[i/4] += float64(f)
			double[i] = 2 * f
		}
		resp.Outputs = []serve.Tensor{
			{Name: "sum", Datatype: serve.FP64, Shape: []int64{rows}, Data: sums},
			{Name: "double", Datatype: serve.FP32, Shape: []int64{rows, 4}, Data: double},
		}
	case "mymodel":
		if _, err := input(r, md, 0); err != nil {
			return nil, err
		}
		in1, err := input(r, md, 1)
		if err != nil {
			return nil, err
		}
		n := in1.Shape[0]
		out := make([]float32, 0, 2*n)
		for i := range n {
			out = append(out, float32(i+1), float32(i+1)+0.1)
		}
		resp.Outputs = []serve.Tensor{{Name: "output0", Datatype: serve.FP32, Shape: []int64{n, 2}, Data: out}}
	}
	if len(r.Outputs) > 0 {
		var kept []serve.Tensor
		for _, name := range r.Outputs {
			i := slices.IndexFunc(resp.Outputs, func(t serve.Tensor) bool { return t.Name == name })
			if i < 0 {
				return nil, serve.Inputf("outputs", "model %q has no output %q", r.Model, name)
			}
			kept = append(kept, resp.Outputs[i])
		}
		resp.Outputs = kept
	}
	return resp, nil
}

// input finds the model's i-th input in the request and checks its
// datatype and shape against the model's signature.
func input(r *serve.Request, md *serve.ModelMetadata, i int) (*serve.Tensor, error) {
	spec := md.Inputs[i]
	for j := range r.Inputs {
		t := &r.Inputs[j]
		if t.Name != spec.Name {
			continue
		}
		if t.Datatype != spec.Datatype {
			return nil, serve.Inputf("inputs", "input %q is %s, the model takes %s", t.Name, spec.Datatype, t.Datatype)
		}
		if len(t.Shape) != len(spec.Shape) {
			return nil, serve.Inputf("inputs", "input %q has shape %v, the model takes %v", t.Name, t.Shape, spec.Shape)
		}
		for k, d := range spec.Shape {
			if d >= 0 && t.Shape[k] != d {
				return nil, serve.Inputf("inputs", "input %q has shape %v, the model takes %v", t.Name, t.Shape, spec.Shape)
			}
		}
		return t, nil
	}
	return nil, serve.Inputf("inputs", "missing input %q", spec.Name)
}

func (s *testService) Index(ctx context.Context, readyOnly bool) ([]serve.ModelStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []serve.ModelStatus
	for _, name := range slices.Sorted(maps.Keys(testModels)) {
		st := serve.ModelStatus{Name: name, State: "READY"}
		if !s.loaded[name] {
			if readyOnly {
				continue
			}
			st.State, st.Reason = "UNAVAILABLE", "unloaded"
		}
		out = append(out, st)
	}
	return out, nil
}

func (s *testService) Load(ctx context.Context, name string) error {
	if _, ok := testModels[name]; !ok {
		return serve.ErrModelNotFound
	}
	if name == "broken" {
		return serve.ErrUnavailable
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loaded[name] = true
	return nil
}

func (s *testService) Unload(ctx context.Context, name string) error {
	if _, ok := testModels[name]; !ok {
		return serve.ErrModelNotFound
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loaded[name] = false
	return nil
}

func (s *testService) lastRequest() *serve.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}
