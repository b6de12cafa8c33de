package local

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
)

func TestAdoptLive(t *testing.T) {
	t.Parallel()
	capacity := virga.Resources{CPU: 4, MemoryMB: 4096}
	res := virga.Resources{CPU: 1, MemoryMB: 100}
	a := newBackend(t, Config{Capacity: capacity})
	s := shSpec(t, 7, `echo ready; exec sleep 100`)
	s.Resources = res
	started := start(t, a, s)
	waitOutput(t, s.Dir, "ready")
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if processGone(started.PID) {
		t.Fatal("Close killed the trial")
	}

	b := newBackend(t, Config{Capacity: capacity})
	if err := b.Adopt(context.Background(), &virga.Attempt{ID: 7, Dir: s.Dir}, res); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, b, 7, backend.Started)
	if ev.PID != started.PID {
		t.Errorf("adopted Started pid %d, want %d", ev.PID, started.PID)
	}
	if diff := cmp.Diff(capacity.Sub(res), b.Free()); diff != "" {
		t.Errorf("Free (-want,+got):\n%s", diff)
	}
	if err := b.Adopt(context.Background(), &virga.Attempt{ID: 7, Dir: s.Dir}, res); !errors.Is(err, virga.ErrConflict) {
		t.Errorf("second Adopt: %v, want ErrConflict", err)
	}
	if err := b.Stop(7, 0); err != nil {
		t.Fatal(err)
	}
	ev = expect(t, b, 7, backend.Exited)
	if ev.Signal != "killed" {
		t.Fatalf("Exited = %+v, want signal killed", ev)
	}
	if diff := cmp.Diff(capacity, b.Free()); diff != "" {
		t.Errorf("Free after exit (-want,+got):\n%s", diff)
	}
}

func TestAdoptFinished(t *testing.T) {
	t.Parallel()
	a := newBackend(t, Config{})
	s := shSpec(t, 3, `exit 5`)
	start(t, a, s)
	expect(t, a, 3, backend.Exited)
	a.Close()

	b := newBackend(t, Config{})
	if err := b.Adopt(context.Background(), &virga.Attempt{ID: 3, Dir: s.Dir}, virga.Resources{CPU: 1}); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, b, 3, backend.Exited)
	if ev.ExitCode == nil || *ev.ExitCode != 5 {
		t.Fatalf("Exited = %+v, want exit code 5", ev)
	}
	if b.Free() != b.Capacity() {
		t.Errorf("a finished adopted attempt holds resources: free %+v", b.Free())
	}
	assertLockFree(t, s.Dir)
}

// assertLockFree checks that no one holds dir's shim.lock (taking it and
// letting go). It polls: a child another test forks shares the backend's lock
// file until it executes (close-on-exec), so the lock can outlive its Close
// for a moment.
func assertLockFree(t *testing.T, dir string) {
	t.Helper()
	waitFor(t, "the lock to be free before Close", func() bool {
		f, locked, err := openLock(dir)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		return locked
	})
}

// runShim runs the test binary as a shim on dir and returns its exit code.
func runShimOn(t *testing.T, dir string, argv ...string) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"--dir", dir, "--"}, argv...)...)
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode()
}

// A server adopting an attempt whose shim died (lock free, no exit.json)
// kills what is left of the trial's process group.
func TestAdoptDeadShimKillsTrialGroup(t *testing.T) {
	t.Parallel()
	// A shim no backend watches (its server is gone), killed outright.
	s := shSpec(t, 4, `sleep 100 & echo $! > child; echo ready; wait`)
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	shim := exec.Command(os.Args[0], append([]string{"--dir", s.Dir, "--workdir", s.Workdir, "--"}, s.Argv...)...)
	if err := shim.Start(); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, s.Dir, "ready")
	child := readPIDFile(t, filepath.Join(s.Workdir, "child"))
	t.Cleanup(func() { unix.Kill(child, unix.SIGKILL) })
	if err := shim.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	shim.Wait()
	if processGone(child) {
		t.Fatal("the grandchild died with the shim; the test proves nothing")
	}
	b := newBackend(t, Config{})
	if err := b.Adopt(context.Background(), &virga.Attempt{ID: 4, Dir: s.Dir}, virga.Resources{}); err != nil {
		t.Fatal(err)
	}
	if ev := expect(t, b, 4, backend.Exited); !ev.Lost {
		t.Fatalf("Exited = %+v, want Lost", ev)
	}
	waitFor(t, "the grandchild to die", func() bool { return processGone(child) })
}

func TestAdoptNeverStarted(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "attempt")
	ran := filepath.Join(t.TempDir(), "ran")
	b := newBackend(t, Config{})
	if err := b.Adopt(context.Background(), &virga.Attempt{ID: 9, Dir: dir}, virga.Resources{}); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, b, 9, backend.Exited)
	if !ev.Lost {
		t.Fatalf("Exited = %+v, want Lost", ev)
	}
	// b let go of the lock at once: exit.json alone keeps a late shim out.
	assertLockFree(t, dir)
	if code := runShimOn(t, dir, "touch", ran); code != ShimExitLocked {
		t.Errorf("late shim exited %d, want %d", code, ShimExitLocked)
	}
	b.Close()
	if code := runShimOn(t, dir, "touch", ran); code != ShimExitLocked {
		t.Errorf("late shim after Close exited %d, want %d", code, ShimExitLocked)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("a late shim started the trial")
	}
	// A later server reads the same verdict.
	c := newBackend(t, Config{})
	if err := c.Adopt(context.Background(), &virga.Attempt{ID: 9, Dir: dir}, virga.Resources{}); err != nil {
		t.Fatal(err)
	}
	if ev := expect(t, c, 9, backend.Exited); !ev.Lost {
		t.Fatalf("Exited = %+v, want Lost", ev)
	}
}

func TestShimUsage(t *testing.T) {
	t.Parallel()
	if code := ShimMain([]string{"--", "true"}); code != ShimExitUsage {
		t.Errorf("no --dir: exit %d, want %d", code, ShimExitUsage)
	}
	if code := ShimMain([]string{"--dir", t.TempDir()}); code != ShimExitUsage {
		t.Errorf("no argv: exit %d, want %d", code, ShimExitUsage)
	}
}
