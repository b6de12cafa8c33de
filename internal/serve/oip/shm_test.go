package oip

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
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
		{"missing object", "r", `{"key":"/nothing","byte_size":8}`, `key: opening the shared-memory object \"/nothing\"`},
		{"symlink", "r", `{"key":"/link","byte_size":8}`, `key: opening the shared-memory object \"/link\"`},
		{"directory", "r", `{"key":"/sub","byte_size":8}`, `key: opening the shared-memory object \"/sub\"`},
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
