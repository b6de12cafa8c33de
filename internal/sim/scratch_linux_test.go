package sim

import (
	"os"
	"syscall"
	"testing"
)

// A run keeps its files in shared memory when it has room, unless the user
// named a temporary directory.
func TestScratchRoot(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	if got := scratchRoot(); got != "" {
		t.Errorf("with TMPDIR set, scratchRoot() = %q, want the temporary directory (\"\")", got)
	}
	os.Unsetenv("TMPDIR") // restored by Setenv's cleanup
	var st syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &st); err != nil || uint64(st.Bavail)*uint64(st.Bsize) < 1<<30 {
		t.Skipf("/dev/shm has less than a GiB free (%v): the run's files go to the temporary directory", err)
	}
	if got := scratchRoot(); got != "/dev/shm" {
		t.Errorf("scratchRoot() = %q, want /dev/shm", got)
	}
}
