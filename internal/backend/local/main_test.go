package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/agent"
	"github.com/virga-ml/virga/internal/backend"
)

// shimEnv makes the test binary act as `virga shim` when it is re-executed.
const shimEnv = "VIRGA_TEST_SHIM"

func init() {
	if os.Getenv(shimEnv) == "1" {
		ShimThread()
	}
}

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "gang" {
		// The gang launcher (Config.GangCommand), started by a shim.
		os.Exit(agent.GangMain(os.Args[2:]))
	}
	if os.Getenv(shimEnv) == "1" {
		os.Exit(ShimMain(os.Args[1:]))
	}
	// Shims launched by the backend inherit this environment.
	os.Setenv(shimEnv, "1")
	if os.Getenv("GORACE") == "" {
		// A race-enabled shim would otherwise sleep 1 s at exit.
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	os.Exit(m.Run())
}

// newBackend returns a backend whose shim is this test binary, closed at the
// end of the test.
func newBackend(t testing.TB, cfg Config) *Backend {
	t.Helper()
	cfg.ShimCommand = []string{os.Args[0]}
	if cfg.GangCommand == nil {
		cfg.GangCommand = []string{os.Args[0], "gang"}
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// shSpec is a StartSpec running script with sh -c in a fresh directory.
func shSpec(t testing.TB, id int64, script string) *backend.StartSpec {
	t.Helper()
	root := t.TempDir()
	return &backend.StartSpec{
		AttemptID: id,
		TrialID:   id,
		Argv:      []string{"sh", "-c", script},
		Workdir:   root,
		Dir:       filepath.Join(root, "attempt"),
	}
}

// nextEvent returns the backend's next event, failing after 15 s.
func nextEvent(t testing.TB, b *Backend) backend.Event {
	t.Helper()
	select {
	case ev, ok := <-b.Events():
		if !ok {
			t.Fatal("events channel closed")
		}
		return ev
	case <-time.After(15 * time.Second):
		t.Fatal("no event within 15s")
	}
	panic("unreachable")
}

// expect returns the next event and checks its attempt and kind.
func expect(t testing.TB, b *Backend, id int64, kind backend.EventKind) backend.Event {
	t.Helper()
	ev := nextEvent(t, b)
	if ev.AttemptID != id || ev.Kind != kind {
		t.Fatalf("got event %+v, want %s for attempt %d", ev, kind, id)
	}
	return ev
}

// start starts s and returns its Started event.
func start(t testing.TB, b *Backend, s *backend.StartSpec) backend.Event {
	t.Helper()
	if err := b.Start(context.Background(), s); err != nil {
		t.Fatalf("Start: %v", err)
	}
	ev := expect(t, b, s.AttemptID, backend.Started)
	if ev.PID <= 0 {
		t.Fatalf("Started without a pid: %+v", ev)
	}
	return ev
}

// waitFor polls cond until it holds, failing after 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitOutput waits until the attempt's output.log contains s.
func waitOutput(t testing.TB, dir, s string) {
	t.Helper()
	waitFor(t, "output "+s, func() bool { return strings.Contains(readOutput(t, dir), s) })
}

func readOutput(t testing.TB, dir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, OutputFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(data)
}

// processGone reports whether pid no longer runs (absent or a zombie).
func processGone(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z'
}

// readPIDFile reads a pid a trial wrote to path.
func readPIDFile(t testing.TB, path string) int {
	t.Helper()
	var pid int
	waitFor(t, path, func() bool {
		data, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil && pid > 0
	})
	return pid
}
