package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/backend/local"
	"github.com/virga-ml/virga/internal/checkpoint"
	"github.com/virga-ml/virga/internal/control"
	"github.com/virga-ml/virga/internal/registry"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/sqlite"
)

// shimEnv makes the test binary act as `virga shim` when the local backend
// re-executes it.
const shimEnv = "VIRGA_TEST_SHIM"

func TestMain(m *testing.M) {
	if os.Getenv(shimEnv) == "1" {
		os.Exit(local.ShimMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// shimCommand runs this test binary as the shim. The variable is set for the
// shim only (not in this process), so that fuzz workers stay test binaries;
// a race-enabled shim would otherwise sleep 1 s at exit.
func shimCommand() []string {
	return []string{"env", shimEnv + "=1", "GORACE=atexit_sleep_ms=0", os.Args[0]}
}

var testSecret = []byte("api test secret")

// env is a real API server: SQLite store, local backend whose shim is this
// test binary, checkpoints and control loop, behind an httptest.Server.
type env struct {
	t     testing.TB
	dir   string
	st    store.Store
	ctl   *control.Controller
	api   *Server
	srv   *httptest.Server
	ck    *checkpoint.Store
	admin string // admin token (stored hashed)
}

func newEnv(t testing.TB, requireAuth bool) *env {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "virga.db"))
	if err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Open(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	be, err := local.New(local.Config{Capacity: virga.Resources{CPU: 8, MemoryMB: 8192}, ShimCommand: shimCommand(),
		PollInterval: 20 * time.Millisecond, WarmShims: -1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(nil)
	base := "http://" + srv.Listener.Addr().String()
	ctl, err := control.New(control.Config{Store: st, Backend: be, Checkpoints: ck, DataDir: dir, ReportBase: base, Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- ctl.Run(ctx) }()
	select {
	case <-ctl.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("controller not ready")
	}
	e := &env{t: t, dir: dir, st: st, ctl: ctl, admin: "admin-secret-token"}
	sum := sha256.Sum256([]byte(e.admin))
	if err := st.PutToken(context.Background(), &store.Token{Name: "admin", Hash: sum[:], CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	e.ck = ck
	e.api = New(Config{Control: ctl, Store: st, RequireAuth: requireAuth, PollInterval: 20 * time.Millisecond,
		Models: registry.New(st, ck, nil)})
	srv.Config.Handler = e.api
	srv.Start()
	e.srv = srv
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		cancel()
		if err := <-runErr; err != nil {
			t.Errorf("Run: %v", err)
		}
		be.Close()
		st.Close()
	})
	return e
}

// do sends a request with an optional token and returns the status and body.
func (e *env) do(method, path, token string, body any) (int, []byte) {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if method != http.MethodGet {
		req.Header.Set("Content-Type", "application/json")
	}
	return e.send(req)
}

// send sends a request as it is and returns the status and body.
func (e *env) send(req *http.Request) (int, []byte) {
	e.t.Helper()
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, b
}

// want sends a request, checks its status and decodes the body into out (if not nil).
func (e *env) want(code int, method, path, token string, body, out any) []byte {
	e.t.Helper()
	got, b := e.do(method, path, token, body)
	if got != code {
		e.t.Fatalf("%s %s: HTTP %d %s, want %d", method, path, got, b, code)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			e.t.Fatalf("%s %s: decoding %s: %v", method, path, b, err)
		}
	}
	return b
}

func (e *env) submit(y string) *virga.Experiment {
	e.t.Helper()
	var exp virga.Experiment
	e.want(http.StatusCreated, "POST", "/api/v1/experiments", e.admin, wire.SubmitRequest{File: "exp.yaml", Spec: y}, &exp)
	return &exp
}

func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// apiDriven is an experiment without an entrypoint.
const apiDriven = `name: asktell
hyperparameters:
  x: {type: float, min: 0, max: 1}
searcher: random
objective: {metric: loss, direction: minimize}
max_trials: 2
seed: 3
`
