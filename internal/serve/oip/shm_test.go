package oip

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/virga-ml/virga/internal/serve/oip/inferencepb"
)

// shmObject creates a shared-memory object of size bytes under dir, as
// shm_open and ftruncate would, and returns its key and path.
func shmObject(t *testing.T, dir, name string, size int) (key, path string) {
	t.Helper()
	path = filepath.Join(dir, name)
	if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	return "/" + name, path
}

func putFloats32(t *testing.T, path string, off int64, v ...float32) {
	t.Helper()
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// The extension's example as a Triton client uses it: the input in one
// region at an offset, one output written into another, the other output
// answered in the body; registering, status and unregistering over REST.
func TestSharedMemoryInfer(t *testing.T) {
	dir := t.TempDir()
	e := newRESTEnv(t, Options{SharedMemory: newSharedMemory(dir)})
	inKey, inPath := shmObject(t, dir, "input_data", 64)
	outKey, outPath := shmObject(t, dir, "output_data", 4096)
	putFloats32(t, inPath, 16, 1, 2, 3, 4, 10, 20, 30, 40)

	for _, c := range []struct{ path, body string }{
		{"/v2/systemsharedmemory/region/in/register", `{"key":"` + inKey + `","offset":0,"byte_size":64}`},
		{"/v2/systemsharedmemory/region/out/register", `{"key":"` + outKey + `","offset":1024,"byte_size":1024}`},
	} {
		if code, _, b := e.do("POST", c.path, c.body); code != 200 {
			t.Fatalf("%s: %d %s", c.path, code, b)
		}
	}
	code, _, b := e.do("GET", "/v2/systemsharedmemory/status", "")
	if code != 200 {
		t.Fatalf("status: %d %s", code, b)
	}
	jsonEqual(t, b, `[{"name":"in","key":"/input_data","offset":0,"byte_size":64},{"name":"out","key":"/output_data","offset":1024,"byte_size":1024}]`)

	req := `{"inputs":[{"name":"x","shape":[2,4],"datatype":"FP32","parameters":{"shared_memory_region":"in","shared_memory_offset":16,"shared_memory_byte_size":32}}],
	  "outputs":[{"name":"sum","parameters":{"shared_memory_region":"out","shared_memory_offset":8,"shared_memory_byte_size":16}},{"name":"double"}]}`
	code, _, b = e.do("POST", "/v2/models/sum/infer", req)
	if code != 200 {
		t.Fatalf("infer: %d %s", code, b)
	}
	jsonEqual(t, b, `{"model_name":"sum","outputs":[
	  {"name":"sum","datatype":"FP64","shape":[2],"parameters":{"shared_memory_region":"out","shared_memory_byte_size":16,"shared_memory_offset":8}},
	  {"name":"double","datatype":"FP32","shape":[2,4],"data":[2,4,6,8,20,40,60,80]}]}`)
	out, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []float64{10, 100} {
		if got := math.Float64frombits(binary.LittleEndian.Uint64(out[1024+8+8*i:])); got != want {
			t.Errorf("sum[%d] in the output region: %v, want %v", i, got, want)
		}
	}
	if got := binary.LittleEndian.Uint64(out[1024:]); got != 0 {
		t.Errorf("the bytes before the output's offset were written: %x", got)
	}

	if code, _, b := e.do("POST", "/v2/systemsharedmemory/region/in/unregister", ""); code != 200 {
		t.Fatalf("unregister: %d %s", code, b)
	}
	if code, _, b := e.do("GET", "/v2/systemsharedmemory/region/in/status", ""); code != 404 || !strings.Contains(string(b), `no shared-memory region named \"in\"`) {
		t.Errorf("status of an unregistered region: %d %s", code, b)
	}
	if code, _, b := e.do("POST", "/v2/models/sum/infer", req); code != 400 || !strings.Contains(string(b), `inputs[0].parameters.shared_memory_region: no shared-memory region named \"in\" is registered`) {
		t.Errorf("infer from an unregistered region: %d %s", code, b)
	}
	if code, _, b := e.do("POST", "/v2/systemsharedmemory/unregister", ""); code != 200 {
		t.Fatalf("unregister all: %d %s", code, b)
	}
	if code, _, b := e.do("GET", "/v2/systemsharedmemory/status", ""); code != 200 || strings.TrimSpace(string(b)) != "[]" {
		t.Errorf("status after unregistering all: %d %s", code, b)
	}
}

func TestSharedMemoryErrors(t *testing.T) {
	dir := t.TempDir()
	e := newRESTEnv(t, Options{SharedMemory: newSharedMemory(dir)})
	key, _ := shmObject(t, dir, "obj", 64)
	if err := os.Symlink(filepath.Join(dir, "obj"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	register := func(name, body string) (int, string) {
		code, _, b := e.do("POST", "/v2/systemsharedmemory/region/"+name+"/register", body)
		return code, string(b)
	}
	for _, c := range []struct {
		name, region, body string
		want               string
	}{
		{"no key", "r", `{"byte_size":8}`, `key: \"\" is not a shared-memory object's name`},
		{"key with a path", "r", `{"key":"/../etc/passwd","byte_size":8}`, `key: \"/../etc/passwd\" is not a shared-memory object's name`},
		{"missing object", "r", `{"key":"/nothing","byte_size":8}`, `key: opening the shared-memory object \"/nothing\" (` + filepath.Join(dir, "nothing") + `): no such file or directory`},
		{"symlink", "r", `{"key":"/link","byte_size":8}`, `key: \"/link\" (` + filepath.Join(dir, "link") + `) is a symbolic link: name the shared-memory object itself`},
		{"directory", "r", `{"key":"/sub","byte_size":8}`, `key: opening the shared-memory object \"/sub\" (` + filepath.Join(dir, "sub") + `): is a directory`},
		{"zero size", "r", `{"key":"` + key + `","byte_size":0}`, `byte_size: 0: want the region's size in bytes`},
		{"past the end", "r", `{"key":"` + key + `","offset":60,"byte_size":8}`, `byte_size: offset 60 + byte_size 8 = 68 is past the end of \"/obj\", 64 bytes long`},
		{"unknown field", "r", `{"key":"` + key + `","byte_size":8,"size":8}`, `size`},
	} {
		if code, b := register(c.region, c.body); code != 400 || !strings.Contains(b, c.want) {
			t.Errorf("%s: %d %s, want 400 with %q", c.name, code, b, c.want)
		}
	}
	if code, b := register("r", `{"key":"`+key+`","offset":8,"byte_size":40}`); code != 200 {
		t.Fatalf("register: %d %s", code, b)
	}
	if code, b := register("r", `{"key":"`+key+`","byte_size":8}`); code != 400 || !strings.Contains(b, `name: a region named \"r\" is registered already`) {
		t.Errorf("second registration of a name: %d %s", code, b)
	}

	in := func(params string) string {
		return `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","parameters":{` + params + `}}]}`
	}
	for _, c := range []struct{ name, body, want string }{
		{"no size", in(`"shared_memory_region":"r"`), `inputs[0].parameters.shared_memory_byte_size: missing`},
		{"size without region", in(`"shared_memory_byte_size":16`), `inputs[0].parameters.shared_memory_byte_size: given without shared_memory_region`},
		{"region not a string", in(`"shared_memory_region":3,"shared_memory_byte_size":16`), `inputs[0].parameters.shared_memory_region: want a registered region's name, got 3`},
		{"wrong size", in(`"shared_memory_region":"r","shared_memory_byte_size":12`), `inputs[0].parameters.shared_memory_byte_size: 12 bytes for shape [1,4] of FP32 (16 expected`},
		{"past the region", in(`"shared_memory_region":"r","shared_memory_byte_size":16,"shared_memory_offset":32`), `inputs[0].parameters: shared_memory_offset 32 + shared_memory_byte_size 16 is past the end of region \"r\" (40 bytes)`},
		{"data too", `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4],"parameters":{"shared_memory_region":"r","shared_memory_byte_size":16}}]}`, `inputs[0].data: given with shared_memory_region`},
		{"output region unknown", `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}],"outputs":[{"name":"sum","parameters":{"shared_memory_region":"nope","shared_memory_byte_size":8}}]}`, `outputs[0].parameters.shared_memory_region: no shared-memory region named \"nope\"`},
		{"output too small", `{"inputs":[{"name":"x","shape":[2,4],"datatype":"FP32","data":[1,2,3,4,5,6,7,8]}],"outputs":[{"name":"sum","parameters":{"shared_memory_region":"r","shared_memory_byte_size":8}}]}`, `outputs[0].parameters.shared_memory_byte_size: 8: the output takes 16 bytes`},
	} {
		code, _, b := e.do("POST", "/v2/models/sum/infer", c.body)
		if code != 400 || !strings.Contains(string(b), c.want) {
			t.Errorf("%s: %d %s, want 400 with %q", c.name, code, b, c.want)
		}
	}
}

// A client that truncates its object under a registered region gets a 400
// for its request; the server goes on serving.
func TestSharedMemoryTruncatedObject(t *testing.T) {
	dir := t.TempDir()
	e := newRESTEnv(t, Options{SharedMemory: newSharedMemory(dir)})
	size := 4 * os.Getpagesize()
	key, path := shmObject(t, dir, "shrinks", size)
	if code, _, b := e.do("POST", "/v2/systemsharedmemory/region/r/register", fmt.Sprintf(`{"key":%q,"byte_size":%d}`, key, size)); code != 200 {
		t.Fatalf("register: %d %s", code, b)
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	off := size - 16
	body := fmt.Sprintf(`{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","parameters":{"shared_memory_region":"r","shared_memory_byte_size":16,"shared_memory_offset":%d}}]}`, off)
	code, _, b := e.do("POST", "/v2/models/sum/infer", body)
	if code != 400 || !strings.Contains(string(b), "the object is shorter than when it was registered") {
		t.Errorf("reading a truncated object: %d %s", code, b)
	}
	out := fmt.Sprintf(`{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}],"outputs":[{"name":"sum","parameters":{"shared_memory_region":"r","shared_memory_byte_size":8,"shared_memory_offset":%d}}]}`, off)
	code, _, b = e.do("POST", "/v2/models/sum/infer", out)
	if code != 400 || !strings.Contains(string(b), "the object is shorter than when it was registered") {
		t.Errorf("writing a truncated object: %d %s", code, b)
	}
	code, _, b = e.do("POST", "/v2/models/sum/infer", `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`)
	if code != 200 {
		t.Errorf("the server after the faults: %d %s", code, b)
	}
}

// Requests reading and writing regions while others register and
// unregister them (run under -race): no request sees an unmapped region.
func TestSharedMemoryConcurrentUnregister(t *testing.T) {
	dir := t.TempDir()
	shm := newSharedMemory(dir)
	e := newRESTEnv(t, Options{SharedMemory: shm})
	key, path := shmObject(t, dir, "obj", 4096)
	putFloats32(t, path, 0, 1, 2, 3, 4)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = shm.Register("r", key, 0, 4096)
			shm.Unregister("r")
		}
	})
	body := `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","parameters":{"shared_memory_region":"r","shared_memory_byte_size":16}}],
	  "outputs":[{"name":"sum","parameters":{"shared_memory_region":"r","shared_memory_byte_size":8,"shared_memory_offset":64}}]}`
	served := 0
	for range 300 {
		code, _, b := e.do("POST", "/v2/models/sum/infer", body)
		switch {
		case code == 200:
			var r struct {
				Outputs []struct {
					Parameters map[string]any `json:"parameters"`
				} `json:"outputs"`
			}
			if err := json.Unmarshal(b, &r); err != nil || len(r.Outputs) != 1 || r.Outputs[0].Parameters["shared_memory_byte_size"] != 8.0 {
				t.Fatalf("answer: %s", b)
			}
			served++
		case code == 400 && strings.Contains(string(b), "is registered"):
		default:
			t.Fatalf("%d %s", code, b)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d of 300 requests found the region registered", served)
}

func FuzzSharedMemoryRegister(f *testing.F) {
	f.Add("r", "/obj", uint64(0), uint64(8))
	f.Add("r", "/../obj", uint64(1<<63), uint64(1<<63))
	f.Add("", "obj", uint64(4095), uint64(1))
	dir := f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "obj"), make([]byte, 8192), 0o600); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, name, key string, offset, size uint64) {
		s := newSharedMemory(dir)
		defer s.Close()
		if err := s.Register(name, key, offset, size); err != nil {
			return
		}
		st, err := s.Status(name)
		if err != nil || len(st) != 1 || st[0].Offset+st[0].ByteSize > 8192 {
			t.Fatalf("registered %q %q %d %d: status %v, %v", name, key, offset, size, st, err)
		}
	})
}

// Over gRPC with Triton's methods: a region registered over REST is used
// over gRPC (one SharedMemory for both front ends); an input in shared
// memory beside one in raw_input_contents; an output into a region.
func TestSharedMemoryGRPC(t *testing.T) {
	dir := t.TempDir()
	shm := newSharedMemory(dir)
	rest := newRESTEnv(t, Options{SharedMemory: shm})
	e := newGRPCEnv(t, Options{SharedMemory: shm})
	ctx := ctxT(t)
	inKey, inPath := shmObject(t, dir, "in", 32)
	outKey, outPath := shmObject(t, dir, "out", 64)
	putFloats32(t, inPath, 0, 1, 2, 3, 4)
	if code, _, b := rest.do("POST", "/v2/systemsharedmemory/region/in/register", `{"key":"`+inKey+`","byte_size":32}`); code != 200 {
		t.Fatalf("REST register: %d %s", code, b)
	}
	if err := e.conn.Invoke(ctx, methodShmRegister, &pb.SystemSharedMemoryRegisterRequest{Name: "out", Key: outKey, ByteSize: 64}, &pb.SystemSharedMemoryRegisterResponse{}); err != nil {
		t.Fatal(err)
	}
	err := e.conn.Invoke(ctx, methodShmRegister, &pb.SystemSharedMemoryRegisterRequest{Name: "bad", Key: "/a/b", ByteSize: 8}, &pb.SystemSharedMemoryRegisterResponse{})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `key: "/a/b" is not a shared-memory object's name`) {
		t.Errorf("register a bad key: %v", err)
	}
	var st pb.SystemSharedMemoryStatusResponse
	if err := e.conn.Invoke(ctx, methodShmStatus, &pb.SystemSharedMemoryStatusRequest{}, &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Regions) != 2 || st.Regions["in"].GetKey() != "/in" || st.Regions["out"].GetByteSize() != 64 {
		t.Errorf("status: %v", &st)
	}

	region := func(name string, size int64) map[string]*pb.InferParameter {
		return map[string]*pb.InferParameter{
			"shared_memory_region":    {ParameterChoice: &pb.InferParameter_StringParam{StringParam: name}},
			"shared_memory_byte_size": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: size}},
		}
	}
	req := &pb.ModelInferRequest{ModelName: "identity",
		Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "a", Datatype: "FP32", Shape: []int64{4}, Parameters: region("in", 16)},
			{Name: "b", Datatype: "INT32", Shape: []int64{2}},
		},
		RawInputContents: [][]byte{{7, 0, 0, 0, 9, 0, 0, 0}},
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{
			{Name: "a", Parameters: region("out", 16)},
			{Name: "b"},
		},
	}
	resp, err := e.client.ModelInfer(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.RawOutputContents) != 2 || len(resp.RawOutputContents[0]) != 0 || binary.LittleEndian.Uint32(resp.RawOutputContents[1][4:]) != 9 {
		t.Errorf("raw outputs: %v", resp.RawOutputContents)
	}
	if p := resp.Outputs[0].GetParameters(); p["shared_memory_region"].GetStringParam() != "out" || p["shared_memory_byte_size"].GetInt64Param() != 16 {
		t.Errorf("output a's parameters: %v", p)
	}
	out, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []float32{1, 2, 3, 4} {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:])); got != want {
			t.Errorf("output a[%d] in its region: %v, want %v", i, got, want)
		}
	}

	req.RawInputContents = append(req.RawInputContents, []byte{1, 2, 3, 4})
	if _, err := e.client.ModelInfer(ctx, req); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "raw_input_contents: 2 entries for 1 inputs not in shared memory") {
		t.Errorf("a raw entry for an input in shared memory: %v", err)
	}
	if err := e.conn.Invoke(ctx, methodShmUnregister, &pb.SystemSharedMemoryUnregisterRequest{}, &pb.SystemSharedMemoryUnregisterResponse{}); err != nil {
		t.Fatal(err)
	}
	err = e.conn.Invoke(ctx, methodShmStatus, &pb.SystemSharedMemoryStatusRequest{Name: "in"}, &st)
	if status.Code(err) != codes.NotFound {
		t.Errorf("status of an unregistered region: %v", err)
	}
}

func TestSharedMemoryOnlyFromThisMachine(t *testing.T) {
	for _, c := range []struct {
		addr string
		ok   bool
	}{{"127.0.0.1:5000", true}, {"[::1]:80", true}, {"@", true}, {"", true}, {"10.1.2.3:5000", false}, {"[2001:db8::1]:443", false}} {
		if err := localPeer(c.addr); (err == nil) != c.ok {
			t.Errorf("localPeer(%q) = %v, want ok %v", c.addr, err, c.ok)
		}
	}
	// Over a real connection from off loopback (this machine's own address
	// other than 127.0.0.1, when it has one).
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var ext net.IP
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			ext = n.IP
			break
		}
	}
	if ext == nil {
		t.Log("no address off loopback on this machine: only the address check above ran")
		return
	}
	dir := t.TempDir()
	key, _ := shmObject(t, dir, "obj", 64)
	ln, err := net.Listen("tcp", net.JoinHostPort(ext.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: NewHandler(newTestService(), Options{SharedMemory: newSharedMemory(dir), CheckToken: func(context.Context, string) error { return nil }})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	req, _ := http.NewRequest("POST", "http://"+ln.Addr().String()+"/v2/systemsharedmemory/region/r/register", strings.NewReader(`{"key":"`+key+`","byte_size":8}`))
	req.Header.Set("Authorization", "Bearer x")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(b), "shared memory is for clients on this machine") {
		t.Errorf("register from %s: %d %s", ext, resp.StatusCode, b)
	}
}
