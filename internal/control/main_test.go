package control_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/backend/local"
	"github.com/virga-ml/virga/sdk/go/trial"
)

const (
	// shimEnv makes the test binary act as `virga shim` when the local
	// backend executes it.
	shimEnv = "VIRGA_TEST_SHIM"
	// trialEnv makes the test binary act as a trial (trialMain).
	trialEnv = "CONTROL_TEST_TRIAL"
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(shimEnv) == "1":
		os.Exit(local.ShimMain(os.Args[1:]))
	case os.Getenv(trialEnv) == "1":
		os.Exit(trialMain())
	}
	os.Exit(runRefusingIllegalTransitions(m))
}

// shimCommand runs this test binary as the shim. The variable is set for
// the shim only, not in this process, whose environment trials inherit.
func shimCommand() []string {
	return []string{"env", shimEnv + "=1", "GORACE=atexit_sleep_ms=0", os.Args[0]}
}

// trialMain is a trainer speaking Virga's trial protocol through the Go SDK:
// it resumes from the step in its checkpoint, takes a step every 40 ms up to
// TRIAL_STEPS, reporting each, and on SIGTERM saves its step as a checkpoint
// and reports it; then it exits, or with TRIAL_IGNORE_TERM=1 runs on until
// it is killed. It records in TRIAL_OUT the step each attempt started from
// ("attempt-ID") and the step and time of the SIGTERM ("term-ID").
func trialMain() int {
	tr, err := trial.FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	stopping := tr.Stopping() // the handler first: SIGTERM may come at once
	ctx := context.Background()
	out := os.Getenv("TRIAL_OUT")
	steps, _ := strconv.ParseInt(os.Getenv("TRIAL_STEPS"), 10, 64)
	ckpt := filepath.Join(tr.CheckpointDir(), "step")
	var step int64
	if data, err := os.ReadFile(ckpt); err == nil {
		step, _ = strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	}
	record := func(name, text string) {
		_ = os.WriteFile(filepath.Join(out, name+"-"+strconv.FormatInt(tr.AttemptID(), 10)), []byte(text), 0o644)
	}
	record("attempt", strconv.FormatInt(step, 10))
	report := func() error {
		_, err := tr.Report(ctx, step, map[string]float64{"loss": 1 / float64(step+1)})
		return err
	}
	tick := time.NewTicker(40 * time.Millisecond)
	defer tick.Stop()
	for step < steps {
		select {
		case <-stopping:
			if err := os.WriteFile(ckpt, []byte(strconv.FormatInt(step, 10)), 0o644); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			if err := report(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			record("term", fmt.Sprintf("%d %d", step, time.Now().UnixNano()))
			if os.Getenv("TRIAL_IGNORE_TERM") != "1" {
				return trial.StoppedExitCode
			}
			time.Sleep(time.Hour) // until SIGKILL
			return 1
		case <-tick.C:
			step++
			if err := report(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
	}
	return 0
}
