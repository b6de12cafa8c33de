package main

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/virga-ml/virga/internal/serve"
	pb "github.com/virga-ml/virga/internal/serve/oip/inferencepb"
)

// shmSet is the overhead bench's shared-memory object in /dev/shm: the
// input rows as region "in", then one region "out-k" per client k holding
// every output of maxRows rows. free hands out the client slots.
type shmSet struct {
	path    string
	outputs []serve.TensorSpec
	outSize int // bytes of one slot's outputs at maxRows
	free    chan int
}

// shmRegions creates the object, fills the input rows and registers the
// regions over REST at base.
func shmRegions(c *http.Client, base string, maxRows, slots int, outputs []serve.TensorSpec, rng *rand.Rand) (*shmSet, error) {
	s := &shmSet{outputs: outputs, free: make(chan int, slots)}
	for _, o := range outputs {
		s.outSize += maxRows * rowBytes(o)
	}
	key := fmt.Sprintf("virga-overhead-%d", os.Getpid())
	s.path = filepath.Join("/dev/shm", key)
	in := rawFloats(pixelRows(rng, maxRows).Data.([]float32))
	data := make([]byte, len(in)+slots*s.outSize)
	copy(data, in)
	if err := os.WriteFile(s.path, data, 0o600); err != nil {
		return nil, fmt.Errorf("shared memory: %w", err)
	}
	register := func(name string, off, size int) error {
		body := fmt.Sprintf(`{"key":"/%s","offset":%d,"byte_size":%d}`, key, off, size)
		resp, err := c.Post(base+"/v2/systemsharedmemory/region/"+name+"/register", "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("registering region %s: %s: %s", name, resp.Status, bytes.TrimSpace(b))
		}
		return nil
	}
	if err := register("in", 0, len(in)); err != nil {
		s.remove()
		return nil, err
	}
	for k := range slots {
		if err := register(fmt.Sprintf("out-%d", k), len(in)+k*s.outSize, s.outSize); err != nil {
			s.remove()
			return nil, err
		}
		s.free <- k
	}
	return s, nil
}

// rowBytes is one row's bytes of an output whose shape is [-1, ...].
func rowBytes(o serve.TensorSpec) int {
	n := 4
	switch o.Datatype {
	case serve.FP64, serve.Int64, serve.Uint64:
		n = 8
	case serve.FP16, serve.Int16, serve.Uint16:
		n = 2
	case serve.Int8, serve.Uint8, serve.Bool:
		n = 1
	}
	for _, d := range o.Shape[1:] {
		n *= int(d)
	}
	return n
}

func (s *shmSet) remove() { os.Remove(s.path) }

// outputsJSON is the outputs of a REST request of rows rows, into slot k.
func (s *shmSet) outputsJSON(k, rows int) string {
	var b strings.Builder
	off := 0
	for i, o := range s.outputs {
		if i > 0 {
			b.WriteByte(',')
		}
		size := rows * rowBytes(o)
		fmt.Fprintf(&b, `{"name":%q,"parameters":{"shared_memory_region":"out-%d","shared_memory_offset":%d,"shared_memory_byte_size":%d}}`, o.Name, k, off, size)
		off += size
	}
	return b.String()
}

// outputsGRPC is outputsJSON for gRPC.
func (s *shmSet) outputsGRPC(k, rows int) []*pb.ModelInferRequest_InferRequestedOutputTensor {
	var out []*pb.ModelInferRequest_InferRequestedOutputTensor
	off := 0
	for _, o := range s.outputs {
		size := rows * rowBytes(o)
		out = append(out, &pb.ModelInferRequest_InferRequestedOutputTensor{Name: o.Name, Parameters: shmParams(fmt.Sprintf("out-%d", k), off, size)})
		off += size
	}
	return out
}

// shmParams are a tensor's parameters naming its place in a region.
func shmParams(region string, off, size int) map[string]*pb.InferParameter {
	return map[string]*pb.InferParameter{
		"shared_memory_region":    {ParameterChoice: &pb.InferParameter_StringParam{StringParam: region}},
		"shared_memory_offset":    {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: int64(off)}},
		"shared_memory_byte_size": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: int64(size)}},
	}
}
