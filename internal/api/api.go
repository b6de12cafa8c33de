// Package api serves Virga's HTTP API: REST/JSON for everything the CLI does,
// server-sent events for live progress and log following, and the OpenAPI
// document at /api/openapi.json. Reads go to the store; every change to
// experiments, trials and attempts goes through the control loop, and the
// model registry's through internal/registry. It never mutates state itself.
package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/checkpoint"
	"github.com/virga-ml/virga/internal/clock"
	"github.com/virga-ml/virga/internal/control"
	"github.com/virga-ml/virga/internal/registry"
	"github.com/virga-ml/virga/internal/search"
	"github.com/virga-ml/virga/internal/spec"
	"github.com/virga-ml/virga/internal/store"
)

// Config wires the API server.
type Config struct {
	// Control takes every change; nil serves a read-only view of Store.
	Control *control.Controller
	Store   store.Store
	// RequireAuth demands a token on every request (set when listening off loopback).
	RequireAuth bool
	// Version is reported by /api/v1/health.
	Version string
	// PollInterval is how often followed logs are checked for growth (default 200ms).
	PollInterval time.Duration
	// Pricer prices running attempts up to the moment they are read (the
	// controller's, so both agree); nil prices them at 0. Ended attempts
	// keep the cost the control loop recorded.
	Pricer control.Pricer
	// Clock is the time running attempts are priced up to (the
	// controller's, so both agree); nil means the real clock.
	Clock clock.Clock
	// Models is the model registry; nil serves the registry of Store
	// without model files (listing and showing work, files are refused).
	Models *registry.Registry
}

// Server is the HTTP API.
type Server struct {
	cfg    Config
	ctl    *control.Controller
	st     store.Store
	mux    *http.ServeMux
	models *registry.Registry
	prom   http.Handler // the control loop's Prometheus metrics; nil without one
	tokens sync.Map     // SHA-256 (raw) -> true, for admin tokens already checked
}

// New makes the API server.
func New(cfg Config) *Server {
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 200 * time.Millisecond
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Models == nil {
		cfg.Models = registry.New(cfg.Store, nil, cfg.Clock.Now)
	}
	s := &Server{cfg: cfg, ctl: cfg.Control, st: cfg.Store, mux: http.NewServeMux(), models: cfg.Models}
	if s.ctl != nil {
		reg := s.ctl.Registry()
		s.prom = promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
	}
	s.routes()
	return s
}

func (s *Server) routes() {
	m := s.mux
	m.HandleFunc("GET /api/openapi.json", s.openAPI)
	m.HandleFunc("GET /api/v1/health", s.health)
	m.HandleFunc("GET /metrics", s.promMetrics)
	m.HandleFunc("POST /api/v1/experiments", s.submit)
	m.HandleFunc("POST /api/v1/validate", s.validate)
	m.HandleFunc("GET /api/v1/experiments", s.listExperiments)
	m.HandleFunc("GET /api/v1/experiments/{id}", s.getExperiment)
	m.HandleFunc("POST /api/v1/experiments/{id}/{op}", s.controlExperiment)
	m.HandleFunc("GET /api/v1/experiments/{id}/trials", s.listTrials)
	m.HandleFunc("POST /api/v1/experiments/{id}/trials", s.ask)
	m.HandleFunc("GET /api/v1/experiments/{id}/best", s.best)
	m.HandleFunc("GET /api/v1/experiments/{id}/events", s.events)
	m.HandleFunc("GET /api/v1/experiments/{id}/watch", s.watch)
	m.HandleFunc("GET /api/v1/calibration", s.calibration)
	m.HandleFunc("GET /api/v1/trials/{id}", s.getTrial)
	m.HandleFunc("GET /api/v1/trials/{id}/metrics", s.metrics)
	m.HandleFunc("GET /api/v1/trials/{id}/checkpoints", s.checkpoints)
	m.HandleFunc("GET /api/v1/trials/{id}/logs", s.logs)
	m.HandleFunc("POST /api/v1/attempts/{id}/report", s.report)
	m.HandleFunc("POST /api/v1/attempts/{id}/complete", s.complete)
	m.HandleFunc("POST /api/v1/attempts/{id}/checkpoints", s.uploadCheckpoint)
	m.HandleFunc("GET /api/v1/attempts/{id}/checkpoints/{checkpoint}", s.downloadCheckpoint)
	m.HandleFunc("GET /api/v1/models", s.listModels)
	m.HandleFunc("GET /api/v1/models/{name}", s.getModel)
	m.HandleFunc("POST /api/v1/models/{name}/versions", s.registerModel)
	m.HandleFunc("GET /api/v1/models/{name}/versions/{version}", s.getModelVersion)
	m.HandleFunc("DELETE /api/v1/models/{name}/versions/{version}", s.deleteModelVersion)
	m.HandleFunc("GET /api/v1/models/{name}/versions/{version}/files", s.downloadModel)
	m.HandleFunc("PUT /api/v1/models/{name}/aliases/{alias}", s.setModelAlias)
	m.HandleFunc("DELETE /api/v1/models/{name}/aliases/{alias}", s.deleteModelAlias)
}

// ServeHTTP authenticates the request, refuses what a web page could send
// cross-site, and routes it.
//
// A server on loopback requires no token: local processes are trusted. A web
// page the user visits is not, yet the browser sends its requests to
// 127.0.0.1 too. Without a valid token, a request is therefore refused if it
// carries an Origin header (browsers add it to cross-origin requests and to
// every POST), if its Host is not a loopback name (DNS rebinding), or if it
// changes something without Content-Type: application/json (which a page can
// send cross-site only after a CORS preflight this server never grants).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r, authed, presented := s.authenticate(r)
	switch {
	case presented && !authed:
		w.Header().Set("WWW-Authenticate", `Bearer realm="virga", error="invalid_token"`)
		writeError(w, http.StatusUnauthorized, errors.New("the token is not valid here: an admin token is the one in the server's data directory (file admin-token); a trial token may only report for its own attempts"))
		return
	case !authed && s.cfg.RequireAuth:
		w.Header().Set("WWW-Authenticate", `Bearer realm="virga"`)
		writeError(w, http.StatusUnauthorized, errors.New("a token is required: send 'Authorization: Bearer <token>' (the admin token is in the server's data directory, file admin-token)"))
		return
	case !authed:
		if err := crossSite(r); err != nil {
			writeError(w, http.StatusForbidden, err)
			return
		}
	}
	if _, pattern := s.mux.Handler(r); pattern == "" {
		s.noRoute(w, r)
		return
	}
	if s.ctl == nil && (r.Method != http.MethodGet || strings.HasSuffix(r.URL.Path, "/watch")) {
		writeError(w, http.StatusServiceUnavailable, errors.New("no Virga server is running on this data directory: start one with `virga server` (it resumes unfinished experiments) or pass --server URL"))
		return
	}
	s.mux.ServeHTTP(w, r)
}

// crossSite returns why a request without a token may have come from a web
// page rather than a local process, or nil.
func crossSite(r *http.Request) error {
	const what = "; Virga's clients (the CLI, the SDKs, curl with -H 'Content-Type: application/json') are not refused, or send 'Authorization: Bearer <admin token>' (file admin-token in the server's data directory)"
	if o := r.Header.Get("Origin"); o != "" {
		return fmt.Errorf("refusing a request from a web page (Origin %q) without a token: a page you visit must not control Virga%s", o, what)
	}
	if !loopbackHost(r.Host) {
		return fmt.Errorf("refusing a request for host %q without a token: only localhost, 127.0.0.1 and [::1] are served without one%s", r.Host, what)
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		// Both types need a CORS preflight, which this server never grants:
		// a page cannot send them cross-site.
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "application/json" && mt != "application/x-tar" {
			return fmt.Errorf("refusing %s without 'Content-Type: application/json' (got %q) and without a token: a web page could send it cross-site%s", r.Method, r.Header.Get("Content-Type"), what)
		}
	}
	return nil
}

// loopbackHost reports whether a Host header names this machine: localhost
// or a loopback address, with or without a port.
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

// noRoute answers a request no route matches: 405 (with Allow) if the path
// is served for other methods, else 404, with a JSON body like every error.
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, p := s.mux.Handler(probe); p != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		writeError(w, http.StatusNotFound, fmt.Errorf("no such API route: %s %s (the routes are listed at /api/openapi.json)", r.Method, r.URL.Path))
		return
	}
	if slices.Contains(allow, http.MethodGet) {
		allow = append(allow, http.MethodHead)
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	writeError(w, http.StatusMethodNotAllowed, fmt.Errorf("method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", ")))
}

// authenticate checks the request's token, if it has one. An admin token is
// accepted anywhere; a valid trial token only for POST to attempts (the
// control loop then lets it act only for its own trial), and for GET of a
// remote attempt's checkpoint. presented says
// whether a token was sent at all.
func (s *Server) authenticate(r *http.Request) (_ *http.Request, ok, presented bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return r, false, false
	}
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" {
		return r, false, true
	}
	if strings.HasPrefix(tok, "vt") {
		forAttempt := strings.HasPrefix(r.URL.Path, "/api/v1/attempts/") &&
			(r.Method == http.MethodPost || r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/checkpoints/"))
		if s.ctl == nil || !forAttempt {
			return r, false, true
		}
		trialID, ok := s.ctl.TrialOfToken(tok)
		if !ok {
			return r, false, true
		}
		return r.WithContext(control.AsTrial(r.Context(), trialID)), true, true
	}
	if s.CheckToken(r.Context(), tok) != nil {
		return r, false, true
	}
	return r, true, true
}

// ErrInvalidToken is CheckToken's answer to a token that is not an admin token.
var ErrInvalidToken = errors.New("the token is not valid here: send an admin token (file admin-token in the server's data directory)")

// CheckToken returns nil if tok is an admin token, else ErrInvalidToken (or
// the store's error). Other servers of the same data directory, such as the
// inference front ends, authenticate their requests with it.
func (s *Server) CheckToken(ctx context.Context, tok string) error {
	sum := sha256.Sum256([]byte(tok))
	key := string(sum[:])
	if _, ok := s.tokens.Load(key); ok {
		return nil
	}
	if _, err := s.st.TokenByHash(ctx, sum[:]); err != nil {
		if errors.Is(err, virga.ErrNotFound) {
			return ErrInvalidToken
		}
		return fmt.Errorf("checking the token: %w", err)
	}
	s.tokens.Store(key, true)
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	body := wire.Error{Error: err.Error()}
	var se *spec.Error
	if errors.As(err, &se) {
		body.Problems = se.Problems
	}
	writeJSON(w, code, body)
}

// statusOf maps an error to an HTTP status.
func statusOf(err error) int {
	var se *spec.Error
	switch {
	case errors.As(err, &se):
		return http.StatusBadRequest
	case errors.Is(err, control.ErrCheckpointNotUploaded), errors.Is(err, control.ErrNotRemote), errors.Is(err, control.ErrTooManyUploads):
		return http.StatusUnprocessableEntity
	case errors.As(err, new(*registry.ManifestError)):
		// The model directory's manifest is missing or wrong.
		return http.StatusUnprocessableEntity
	case errors.Is(err, registry.ErrNoFiles):
		return http.StatusServiceUnavailable
	case errors.Is(err, checkpoint.ErrUnsupported), errors.Is(err, checkpoint.ErrBadArchive):
		// The trial put something in its checkpoint directory that a
		// checkpoint cannot hold: its doing, so not a 5xx to retry.
		return http.StatusUnprocessableEntity
	case errors.Is(err, virga.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, virga.ErrConflict), errors.Is(err, control.ErrSuperseded), errors.Is(err, search.ErrExhausted):
		return http.StatusConflict
	case errors.Is(err, control.ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, control.ErrClosed):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func pathID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		writeError(w, http.StatusBadRequest, fmt.Errorf("id: want a positive integer, got %q", r.PathValue("id")))
		return 0, false
	}
	return id, true
}

// queryInt reads an integer query parameter, answering 400 if it is not one.
func queryInt(w http.ResponseWriter, r *http.Request, name string, def int64) (int64, bool) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, true
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("%s: want an integer, got %q", name, v))
		return 0, false
	}
	return n, true
}

// MaxBody bounds a JSON request body; a larger one is answered 413.
const MaxBody = 2 << 20

// decode reads the request's body into v as exactly one JSON value with no
// unknown fields. It answers a bad body itself, 400 naming what is wrong or
// 413 past MaxBody, and then returns false.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	err := decodeJSON(http.MaxBytesReader(w, r.Body, MaxBody), v)
	if err == nil {
		return true
	}
	if mbe, ok := errors.AsType[*http.MaxBytesError](err); ok {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("request body: larger than the limit of %d bytes (%d MiB)", mbe.Limit, mbe.Limit>>20))
		return false
	}
	writeError(w, http.StatusBadRequest, fmt.Errorf("request body: %w", err))
	return false
}

// decodeJSON decodes one JSON value from src into v, refusing unknown
// fields and anything but white space after the value.
func decodeJSON(src io.Reader, v any) error {
	dec := json.NewDecoder(src)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		switch {
		case errors.Is(err, io.EOF):
			return errors.New("empty: want a JSON object")
		case errors.Is(err, io.ErrUnexpectedEOF):
			return fmt.Errorf("the JSON value ends early, at offset %d", dec.InputOffset())
		}
		return err
	}
	rest := io.MultiReader(dec.Buffered(), src)
	off := dec.InputOffset()
	buf := make([]byte, 512)
	for {
		n, err := rest.Read(buf)
		chunk := buf[:n]
		if data := bytes.TrimLeft(chunk, " \t\r\n"); len(data) > 0 {
			off += int64(n - len(data))
			return fmt.Errorf("data after the JSON value at offset %d: %q (send one JSON object and nothing after it)", off, clip(data, 32))
		}
		off += int64(n)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// clip returns b's first n bytes.
func clip(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, wire.Health{Status: "ok", Version: s.cfg.Version})
}

// promMetrics serves the control plane's Prometheus metrics
// (docs/operations.md), under the same authentication as the API.
func (s *Server) promMetrics(w http.ResponseWriter, r *http.Request) {
	if s.prom == nil {
		writeError(w, http.StatusServiceUnavailable, errors.New("no Virga server is running on this data directory: the metrics are the control loop's (start one with `virga server`)"))
		return
	}
	s.prom.ServeHTTP(w, r)
}

func (s *Server) submit(w http.ResponseWriter, r *http.Request) {
	var req wire.SubmitRequest
	if !decode(w, r, &req) {
		return
	}
	if req.File == "" {
		req.File = "experiment.yaml"
	}
	exp, err := s.ctl.SubmitWithEstimate(r.Context(), req.File, []byte(req.Spec), req.Estimate)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusCreated, exp)
}

func (s *Server) validate(w http.ResponseWriter, r *http.Request) {
	var req wire.SubmitRequest
	if !decode(w, r, &req) {
		return
	}
	e, err := spec.Parse(req.File, []byte(req.Spec))
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	writeJSON(w, http.StatusOK, e)
}

func (s *Server) listExperiments(w http.ResponseWriter, r *http.Request) {
	f := store.ExperimentFilter{}
	if st := r.URL.Query().Get("state"); st != "" {
		for _, x := range strings.Split(st, ",") {
			state := virga.ExperimentState(strings.ToUpper(strings.TrimSpace(x)))
			if !slices.Contains(experimentStates, state) {
				writeError(w, http.StatusBadRequest, fmt.Errorf("state: no experiment state %q (want one or more of %s, comma-separated)", x, joinStates(experimentStates)))
				return
			}
			f.States = append(f.States, state)
		}
	}
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, fmt.Errorf("limit: want a non-negative integer, got %q", l))
			return
		}
		f.Limit = n
	}
	exps, err := s.st.Experiments(r.Context(), f)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	out := make([]wire.ExperimentView, 0, len(exps))
	for _, e := range exps {
		trials, err := s.st.Trials(r.Context(), e.ID)
		if err != nil {
			writeError(w, statusOf(err), err)
			return
		}
		v := s.view(e, trials, false)
		if err := s.addSpend(r.Context(), &v); err != nil {
			writeError(w, statusOf(err), err)
			return
		}
		out = append(out, v)
	}
	writeJSON(w, http.StatusOK, out)
}

// experimentStates are the states ?state= accepts.
var experimentStates = []virga.ExperimentState{virga.ExperimentActive, virga.ExperimentPaused, virga.ExperimentStopping,
	virga.ExperimentCompleted, virga.ExperimentStopped, virga.ExperimentFailed}

func joinStates(states []virga.ExperimentState) string {
	out := make([]string, len(states))
	for i, st := range states {
		out[i] = string(st)
	}
	return strings.Join(out, ", ")
}

func (s *Server) view(e *virga.Experiment, trials []*virga.Trial, withSpec bool) wire.ExperimentView {
	v := wire.ExperimentView{Experiment: e, Counts: map[virga.TrialState]int{}}
	if sp, err := spec.Parse(e.SpecFile, e.Spec); err == nil {
		v.Objective, v.MaxTrials = sp.Objective, sp.MaxTrials
	}
	v.Best = BestTrial(trials, v.Objective)
	for _, t := range trials {
		v.Counts[t.State]++
	}
	if withSpec {
		v.SpecText = string(e.Spec)
	}
	return v
}

// BestTrial returns the trial with the best objective value, or nil.
func BestTrial(trials []*virga.Trial, o spec.Objective) *virga.Trial {
	var best *virga.Trial
	for _, t := range trials {
		if t.Best == nil {
			continue
		}
		if best == nil || o.Better(*t.Best, *best.Best) {
			best = t
		}
	}
	return best
}

func (s *Server) getExperiment(w http.ResponseWriter, r *http.Request) {
	e, trials, ok := s.experimentAndTrials(w, r)
	if !ok {
		return
	}
	v := s.view(e, trials, true)
	if err := s.addSpend(r.Context(), &v); err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	if e.State == virga.ExperimentActive {
		f, err := s.forecast(r.Context(), &v, trials)
		if err != nil {
			writeError(w, statusOf(err), err)
			return
		}
		v.Forecast = f
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) controlExperiment(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	op := wire.Op(r.PathValue("op"))
	switch op {
	case wire.OpStop, wire.OpPause, wire.OpResume:
	default:
		writeError(w, http.StatusNotFound, fmt.Errorf("no operation %q on experiments (want stop, pause or resume)", op))
		return
	}
	e, err := s.ctl.Control(r.Context(), id, op)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, e)
}

func (s *Server) listTrials(w http.ResponseWriter, r *http.Request) {
	e, trials, ok := s.experimentAndTrials(w, r)
	if !ok {
		return
	}
	as, err := s.st.ExperimentAttempts(r.Context(), e.ID)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	byTrial := map[int64]wire.Spend{}
	for _, a := range s.priced(e, as) {
		sp := byTrial[a.TrialID]
		sp.Add(a)
		byTrial[a.TrialID] = sp
	}
	out := make([]wire.TrialSummary, len(trials))
	for i, t := range trials {
		out[i] = wire.TrialSummary{Trial: t, Spend: byTrial[t.ID]}
	}
	writeList(w, out, nil)
}

// experimentAndTrials reads the experiment of the path's ID and its trials,
// answering the error itself.
func (s *Server) experimentAndTrials(w http.ResponseWriter, r *http.Request) (*virga.Experiment, []*virga.Trial, bool) {
	id, ok := pathID(w, r)
	if !ok {
		return nil, nil, false
	}
	e, err := s.st.Experiment(r.Context(), id)
	if err != nil {
		writeError(w, statusOf(err), err)
		return nil, nil, false
	}
	trials, err := s.st.Trials(r.Context(), id)
	if err != nil {
		writeError(w, statusOf(err), err)
		return nil, nil, false
	}
	return e, trials, true
}

// trialID returns the path's trial ID once the trial is known to exist.
func (s *Server) trialID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, ok := pathID(w, r)
	if !ok {
		return 0, false
	}
	if _, err := s.st.Trial(r.Context(), id); err != nil {
		writeError(w, statusOf(err), err)
		return 0, false
	}
	return id, true
}

// writeList writes a list as JSON ([] rather than null when empty), or err.
func writeList[T any](w http.ResponseWriter, items []T, err error) {
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	if items == nil {
		items = []T{}
	}
	writeJSON(w, http.StatusOK, items)
}

func (s *Server) best(w http.ResponseWriter, r *http.Request) {
	e, trials, ok := s.experimentAndTrials(w, r)
	if !ok {
		return
	}
	v := s.view(e, trials, false)
	if v.Best == nil {
		writeError(w, http.StatusNotFound, fmt.Errorf("experiment %d has no trial that reported %q yet: %w", e.ID, v.Objective.Metric, virga.ErrNotFound))
		return
	}
	out := wire.BestView{Objective: v.Objective, Trial: v.Best}
	ms, err := s.st.Metrics(r.Context(), store.MetricFilter{TrialID: v.Best.ID, AfterStep: v.Best.BestStep - 1, Limit: 1})
	if err == nil && len(ms) == 1 && ms[0].Step == v.Best.BestStep {
		out.Metrics = &ms[0]
	}
	if cks, err := s.st.Checkpoints(r.Context(), v.Best.ID); err == nil {
		for i := range cks {
			if cks[i].Step == v.Best.BestStep {
				out.Checkpoint = &cks[i]
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	after, ok := queryInt(w, r, "after", 0)
	if !ok {
		return
	}
	if _, err := s.st.Experiment(r.Context(), id); err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	evs, err := s.st.Events(r.Context(), store.EventFilter{ExperimentID: id, AfterID: after})
	writeList(w, evs, err)
}

func (s *Server) getTrial(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	t, err := s.st.Trial(r.Context(), id)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	as, err := s.st.Attempts(r.Context(), id)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	v := wire.TrialView{Trial: t, AttemptList: as}
	if live(as) {
		e, err := s.st.Experiment(r.Context(), t.ExperimentID)
		if err != nil {
			writeError(w, statusOf(err), err)
			return
		}
		v.AttemptList = s.priced(e, as)
	}
	for _, a := range v.AttemptList {
		v.Add(a)
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	id, ok := s.trialID(w, r)
	if !ok {
		return
	}
	after, ok := queryInt(w, r, "after", -1)
	if !ok {
		return
	}
	ms, err := s.st.Metrics(r.Context(), store.MetricFilter{TrialID: id, AfterStep: after})
	writeList(w, ms, err)
}

func (s *Server) checkpoints(w http.ResponseWriter, r *http.Request) {
	if id, ok := s.trialID(w, r); ok {
		cs, err := s.st.Checkpoints(r.Context(), id)
		writeList(w, cs, err)
	}
}

func (s *Server) report(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	if !s.mayActFor(w, r, id) {
		return
	}
	var rep wire.Report
	if !decode(w, r, &rep) {
		return
	}
	if err := rep.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	d, err := s.ctl.Report(r.Context(), id, rep)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, wire.ReportReply{Decision: d.String()})
}

// uploadCheckpoint takes a remote attempt's checkpoint directory as a tar
// archive and stores it; the agent then names it in a report.
func (s *Server) uploadCheckpoint(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	if !s.mayActFor(w, r, id) {
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/x-tar" {
		writeError(w, http.StatusUnsupportedMediaType, fmt.Errorf("a checkpoint is uploaded as 'Content-Type: application/x-tar' (got %q)", r.Header.Get("Content-Type")))
		return
	}
	info, err := s.ctl.UploadCheckpoint(r.Context(), id, r.Body)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, wire.CheckpointInfo{ID: info.ID, Size: info.Size, Files: info.Files})
}

// downloadCheckpoint sends a remote attempt the checkpoint it resumes from.
func (s *Server) downloadCheckpoint(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	if !s.mayActFor(w, r, id) {
		return
	}
	// Written to a buffer file first so that a failure is an error status,
	// not a cut-off archive.
	f, err := os.CreateTemp("", "virga-checkpoint-*.tar")
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := s.ctl.CheckpointArchive(r.Context(), id, r.PathValue("checkpoint"), f); err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, f)
}

// mayActFor refuses (403) a trial token used on another trial's live attempt,
// before the body is read. The control loop checks again when it acts.
func (s *Server) mayActFor(w http.ResponseWriter, r *http.Request, attemptID int64) bool {
	trialID, live := s.ctl.AttemptTrial(attemptID)
	if live && control.Allowed(r.Context(), trialID) {
		return true
	}
	if live {
		writeError(w, http.StatusForbidden, control.ErrForbidden)
		return false
	}
	return true // not live: the handler answers 409 (ended) or 404 (never existed)
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	if !s.mayActFor(w, r, id) {
		return
	}
	var req wire.CompleteRequest
	if !decode(w, r, &req) {
		return
	}
	t, err := s.ctl.Tell(r.Context(), id, req.OK)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func (s *Server) ask(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	a, err := s.ctl.Ask(r.Context(), id)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusCreated, a)
}
