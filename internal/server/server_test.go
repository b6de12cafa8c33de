package server

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/client"
	"github.com/virga-ml/virga/internal/backend/local"
)

const shimEnv = "VIRGA_TEST_SHIM"

func TestMain(m *testing.M) {
	if os.Getenv(shimEnv) == "1" {
		os.Exit(local.ShimMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func start(t *testing.T, dir, listen string) *Server {
	t.Helper()
	s, err := Start(context.Background(), Config{DataDir: dir, Listen: listen, Capacity: virga.Resources{CPU: 4, MemoryMB: 4096},
		ShimCommand: []string{"env", shimEnv + "=1", "GORACE=atexit_sleep_ms=0", os.Args[0]}})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return s
}

func TestAdminTokenAndLock(t *testing.T) {
	dir := t.TempDir()
	s := start(t, dir, "0.0.0.0:0") // off loopback: a token is required
	fi, err := os.Stat(s.TokenFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("admin-token: %v, mode %v; want 0600", err, fi.Mode())
	}
	b, _ := os.ReadFile(s.TokenFile)
	if strings.TrimSpace(string(b)) != s.Token || s.Token == "" {
		t.Errorf("admin-token holds %q, server uses %q", b, s.Token)
	}
	ctx := context.Background()
	_, err = client.New(s.URL, "").Health(ctx)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusUnauthorized || !strings.Contains(ce.Body.Error, "admin-token") {
		t.Errorf("no token: %v, want 401 naming admin-token", err)
	}
	if _, err := client.New(s.URL, s.Token).Health(ctx); err != nil {
		t.Errorf("admin token: %v", err)
	}
	if _, err := Start(ctx, Config{DataDir: dir}); !errors.Is(err, ErrBusy) {
		t.Errorf("second server on the directory: %v, want ErrBusy", err)
	}
	if info, ok := Running(dir); !ok || info.URL != s.URL || info.PID != os.Getpid() {
		t.Errorf("Running = %+v, %v", info, ok)
	}
	tok := s.Token
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := Running(dir); ok {
		t.Error("Running after Close")
	}
	s2 := start(t, dir, "0.0.0.0:0")
	defer s2.Close()
	if s2.Token != tok {
		t.Error("the admin token changed across restarts")
	}
	if _, err := client.New(s2.URL, tok).Health(ctx); err != nil {
		t.Errorf("old admin token after a restart: %v", err)
	}
}

// TestRestartAdoptsRunningTrial closes the server while a real trial runs;
// the next server on the directory adopts it (same attempt, same report URL)
// and the trial's later report and exit are recorded.
// The trial waits for a marker file, at most 30 s, so that a failing test
// leaves no process behind.
func TestRestartAdoptsRunningTrial(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(t.TempDir(), "go")
	s := start(t, dir, "")
	ctx := context.Background()
	c := client.New(s.URL, s.Token)
	y := `name: adopt
entrypoint: [sh, -c, 'echo started; i=0; while [ ! -e ` + marker + ` ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; echo "VIRGA_METRIC {\"step\":1,\"metrics\":{\"loss\":0.5}}"']
hyperparameters:
  x: {type: float, min: 0, max: 1}
searcher: random
objective: {metric: loss, direction: minimize}
max_trials: 1
`
	exp, err := c.Submit(ctx, "adopt.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	var trial *virga.Trial
	waitUntil(t, "the trial to run", func() bool {
		ts, err := c.Trials(ctx, exp.ID)
		if err != nil || len(ts) != 1 {
			return false
		}
		tv, err := c.Trial(ctx, ts[0].ID)
		trial = ts[0]
		return err == nil && len(tv.AttemptList) == 1 && tv.AttemptList[0].State == virga.AttemptRunning
	})
	url := s.URL
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := start(t, dir, "")
	defer s2.Close()
	if s2.URL != url {
		t.Errorf("restarted on %s, want the address trials know, %s", s2.URL, url)
	}
	c2 := client.New(s2.URL, s2.Token)
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the experiment to complete", func() bool {
		v, err := c2.Experiment(ctx, exp.ID)
		return err == nil && v.State == virga.ExperimentCompleted
	})
	tv, err := c2.Trial(ctx, trial.ID)
	if err != nil {
		t.Fatal(err)
	}
	if tv.State != virga.TrialCompleted || len(tv.AttemptList) != 1 || tv.Best == nil || *tv.Best != 0.5 {
		t.Errorf("trial %s after %d attempts, best %v; want COMPLETED after 1 with loss 0.5", tv.State, len(tv.AttemptList), tv.Best)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDBDirectoryMustExist: an SQLite --db whose directory does not exist is
// an error naming it, not a new empty database; inside the data directory
// the directory is made.
func TestDBDirectoryMustExist(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	for _, db := range []string{filepath.Join(elsewhere, "typo", "virga.db"), "sqlite://" + filepath.Join(elsewhere, "typo", "virga.db")} {
		_, err := Start(context.Background(), Config{DataDir: dir, DB: db})
		if err == nil || !strings.Contains(err.Error(), filepath.Join(elsewhere, "typo")) {
			t.Errorf("DB %s: %v, want an error naming the missing directory", db, err)
		}
	}
	if _, err := os.Stat(filepath.Join(elsewhere, "typo")); !os.IsNotExist(err) {
		t.Errorf("the missing directory was created: %v", err)
	}
	s, err := Start(context.Background(), Config{DataDir: dir, DB: filepath.Join(dir, "db", "virga.db"),
		Capacity: virga.Resources{CPU: 1, MemoryMB: 512}, ShimCommand: []string{"env", shimEnv + "=1", "GORACE=atexit_sleep_ms=0", os.Args[0]}})
	if err != nil {
		t.Fatalf("DB in a new directory inside the data directory: %v", err)
	}
	url := s.URL
	s.Close()
	// A restart takes the same address (the one listener it opened).
	s = start(t, dir, "")
	defer s.Close()
	if s.URL != url {
		t.Errorf("restarted on %s, want %s", s.URL, url)
	}
}
