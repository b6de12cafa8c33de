// Package oip serves a serve.Service over the Open Inference Protocol
// (KServe v2): the REST/JSON endpoints of v2/..., Triton's model repository
// extension, and the gRPC service inference.GRPCInferenceService. It
// translates requests into serve.Request and errors into the protocol's
// statuses; it never runs a model, queues or batches: that is the Service's.
package oip

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/virga-ml/virga/internal/serve"
)

// DefaultMaxBody bounds a request body or message when Options.MaxBody is 0.
const DefaultMaxBody = 64 << 20

// Options configure the REST handler and the gRPC server.
type Options struct {
	// CheckToken, if set, makes every request but the server health checks
	// present a bearer token it accepts (nil error): REST in the
	// Authorization header, gRPC in the "authorization" metadata, both as
	// "Bearer <token>". Set it when listening off loopback, to the API
	// server's (*api.Server).CheckToken; leave it nil on loopback.
	CheckToken func(ctx context.Context, token string) error
	// MaxBody bounds a request body (REST; larger: 413) or received message
	// (gRPC; larger: ResourceExhausted); 0 means DefaultMaxBody.
	MaxBody int64
	// Now stamps each request's arrival; nil means time.Now.
	Now func() time.Time
	// SharedMemory holds the regions of the system shared memory
	// extension; give the REST and gRPC front ends of one server the same.
	// nil means a front end makes its own.
	SharedMemory *SharedMemory
}

func (o Options) withDefaults() Options {
	if o.MaxBody <= 0 {
		o.MaxBody = DefaultMaxBody
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.SharedMemory == nil {
		o.SharedMemory = NewSharedMemory()
	}
	return o
}

// Handler serves the protocol's REST endpoints.
type Handler struct {
	svc  serve.Service
	opts Options
	mux  *http.ServeMux
}

// NewHandler returns the REST front end of svc, to mount at the root of an
// HTTP server (its routes all begin with /v2).
func NewHandler(svc serve.Service, opts Options) *Handler {
	h := &Handler{svc: svc, opts: opts.withDefaults(), mux: http.NewServeMux()}
	m := h.mux
	m.HandleFunc("GET /v2/health/live", h.live)
	m.HandleFunc("GET /v2/health/ready", h.ready)
	m.HandleFunc("GET /v2", h.serverMetadata)
	m.HandleFunc("GET /v2/{$}", h.serverMetadata)
	m.HandleFunc("GET /v2/models/{model}", h.modelMetadata)
	m.HandleFunc("GET /v2/models/{model}/versions/{version}", h.modelMetadata)
	m.HandleFunc("GET /v2/models/{model}/ready", h.modelReady)
	m.HandleFunc("GET /v2/models/{model}/versions/{version}/ready", h.modelReady)
	m.HandleFunc("POST /v2/models/{model}/infer", h.infer)
	m.HandleFunc("POST /v2/models/{model}/versions/{version}/infer", h.infer)
	m.HandleFunc("POST /v2/repository/index", h.index)
	m.HandleFunc("POST /v2/repository/models/{model}/load", h.load)
	m.HandleFunc("POST /v2/repository/models/{model}/unload", h.unload)
	m.HandleFunc("GET /v2/systemsharedmemory/status", h.shmStatus)
	m.HandleFunc("GET /v2/systemsharedmemory/region/{region}/status", h.shmStatus)
	m.HandleFunc("POST /v2/systemsharedmemory/region/{region}/register", h.shmRegister)
	m.HandleFunc("POST /v2/systemsharedmemory/unregister", h.shmUnregister)
	m.HandleFunc("POST /v2/systemsharedmemory/region/{region}/unregister", h.shmUnregister)
	return h
}

// ServeHTTP checks the request's token (when Options.CheckToken is set) and routes it.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pattern := h.mux.Handler(r); pattern == "" {
		h.noRoute(w, r)
		return
	}
	if r.URL.Path != "/v2/health/live" && r.URL.Path != "/v2/health/ready" {
		if h.opts.CheckToken != nil {
			if err := h.authorize(r); err != nil {
				w.Header().Set("WWW-Authenticate", `Bearer realm="virga"`)
				writeError(w, http.StatusUnauthorized, err)
				return
			}
		} else if err := fromBrowser(r); err != nil {
			writeError(w, http.StatusForbidden, err)
			return
		}
	}
	h.mux.ServeHTTP(w, r)
}

// fromBrowser returns why a request to a server without tokens (on
// loopback) may come from a web page rather than a local process, or nil:
// browsers send an Origin header with every POST and cross-origin request,
// and a Host that is not a loopback name means DNS rebinding. Otherwise a
// page the user visits could load and unload models on this machine.
func fromBrowser(r *http.Request) error {
	if o := r.Header.Get("Origin"); o != "" {
		return fmt.Errorf("refusing a request from a web page (Origin %q): this server takes requests from local processes only", o)
	}
	if !loopbackHost(r.Host) {
		return fmt.Errorf("refusing a request for host %q: without tokens only localhost, 127.0.0.1 and [::1] are served", r.Host)
	}
	return nil
}

// loopbackHost reports whether a Host header names this machine.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// authorize returns why r's bearer token is not accepted, or nil.
func (h *Handler) authorize(r *http.Request) error {
	return checkBearer(r.Context(), h.opts.CheckToken, r.Header.Get("Authorization"))
}

// checkBearer checks an "Authorization: Bearer <token>" value with check.
func checkBearer(ctx context.Context, check func(context.Context, string) error, header string) error {
	if header == "" {
		return errors.New("a token is required: send 'Authorization: Bearer <token>' (the admin token is in the Virga server's data directory, file admin-token)")
	}
	tok, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || tok == "" {
		return errors.New("the Authorization header is not 'Bearer <token>'")
	}
	if err := check(ctx, tok); err != nil {
		return fmt.Errorf("the token is not accepted: %w", err)
	}
	return nil
}

// noRoute answers a request no route matches: 405 (with Allow) if the path
// is served for another method, else 404.
func (h *Handler) noRoute(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, p := h.mux.Handler(probe); p != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		writeError(w, http.StatusNotFound, fmt.Errorf("no such endpoint: %s %s (the Open Inference Protocol's endpoints begin with /v2: see docs/serving.md)", r.Method, r.URL.Path))
		return
	}
	if slices.Contains(allow, http.MethodGet) {
		allow = append(allow, http.MethodHead)
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	writeError(w, http.StatusMethodNotAllowed, fmt.Errorf("method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", ")))
}

func (h *Handler) live(w http.ResponseWriter, r *http.Request) {
	ok := h.svc.Live()
	writeJSON(w, probeStatus(ok), map[string]bool{"live": ok})
}

func (h *Handler) ready(w http.ResponseWriter, r *http.Request) {
	ok := h.svc.Ready()
	writeJSON(w, probeStatus(ok), map[string]bool{"ready": ok})
}

// probeStatus is 200 for true and 503 for false, so that a Kubernetes
// probe (which reads only the status) sees what the body says.
func probeStatus(ok bool) int {
	if ok {
		return http.StatusOK
	}
	return http.StatusServiceUnavailable
}

func (h *Handler) serverMetadata(w http.ResponseWriter, r *http.Request) {
	md := h.svc.Metadata()
	// The extensions this front end implements over REST, whatever the Service says.
	md.Extensions = slices.Clone(md.Extensions)
	for _, x := range []string{"model_repository", "binary_tensor_data", "system_shared_memory"} {
		if !slices.Contains(md.Extensions, x) {
			md.Extensions = append(md.Extensions, x)
		}
	}
	writeJSON(w, http.StatusOK, md)
}

func (h *Handler) modelMetadata(w http.ResponseWriter, r *http.Request) {
	md, err := h.svc.ModelMetadata(r.Context(), r.PathValue("model"), r.PathValue("version"))
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	out := *md // the protocol's inputs and outputs are arrays, never null
	if out.Inputs == nil {
		out.Inputs = []serve.TensorSpec{}
	}
	if out.Outputs == nil {
		out.Outputs = []serve.TensorSpec{}
	}
	writeJSON(w, http.StatusOK, out)
}

// ModelReady is the body of GET v2/models/{m}/ready.
type ModelReady struct {
	Name  string `json:"name"`
	Ready bool   `json:"ready"`
}

func (h *Handler) modelReady(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("model")
	ok, err := h.svc.ModelReady(r.Context(), name, r.PathValue("version"))
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, probeStatus(ok), ModelReady{Name: name, Ready: ok})
}

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func getBuf() *bytes.Buffer {
	b := bufPool.Get().(*bytes.Buffer)
	b.Reset()
	return b
}

// putBuf returns b to the pool unless it grew past what most requests need,
// so that one large request does not pin its memory.
func putBuf(b *bytes.Buffer) {
	if b.Cap() <= 1<<20 {
		bufPool.Put(b)
	}
}

// readBody reads r's body whole, up to MaxBody, into buf and returns it;
// past the limit, or if reading fails, it answers the request itself and
// returns false. The body's byte at offset align lands at an address that
// is a multiple of 8 (when its length was given): the binary data after an
// inference request's JSON header is then aligned for its numbers, which
// decode in place. The caller puts buf back with putBuf when done with the
// body.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, buf *bytes.Buffer, align int) ([]byte, bool) {
	if r.ContentLength > h.opts.MaxBody {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("request body: %d bytes, larger than the limit of %d bytes", r.ContentLength, h.opts.MaxBody))
		return nil, false
	}
	pad := 0
	if r.ContentLength > 0 {
		// Room for the padding and for ReadFrom's last read, which finds
		// the end of the body and would grow the buffer (copying the body)
		// with less than bytes.MinRead free.
		buf.Grow(8 + int(r.ContentLength) + bytes.MinRead)
		at := uintptr(unsafe.Pointer(unsafe.SliceData(buf.AvailableBuffer()))) + uintptr(align)
		pad = int((8 - at%8) % 8)
		buf.Write(make([]byte, pad))
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, h.opts.MaxBody))
	if err == nil {
		return buf.Bytes()[pad:], true
	}
	if mbe, ok := errors.AsType[*http.MaxBytesError](err); ok {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("request body: larger than the limit of %d bytes", mbe.Limit))
		return nil, false
	}
	writeError(w, http.StatusBadRequest, fmt.Errorf("request body: reading: %w", err))
	return nil, false
}

func (h *Handler) infer(w http.ResponseWriter, r *http.Request) {
	arrived := h.opts.Now()
	jsonLen := -1
	if v := r.Header.Get("Inference-Header-Content-Length"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, fmt.Errorf("Inference-Header-Content-Length: want the length in bytes of the JSON object that begins the body, got %q", v))
			return
		}
		jsonLen = n
	}
	buf := getBuf()
	defer putBuf(buf)
	// The request's inputs may share body's memory (binary data decodes in
	// place): buf is reused only once Infer has returned, when the engine
	// reads them no more.
	body, ok := h.readBody(w, r, buf, max(jsonLen, 0))
	if !ok {
		return
	}
	req, bo, err := decodeInferBody(body, jsonLen, r.PathValue("model"), r.PathValue("version"), h.opts.SharedMemory)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	defer putShmBufs(bo.bufs)
	req.Arrived = arrived
	resp, err := h.svc.Infer(r.Context(), req)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	if err := finishResponse(req, resp); err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	if err := writeSharedOutputs(h.opts.SharedMemory, resp, bo.shm, req.Outputs); err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	buf.Reset()
	out, jsonLen := appendInferResponse(buf.Bytes(), resp, bo)
	if jsonLen >= 0 {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Inference-Header-Content-Length", strconv.Itoa(jsonLen))
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
	if cap(out) > buf.Cap() {
		*buf = *bytes.NewBuffer(out[:0]) // keep the larger buffer for the next request
	}
}

// finishResponse fills what the protocol requires the response to echo
// and checks the outputs the Service returned.
func finishResponse(req *serve.Request, resp *serve.Response) error {
	if resp.ID == "" {
		resp.ID = req.ID
	}
	if resp.ModelName == "" {
		resp.ModelName = req.Model
	}
	for i := range resp.Outputs {
		if err := checkOutput(&resp.Outputs[i]); err != nil {
			return fmt.Errorf("model %q answered with a bad tensor: %w", req.Model, err)
		}
	}
	return nil
}

// IndexRequest is the optional body of POST v2/repository/index.
type IndexRequest struct {
	// Ready lists only the models ready now.
	Ready bool `json:"ready"`
}

// ModelRequest is the optional body of POST v2/repository/models/{m}/load
// and .../unload.
type ModelRequest struct {
	Parameters map[string]json.RawMessage `json:"parameters"`
}

func (h *Handler) index(w http.ResponseWriter, r *http.Request) {
	var in IndexRequest
	if !h.decodeOptional(w, r, &in) {
		return
	}
	idx, err := h.svc.Index(r.Context(), in.Ready)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	if idx == nil {
		idx = []serve.ModelStatus{}
	}
	writeJSON(w, http.StatusOK, idx)
}

func (h *Handler) load(w http.ResponseWriter, r *http.Request) {
	var in ModelRequest
	if !h.decodeOptional(w, r, &in) {
		return
	}
	for k := range in.Parameters {
		// Triton's "config" and "file:..." override the model's files.
		writeError(w, http.StatusBadRequest, serve.Inputf("parameters."+k, "not supported by this server: a model is loaded as its repository holds it (send no parameters)"))
		return
	}
	if err := h.svc.Load(r.Context(), r.PathValue("model")); err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (h *Handler) unload(w http.ResponseWriter, r *http.Request) {
	var in ModelRequest
	if !h.decodeOptional(w, r, &in) {
		return
	}
	for k := range in.Parameters {
		if k != "unload_dependents" { // no ensembles here: nothing depends on a model
			writeError(w, http.StatusBadRequest, serve.Inputf("parameters."+k, "unknown parameter (unload takes only unload_dependents)"))
			return
		}
	}
	if err := h.svc.Unload(r.Context(), r.PathValue("model")); err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// decodeOptional decodes r's body, if it has one, into v; it answers a bad
// body itself and returns false.
func (h *Handler) decodeOptional(w http.ResponseWriter, r *http.Request, v any) bool {
	buf := getBuf()
	defer putBuf(buf)
	body, ok := h.readBody(w, r, buf, 0)
	if !ok {
		return false
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return true
	}
	if err := unmarshalStrict(body, v); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return false
	}
	return true
}

// Error is the body of every error response, as the protocol gives it.
type Error struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, Error{Error: err.Error()})
}

// statusOf maps a Service's error to an HTTP status.
func statusOf(err error) int {
	var ie *serve.InputError
	var re *serve.RefusedError
	switch {
	case errors.As(err, &ie):
		return http.StatusBadRequest
	case errors.As(err, &re):
		return http.StatusTooManyRequests
	case errors.Is(err, serve.ErrModelNotFound):
		return http.StatusNotFound
	case errors.Is(err, serve.ErrUnavailable):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	case errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

var _ http.Handler = (*Handler)(nil)

// ShmRegisterRequest is the body of POST
// v2/systemsharedmemory/region/{name}/register.
type ShmRegisterRequest struct {
	Key      string `json:"key"`
	Offset   uint64 `json:"offset"`
	ByteSize uint64 `json:"byte_size"`
}

func (h *Handler) shmStatus(w http.ResponseWriter, r *http.Request) {
	st, err := h.opts.SharedMemory.Status(r.PathValue("region"))
	if err != nil {
		writeError(w, http.StatusNotFound, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (h *Handler) shmRegister(w http.ResponseWriter, r *http.Request) {
	if err := localPeer(r.RemoteAddr); err != nil {
		writeError(w, http.StatusForbidden, err)
		return
	}
	var in ShmRegisterRequest
	if !h.decodeOptional(w, r, &in) {
		return
	}
	if err := h.opts.SharedMemory.Register(r.PathValue("region"), in.Key, in.Offset, in.ByteSize); err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (h *Handler) shmUnregister(w http.ResponseWriter, r *http.Request) {
	h.opts.SharedMemory.Unregister(r.PathValue("region"))
	w.WriteHeader(http.StatusOK)
}
