package local

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/virga-ml/virga/internal/backend"
)

// warmShim is a shim, already executed and initialised, waiting on its
// stdin for the attempts to run (ShimMain's --spec-stdin --reuse). Handing
// it an attempt takes one pipe write instead of an exec, which keeps the
// shim's start-up off Start's path; and once the attempt is over the shim
// can take the next one, which spares an exec and a Go runtime's start per
// attempt (most of a shim's CPU).
type warmShim struct {
	cmd   *exec.Cmd
	specW *os.File      // the shim's stdin
	pidR  *os.File      // the shim's fd 3
	lines *bufio.Reader // of pidR: a pid line when a trial starts, endLine when an attempt is over
}

// launchWarm starts one idle shim. It runs in a session of its own from the
// start; if this server dies, its stdin ends and it exits having done nothing.
func (b *Backend) launchWarm() (*warmShim, error) { return b.startShim("/", nil) }

// startShim starts a shim waiting for its attempt on stdin (--spec-stdin), in
// dir, with stdout and stderr to out (nil: /dev/null) until it has the
// attempt.
func (b *Backend) startShim(dir string, out *os.File) (*warmShim, error) {
	specR, specW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("creating a shim's stdin: %w", err)
	}
	defer specR.Close()
	pidR, pidW, err := os.Pipe()
	if err != nil {
		specW.Close()
		return nil, fmt.Errorf("creating a shim's pid pipe: %w", err)
	}
	defer pidW.Close()
	args := append(append([]string(nil), b.shim[1:]...), "--spec-stdin", "--reuse", "--pid-fd", "3")
	cmd := exec.Command(b.shim[0], args...)
	cmd.Dir = dir
	cmd.Stdin = specR
	if out != nil {
		cmd.Stdout, cmd.Stderr = out, out
	}
	cmd.ExtraFiles = []*os.File{pidW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		specW.Close()
		pidR.Close()
		return nil, fmt.Errorf("launching a shim %s: %w", b.shim[0], err)
	}
	return &warmShim{cmd: cmd, specW: specW, pidR: pidR, lines: bufio.NewReaderSize(pidR, 64)}, nil
}

// hand writes the attempt to the shim's stdin. On failure (the shim died:
// EPIPE) the shim is reaped in the background.
func (w *warmShim) hand(msg []byte) error {
	_, err := w.specW.Write(msg)
	if err != nil {
		w.release()
	}
	return err
}

// reuse puts a shim whose attempt is over back with the idle ones, or sends
// it away if there are enough (or the backend is closed). Up to twice
// Config.WarmShims are kept: the refill loop tops the idle shims up as soon
// as one is handed an attempt, so a cap of WarmShims would send most shims
// away at the end of their attempt.
func (b *Backend) reuse(w *warmShim) {
	b.mu.Lock()
	if b.closed || len(b.idle) >= 2*b.warm {
		b.mu.Unlock()
		w.release()
		return
	}
	b.idle = append(b.idle, w)
	b.mu.Unlock()
}

// shimSpecFor is the JSON a shim is handed for s.
func (b *Backend) shimSpecFor(s *backend.StartSpec) ([]byte, error) {
	msg, err := json.Marshal(shimSpec{
		Dir: s.Dir, Workdir: s.Workdir, ReportURL: s.ReportURL, Token: s.Token,
		Env: trialEnv(s), Argv: s.Argv, Drain: &b.drain,
	})
	if err != nil {
		return nil, fmt.Errorf("encoding the attempt for the shim: %w", err)
	}
	return msg, nil
}

// release sends an idle shim away and reaps it in the background.
func (w *warmShim) release() {
	w.specW.Close()
	w.pidR.Close()
	go w.cmd.Wait() //nolint:errcheck // it exits 0 on EOF; nothing to report
}

// refillLoop keeps b.warm idle shims ready until Close.
func (b *Backend) refillLoop() {
	defer b.wg.Done()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-b.refill:
		}
		for {
			b.mu.Lock()
			need := !b.closed && len(b.idle) < b.warm
			b.mu.Unlock()
			if !need {
				break
			}
			w, err := b.launchWarm()
			if err != nil {
				break // Start launches cold shims meanwhile; retried on the next Start
			}
			b.mu.Lock()
			if b.closed {
				b.mu.Unlock()
				w.release()
				return
			}
			b.idle = append(b.idle, w)
			b.mu.Unlock()
		}
	}
}

// askRefill wakes the refill loop without blocking.
func (b *Backend) askRefill() {
	if b.warm <= 0 {
		return
	}
	select {
	case b.refill <- struct{}{}:
	default:
	}
}

// launchWarmFor hands s to an idle shim; it returns nil if none is ready (or
// the ones there died idle), and the caller launches a cold one.
func (b *Backend) launchWarmFor(s *backend.StartSpec) (*warmShim, error) {
	defer b.askRefill()
	var msg []byte
	for {
		b.mu.Lock()
		if len(b.idle) == 0 {
			b.mu.Unlock()
			return nil, nil
		}
		w := b.idle[len(b.idle)-1] // the last one back: its pages are likelier in memory
		b.idle = b.idle[:len(b.idle)-1]
		b.mu.Unlock()

		if msg == nil {
			if err := os.MkdirAll(s.Dir, 0o755); err != nil {
				w.release()
				return nil, fmt.Errorf("creating the attempt directory: %w", err)
			}
			var err error
			if msg, err = b.shimSpecFor(s); err != nil {
				w.release()
				return nil, err
			}
		}
		if err := w.hand(msg); err != nil { // it died while idle (EPIPE): try the next
			continue
		}
		return w, nil
	}
}
