package oip

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/virga-ml/virga/internal/serve"
	pb "github.com/virga-ml/virga/internal/serve/oip/inferencepb"
)

// SharedMemory holds the system shared-memory regions clients registered
// (Triton's system shared memory extension): a process on the same machine
// puts a request's input tensors in a POSIX shared-memory object
// (shm_open, a file under /dev/shm), registers the object, or a part of
// it, as a named region, and names the region in the input's parameters
// instead of sending the data; outputs can be written into a region the
// same way. The tensors then cross no socket: the request carries only
// names, shapes and offsets.
//
// The data is copied out of a region when the request is decoded, and into
// one when the answer is written, with the copying goroutine set to panic
// on a memory fault: a client that shrinks its object under a registered
// region costs its own request (a 400), never the server. Regions are
// mapped once, at registration; unregistering one waits for no request,
// its mapping is released when the last copy from it ends.
//
// One SharedMemory is shared by the REST and gRPC front ends of a server
// (Options.SharedMemory), as a region registered over one is used over the
// other. Its methods are safe for concurrent use.
type SharedMemory struct {
	dir string

	mu      sync.Mutex
	regions map[string]*shmRegion
}

// NewSharedMemory returns an empty set of regions whose keys name objects
// under /dev/shm, where shm_open creates them on Linux.
func NewSharedMemory() *SharedMemory { return newSharedMemory("/dev/shm") }

func newSharedMemory(dir string) *SharedMemory {
	return &SharedMemory{dir: dir, regions: make(map[string]*shmRegion)}
}

// RegionStatus is one registered region, as the extension's status lists it.
type RegionStatus struct {
	Name     string `json:"name"`
	Key      string `json:"key"`
	Offset   uint64 `json:"offset"`
	ByteSize uint64 `json:"byte_size"`
}

type shmRegion struct {
	RegionStatus
	mapping []byte // the whole mapping, from a page boundary
	data    []byte // the region: ByteSize bytes at Offset of the object
	refs    int    // copies under way; guarded by SharedMemory.mu
	gone    bool   // unregistered; unmapped when refs reaches 0
}

// maxShmKey bounds a key's length (NAME_MAX).
const maxShmKey = 255

// Register maps byteSize bytes at offset of the shared-memory object key
// (shm_open's name: "/name" or "name") as the region name. The object must
// exist, be a regular file at least offset+byteSize long, and be readable
// and writable by the server. Every error is a *serve.InputError naming
// the field at fault.
func (s *SharedMemory) Register(name, key string, offset, byteSize uint64) error {
	if name == "" {
		return serve.Inputf("name", "missing: want the region's name")
	}
	k := strings.TrimPrefix(key, "/")
	if k == "" || k == "." || k == ".." || strings.ContainsAny(k, "/\x00") || len(k) > maxShmKey {
		return serve.Inputf("key", "%q is not a shared-memory object's name: want \"/name\" as given to shm_open (one path element, no other '/')", key)
	}
	if byteSize == 0 {
		return serve.Inputf("byte_size", "0: want the region's size in bytes")
	}
	if offset > 1<<62 || byteSize > 1<<62 {
		return serve.Inputf("byte_size", "offset %d and byte_size %d are beyond any object", offset, byteSize)
	}
	s.mu.Lock()
	_, taken := s.regions[name]
	s.mu.Unlock()
	if taken {
		return serve.Inputf("name", "a region named %q is registered already (unregister it first)", name)
	}
	path := filepath.Join(s.dir, k)
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, syscall.ELOOP) {
		// O_NOFOLLOW refuses a symbolic link with ELOOP, whose message
		// ("too many levels of symbolic links") would mislead.
		return serve.Inputf("key", "%q (%s) is a symbolic link: name the shared-memory object itself", key, path)
	}
	if err != nil {
		return serve.Inputf("key", "opening the shared-memory object %q (%s): %v", key, path, unwrapPath(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return serve.Inputf("key", "%q: %v", key, err)
	}
	if !fi.Mode().IsRegular() {
		return serve.Inputf("key", "%q (%s) is not a shared-memory object (%s)", key, path, fi.Mode().Type())
	}
	if end := offset + byteSize; uint64(fi.Size()) < end {
		return serve.Inputf("byte_size", "offset %d + byte_size %d = %d is past the end of %q, %d bytes long", offset, byteSize, end, key, fi.Size())
	}
	page := uint64(os.Getpagesize())
	start := offset / page * page
	length := offset + byteSize - start
	if length > uint64(int(^uint(0)>>1)) {
		return serve.Inputf("byte_size", "%d bytes cannot be mapped by this server", byteSize)
	}
	m, err := syscall.Mmap(int(f.Fd()), int64(start), int(length), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mapping the shared-memory object %q: %w", key, err)
	}
	r := &shmRegion{
		RegionStatus: RegionStatus{Name: name, Key: key, Offset: offset, ByteSize: byteSize},
		mapping:      m,
		data:         m[offset-start:],
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, taken := s.regions[name]; taken { // registered meanwhile
		_ = syscall.Munmap(m)
		return serve.Inputf("name", "a region named %q is registered already (unregister it first)", name)
	}
	s.regions[name] = r
	return nil
}

// localPeer returns why a client at addr (a connection's remote address)
// may not register regions, or nil: only processes on this machine can put
// data in its shared memory, and a client elsewhere, token or not, must not
// make the server read or write this machine's objects.
func localPeer(addr string) error {
	if addr == "" || addr == "@" || strings.HasPrefix(addr, "/") { // a Unix socket
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("shared memory is for clients on this machine: a region cannot be registered from %s (connect over loopback)", addr)
}

// unwrapPath drops the *PathError's repetition of the path.
func unwrapPath(err error) error {
	if pe, ok := errors.AsType[*os.PathError](err); ok {
		return pe.Err
	}
	return err
}

// Unregister removes the region name, or every region when name is "". A
// name not registered is not an error (unregistering is idempotent).
func (s *SharedMemory) Unregister(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, r := range s.regions {
		if name == "" || n == name {
			delete(s.regions, n)
			r.gone = true
			if r.refs == 0 {
				_ = syscall.Munmap(r.mapping)
			}
		}
	}
}

// Close unregisters every region.
func (s *SharedMemory) Close() { s.Unregister("") }

// Status lists the region name, or every region (sorted by name) when name
// is ""; an unknown name is a *serve.InputError.
func (s *SharedMemory) Status(name string) ([]RegionStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if name != "" {
		r, ok := s.regions[name]
		if !ok {
			return nil, serve.Inputf("name", "no shared-memory region named %q is registered", name)
		}
		return []RegionStatus{r.RegionStatus}, nil
	}
	out := make([]RegionStatus, 0, len(s.regions))
	for _, r := range s.regions {
		out = append(out, r.RegionStatus)
	}
	slices.SortFunc(out, func(a, b RegionStatus) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// acquire returns the region name, held until release.
func (s *SharedMemory) acquire(field, name string) (*shmRegion, error) {
	if s == nil {
		return nil, serve.Inputf(field, "shared memory is not served here")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.regions[name]
	if !ok {
		return nil, serve.Inputf(field, "no shared-memory region named %q is registered (register it with POST v2/systemsharedmemory/region/%s/register)", name, name)
	}
	r.refs++
	return r, nil
}

func (s *SharedMemory) release(r *shmRegion) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.refs--; r.refs == 0 && r.gone {
		_ = syscall.Munmap(r.mapping)
	}
}

// shmRef is a tensor's place in a region: the parameters
// shared_memory_region, shared_memory_offset and shared_memory_byte_size.
type shmRef struct {
	region   string
	offset   uint64
	byteSize uint64
}

// sharedMemoryRef reads a tensor's shared-memory parameters (field is the
// tensor's "parameters" field); ok is false when it names no region.
func sharedMemoryRef(field string, params map[string]param) (ref shmRef, ok bool, err error) {
	p, ok := params["shared_memory_region"]
	if !ok {
		for _, k := range []string{"shared_memory_byte_size", "shared_memory_offset"} {
			if _, has := params[k]; has {
				return ref, false, serve.Inputf(field+"."+k, "given without shared_memory_region")
			}
		}
		return ref, false, nil
	}
	if p.kind != kindString || p.s == "" {
		return ref, false, serve.Inputf(field+".shared_memory_region", "want a registered region's name, got %s", p)
	}
	ref.region = p.s
	size, has := params["shared_memory_byte_size"]
	if !has {
		return ref, false, serve.Inputf(field+".shared_memory_byte_size", "missing: want the tensor's size in bytes in region %q", p.s)
	}
	if ref.byteSize, err = size.nonNegInt(field+".shared_memory_byte_size", 1<<62); err != nil {
		return ref, false, err
	}
	if off, has := params["shared_memory_offset"]; has {
		if ref.offset, err = off.nonNegInt(field+".shared_memory_offset", 1<<62); err != nil {
			return ref, false, err
		}
	}
	return ref, true, nil
}

// check returns why ref does not fit in its region, or nil.
func (ref shmRef) check(field string, r *shmRegion) error {
	if ref.offset+ref.byteSize > r.ByteSize {
		return serve.Inputf(field, "shared_memory_offset %d + shared_memory_byte_size %d is past the end of region %q (%d bytes)", ref.offset, ref.byteSize, ref.region, r.ByteSize)
	}
	return nil
}

// checkRef returns why ref names no registered region or does not fit in
// it, or nil (field is the tensor's "parameters" field).
func (s *SharedMemory) checkRef(field string, ref shmRef) error {
	r, err := s.acquire(field+".shared_memory_region", ref.region)
	if err != nil {
		return err
	}
	defer s.release(r)
	return ref.check(field, r)
}

// read decodes the tensor at ref: n elements of dt with the given shape.
// The tensor's data is buf's memory: the caller gives buf back with
// putShmBuf once the engine reads the tensor no more.
func (s *SharedMemory) read(field string, ref shmRef, dt serve.Datatype, shape []int64, n int) (_ any, buf *[]byte, _ error) {
	r, err := s.acquire(field+".parameters.shared_memory_region", ref.region)
	if err != nil {
		return nil, nil, err
	}
	defer s.release(r)
	if err := ref.check(field+".parameters", r); err != nil {
		return nil, nil, err
	}
	if size := elemSize(dt); size > 0 && uint64(n)*uint64(size) != ref.byteSize {
		return nil, nil, serve.Inputf(field+".parameters.shared_memory_byte_size", "%d bytes for shape %s of %s (%d expected: %d values of %d bytes)", ref.byteSize, shapeString(shape), dt, n*size, n, size)
	}
	buf = getShmBuf(int(ref.byteSize))
	if err := faultSafeCopy(*buf, r.data[ref.offset:ref.offset+ref.byteSize]); err != nil {
		putShmBuf(buf)
		return nil, nil, serve.Inputf(field+".parameters.shared_memory_region", "reading region %q (%s): %v", ref.region, r.Key, err)
	}
	data, err := decodeRaw(field+" (shared memory region "+ref.region+")", dt, shape, n, *buf)
	if err != nil {
		putShmBuf(buf)
		return nil, nil, err
	}
	return data, buf, nil
}

// shmBufs keeps the buffers inputs are copied into out of their regions:
// a request's tensor is its buffer (decodeRaw keeps an aligned buffer as
// the tensor), given back once the Service's Infer has returned.
var shmBufs sync.Pool

// getShmBuf returns a buffer of n bytes, 8-aligned (a Go allocation of 8
// bytes or more is), not cleared: the copy fills it.
func getShmBuf(n int) *[]byte {
	if b, ok := shmBufs.Get().(*[]byte); ok && cap(*b) >= n {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, max(n, 8))
	return &b
}

// putShmBuf keeps b for another request unless it is larger than most
// need, so that one large request does not pin its memory.
func putShmBuf(b *[]byte) {
	if b != nil && cap(*b) <= 16<<20 {
		shmBufs.Put(b)
	}
}

// putShmBufs gives back the buffers of a request's inputs read from regions.
func putShmBufs(bufs []*[]byte) {
	for _, b := range bufs {
		putShmBuf(b)
	}
}

// write puts a tensor's raw layout at ref.
func (s *SharedMemory) write(field string, ref shmRef, raw []byte) error {
	r, err := s.acquire(field+".parameters.shared_memory_region", ref.region)
	if err != nil {
		return err
	}
	defer s.release(r)
	if err := ref.check(field+".parameters", r); err != nil {
		return err
	}
	if uint64(len(raw)) > ref.byteSize {
		return serve.Inputf(field+".parameters.shared_memory_byte_size", "%d: the output takes %d bytes", ref.byteSize, len(raw))
	}
	if err := faultSafeCopy(r.data[ref.offset:ref.offset+uint64(len(raw))], raw); err != nil {
		return serve.Inputf(field+".parameters.shared_memory_region", "writing region %q (%s): %v", ref.region, r.Key, err)
	}
	return nil
}

// faultSafeCopy copies src to dst, one of them shared memory: a fault (the
// object was truncated under its mapping: SIGBUS) is returned as an error
// rather than crashing the process.
func faultSafeCopy(dst, src []byte) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			if re, ok := p.(interface{ Addr() uintptr }); ok {
				err = fmt.Errorf("memory fault at %#x: the object is shorter than when it was registered", re.Addr())
				return
			}
			panic(p)
		}
	}()
	copy(dst, src)
	return nil
}

// writeSharedOutputs writes the outputs refs names into their regions;
// requested lists the outputs in the request's order, to name the field.
func writeSharedOutputs(s *SharedMemory, resp *serve.Response, refs map[string]shmRef, requested []string) error {
	if len(refs) == 0 {
		return nil
	}
	for i := range resp.Outputs {
		t := &resp.Outputs[i]
		ref, ok := refs[t.Name]
		if !ok {
			continue
		}
		field := "outputs[" + strconv.Itoa(slices.Index(requested, t.Name)) + "]"
		if err := s.write(field, ref, rawBytes(t.Datatype, t.Data)); err != nil {
			return err
		}
	}
	return nil
}

// rawBytes is a tensor's raw layout: its own memory for numbers on a
// little-endian host, else a copy laid out by encodeRaw.
func rawBytes(dt serve.Datatype, data any) []byte {
	if littleEndian {
		switch v := data.(type) {
		case []uint16:
			return asBytes(v)
		case []int16:
			return asBytes(v)
		case []uint32:
			return asBytes(v)
		case []int32:
			return asBytes(v)
		case []float32:
			return asBytes(v)
		case []uint64:
			return asBytes(v)
		case []int64:
			return asBytes(v)
		case []float64:
			return asBytes(v)
		}
	}
	return encodeRaw(dt, data)
}

// The full names of the shared-memory methods Virga adds to the service.
const (
	methodShmStatus     = "/inference.GRPCInferenceService/SystemSharedMemoryStatus"
	methodShmRegister   = "/inference.GRPCInferenceService/SystemSharedMemoryRegister"
	methodShmUnregister = "/inference.GRPCInferenceService/SystemSharedMemoryUnregister"
)

// SystemSharedMemoryStatus implements Triton's SystemSharedMemoryStatus:
// an unknown name is NotFound.
func (g *GRPCService) SystemSharedMemoryStatus(ctx context.Context, r *pb.SystemSharedMemoryStatusRequest) (*pb.SystemSharedMemoryStatusResponse, error) {
	st, err := g.opts.SharedMemory.Status(r.GetName())
	if err != nil {
		return nil, status.Error(codes.NotFound, err.Error())
	}
	out := &pb.SystemSharedMemoryStatusResponse{Regions: make(map[string]*pb.SystemSharedMemoryStatusResponse_RegionStatus, len(st))}
	for _, x := range st {
		out.Regions[x.Name] = &pb.SystemSharedMemoryStatusResponse_RegionStatus{Name: x.Name, Key: x.Key, Offset: x.Offset, ByteSize: x.ByteSize}
	}
	return out, nil
}

// SystemSharedMemoryRegister implements Triton's SystemSharedMemoryRegister.
func (g *GRPCService) SystemSharedMemoryRegister(ctx context.Context, r *pb.SystemSharedMemoryRegisterRequest) (*pb.SystemSharedMemoryRegisterResponse, error) {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		if err := localPeer(p.Addr.String()); err != nil {
			return nil, status.Error(codes.PermissionDenied, err.Error())
		}
	}
	if err := g.opts.SharedMemory.Register(r.GetName(), r.GetKey(), r.GetOffset(), r.GetByteSize()); err != nil {
		return nil, grpcError(err)
	}
	return &pb.SystemSharedMemoryRegisterResponse{}, nil
}

// SystemSharedMemoryUnregister implements Triton's
// SystemSharedMemoryUnregister: an empty name unregisters every region.
func (g *GRPCService) SystemSharedMemoryUnregister(ctx context.Context, r *pb.SystemSharedMemoryUnregisterRequest) (*pb.SystemSharedMemoryUnregisterResponse, error) {
	g.opts.SharedMemory.Unregister(r.GetName())
	return &pb.SystemSharedMemoryUnregisterResponse{}, nil
}
