// Package slurmtest lets the tests that run against the single-host test
// cluster of scripts/slurm.sh take turns: `go test ./...` runs packages in
// parallel, and two packages preempting jobs, filling nodes or counting
// the controller's RPCs on the same two nodes would disturb each other.
package slurmtest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Env is the variable that says the test cluster runs (scripts/test.sh
// sets it after scripts/slurm.sh start).
const Env = "VIRGA_TEST_SLURM"

// LockFile is the file whose exclusive flock a test holds while it uses
// the cluster.
var LockFile = filepath.Join(os.TempDir(), "virga-slurm-test.lock")

// Need skips t unless the test cluster runs, and otherwise waits for the
// cluster (an exclusive flock on LockFile, blocking) and holds it until t
// and its subtests end.
func Need(t testing.TB) {
	t.Helper()
	if os.Getenv(Env) == "" {
		t.Skip(Env + " is not set: start the test cluster with scripts/slurm.sh start and export " + Env +
			"=1 (scripts/test.sh does both)")
	}
	f, err := os.OpenFile(LockFile, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("opening the Slurm test lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("taking the Slurm test lock %s: %v", LockFile, err)
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
}
