package local

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
