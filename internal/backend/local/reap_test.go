package local

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virga-ml/virga/internal/backend"
)

// Reaping a shim that ran a trial must cost its parent (the server, which
// reaps a shim per trial) next to nothing. It once cost 1.5–2 ms of CPU a
// shim, 45% of the server's CPU in the control-plane benchmark, because the
// shim looked up /proc entries of threads other than its main one, which
// the kernel invalidates one by one at the reap (see shimChildren).
func TestShimCheapToReap(t *testing.T) {
	if !procChildren() {
		t.Skip("the kernel keeps no children lists (CONFIG_PROC_CHILDREN)")
	}
	const shims = 20
	root := t.TempDir()
	runtime.LockOSThread() // the reap's CPU is measured on this thread
	defer runtime.UnlockOSThread()
	var reaping time.Duration
	for i := range shims {
		dir := filepath.Join(root, strconv.Itoa(i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		// The test binary is the shim (TestMain); "sh -c 'sleep 0.05'"
		// leaves the shim time to scan for the group's members.
		cmd := exec.Command(os.Args[0], "--dir", dir, "--", "sh", "-c", "sleep 0.05")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if err != unix.EINTR {
				if err != nil {
					t.Fatal(err)
				}
				break
			}
		}
		before := threadCPU(t)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("shim %d: %v (output.log: %s)", i, err, readFile(filepath.Join(dir, OutputFile)))
		}
		reaping += threadCPU(t) - before
		if _, err := readExitRecord(dir); err != nil {
			t.Fatalf("shim %d recorded no end: %v", i, err)
		}
	}
	if per := reaping / shims; per > 300*time.Microsecond {
		t.Errorf("reaping a shim took %s of CPU on average, want under 300µs", per)
	}
}

// threadCPU is the calling thread's CPU time so far.
func threadCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// A shim whose attempt is over takes the next one: no exec per attempt.
// Each attempt still gets its own exit status, output log, process group and
// environment.
func TestShimReused(t *testing.T) {
	t.Parallel()
	b := newBackend(t, Config{WarmShims: 1})
	var shimPIDs []int
	for i, code := range []int{3, 0, 5, 0} {
		s := shSpec(t, int64(i+1), `echo "attempt $ATTEMPT pgid $(ps -o pgid= $$ | tr -d ' ')"; exit `+strconv.Itoa(code))
		s.Env = map[string]string{"ATTEMPT": strconv.Itoa(i + 1)}
		started := start(t, b, s)
		ev := expect(t, b, s.AttemptID, backend.Exited)
		if ev.ExitCode == nil || *ev.ExitCode != code {
			t.Fatalf("attempt %d: Exited = %+v, want exit code %d", i+1, ev, code)
		}
		out := readOutput(t, s.Dir)
		if want := "attempt " + strconv.Itoa(i+1) + " pgid " + strconv.Itoa(started.PID); !strings.Contains(out, want) {
			t.Errorf("attempt %d: output.log = %q, want %q (its own environment and process group)", i+1, out, want)
		}
		rec, err := readShimRecord(s.Dir)
		if err != nil {
			t.Fatal(err)
		}
		shimPIDs = append(shimPIDs, rec.ShimPID)
	}
	// A fresh warm shim may be ready before the last one is back, and is
	// then handed the next attempt; but with one kept warm, no more than one
	// shim a Start is launched, and the ones back are taken first.
	if len(slices.Compact(slices.Sorted(slices.Values(shimPIDs)))) == len(shimPIDs) {
		t.Errorf("shims %v: no attempt reused a shim", shimPIDs)
	}
}
