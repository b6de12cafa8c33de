package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestCommandWaitsForAStartingServer: a command run while the data
// directory's server starts (it holds the directory's lock and has not
// written server.json yet: `virga server &` just before) waits for it and
// talks to it, instead of reading the directory behind its back or saying
// no server runs.
func TestCommandWaitsForAStartingServer(t *testing.T) {
	// The server the starting one will turn out to be: a real one, on
	// another data directory.
	other := t.TempDir()
	srv := startServer(t, other, freePort(t), "")
	defer srv.stop()
	if _, errOut, code := runCLI(t, other, "models", "register", "m", "--from-dir", modelDir(t), "--data-dir", other); code != 0 {
		t.Fatalf("register: exit %d: %s", code, errOut)
	}

	// The starting server: it owns dir (its lock) and does not serve yet.
	dir := t.TempDir()
	lock, err := os.OpenFile(filepath.Join(dir, "server.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(virgaBin, "models", "ls", "--json", "--data-dir", dir)
	var out bytes.Buffer
	errOut := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = &out, errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the command to say it waits for the starting server", 20*time.Second, func() bool {
		return strings.Contains(errOut.String(), "waiting for the Virga server starting on "+dir)
	})
	// It serves now.
	info, _ := json.Marshal(map[string]any{"url": srv.url, "pid": os.Getpid()})
	if err := os.WriteFile(filepath.Join(dir, "server.json"), info, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("models ls: %v\n%s", err, errOut.String())
	}
	var models []struct{ Name string }
	if err := json.Unmarshal(out.Bytes(), &models); err != nil || len(models) != 1 || models[0].Name != "m" {
		t.Fatalf("models ls printed %s (%v); want the starting server's model m", out.String(), err)
	}
}

// modelDir writes a model directory registering accepts.
func modelDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	manifest := `{"format":"virga.mlp/v1","file":"mlp.json","signature":{"inputs":[{"name":"pixels","datatype":"FP32","shape":[-1,64]}],"outputs":[{"name":"label","datatype":"INT64","shape":[-1]}]},"max_batch":8}`
	if err := os.WriteFile(filepath.Join(dir, "virga-model.json"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "mlp.json"), []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// syncBuffer is a bytes.Buffer a process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
