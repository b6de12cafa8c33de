// Command steptrial is the trial Virga's end-to-end tests run: it does `steps`
// steps of `sleep_ms` milliseconds, keeps its step in a checkpoint, reports
// "loss" after each step and writes a ledger the tests check:
//
//	DIR/trial-ID.log   "start pid=P from=F", "step s pid=P", "ack s pid=P"
//	DIR/violations     a line for every moment two processes of one trial lived at once
//
// DIR is $STEPTRIAL_LEDGER. Hyperparameters: steps, sleep_ms, x, fail_at
// (exit 3 after that step on the first attempt only), report (http|stdout),
// checkpoint_every (write the checkpoint after every that many steps, at
// once before the step's report; default 1).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/virga-ml/virga/sdk/go/trial"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "steptrial:", err)
		os.Exit(1)
	}
}

func run() error {
	t, err := trial.FromEnv()
	if err != nil {
		return err
	}
	steps := t.Int("steps", 5)
	sleep := time.Duration(t.Int("sleep_ms", 20)) * time.Millisecond
	x := t.Float("x", 0)
	failAt := t.Int("fail_at", -1)
	mode := t.String("report", "http")
	every := max(t.Int("checkpoint_every", 1), 1)
	dir := os.Getenv("STEPTRIAL_LEDGER")
	id := strconv.FormatInt(t.TrialID(), 10)
	pid := os.Getpid()

	// Two live processes of one trial would both want this lock.
	lock, err := os.OpenFile(filepath.Join(dir, "trial-"+id+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		appendLine(filepath.Join(dir, "violations"), fmt.Sprintf("trial %s: pid %d started while another process of it lives", id, pid))
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
			return err
		}
	}
	ledger := filepath.Join(dir, "trial-"+id+".log")
	ckpt := filepath.Join(t.CheckpointDir(), "step")
	from := 0
	if b, err := os.ReadFile(ckpt); err == nil {
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return fmt.Errorf("corrupt checkpoint %q: %w", b, err)
		}
		from = n + 1
	}
	appendLine(ledger, fmt.Sprintf("start pid=%d from=%d attempt=%d", pid, from, t.AttemptID()))
	ctx := context.Background()
	for s := from; s < steps; s++ {
		select {
		case <-t.Stopping():
			os.Exit(trial.StoppedExitCode)
		case <-time.After(sleep):
		}
		appendLine(ledger, fmt.Sprintf("step %d pid=%d", s, pid))
		if (s+1)%every == 0 {
			tmp := ckpt + ".tmp"
			if err := os.WriteFile(tmp, []byte(strconv.Itoa(s)), 0o644); err != nil {
				return err
			}
			if err := os.Rename(tmp, ckpt); err != nil {
				return err
			}
		}
		loss := (x-0.3)*(x-0.3) + 1/float64(s+1)
		if mode == "stdout" {
			fmt.Printf("VIRGA_METRIC {\"step\":%d,\"metrics\":{\"loss\":%g}}\n", s, loss)
			continue
		}
		d, err := t.Report(ctx, int64(s), map[string]float64{"loss": loss})
		if errors.Is(err, trial.ErrSuperseded) {
			return nil
		}
		if err != nil {
			return err
		}
		appendLine(ledger, fmt.Sprintf("ack %d pid=%d", s, pid))
		if d == trial.Stop {
			return nil
		}
		if s == failAt && t.AttemptID() > 0 && from == 0 {
			os.Exit(3)
		}
	}
	return nil
}

// appendLine appends one durable line.
func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "steptrial: ledger:", err)
		os.Exit(1)
	}
	_, _ = f.WriteString(line + "\n")
	_ = f.Sync()
	_ = f.Close()
}
