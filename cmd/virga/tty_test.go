package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store/sqlite"
)

// openPTY returns a new pseudo-terminal's master and slave.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("opening /dev/ptmx: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlocking the pty: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("opening the pty's slave: %v", err)
	}
	return m, s
}

// screen collects what a program writes to its terminal.
type screen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// TestCtrlCAsksOnATerminal runs `virga run` on a real terminal, types Ctrl-C
// and answers "s": the experiment is stopped and its trials end.
func TestCtrlCAsksOnATerminal(t *testing.T) {
	dir := t.TempDir()
	exp := stepExperiment(t, dir, "tty", 2, 2, 200, 50, "")
	master, slave := openPTY(t)
	defer master.Close()
	cmd := exec.Command(virgaBin, "run", exp)
	cmd.Dir = dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	// Its own session with the pty as controlling terminal, as in a shell.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	out := &screen{}
	go func() { _, _ = io.Copy(out, master) }()
	waitFor(t, "the live table", 30*time.Second, func() bool {
		return strings.Contains(out.String(), "TRIAL") && strings.Contains(out.String(), "RUNNING")
	})
	if _, err := master.Write([]byte{3}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	waitFor(t, "the question", 10*time.Second, func() bool { return strings.Contains(out.String(), "[s], or leave it running [l]?") })
	if _, err := master.Write([]byte("s\n")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
			t.Fatalf("virga run: %v, want exit 130\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("virga run did not end after the answer:\n%s", out.String())
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, ".virga", "virga.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e, err := st.Experiment(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if e.State != virga.ExperimentStopped {
		t.Errorf("experiment %s (%s), want STOPPED\n%s", e.State, e.Message, out.String())
	}
}
