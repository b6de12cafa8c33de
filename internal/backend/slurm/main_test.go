package slurm

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/agent"
)

// TestMain lets the test binary stand in for `virga agent` on the nodes:
// invoked as `BINARY agent`, it runs fakeAgent instead of the tests.
func TestMain(m *testing.M) {
	if len(os.Args) == 2 && os.Args[1] == "agent" {
		os.Exit(fakeAgent())
	}
	os.Exit(m.Run())
}

// fakeAgent plays the agent for the tests: it decodes the Spec, writes
// markers in the directory Env["MARKERS"] (start-NODEID, term-NODEID) and
// follows Argv:
//
//	run SECONDS CODE [NODE]   sleep, then exit CODE (only on node NODE if given;
//	                          the other nodes sleep on)
//	ignore-term ...           as run, but SIGTERM is recorded and ignored
//	sh ...                    the real agent runs the trial (agent.Run)
//
// On SIGTERM (unless ignored) it exits TERMCODE from Env (default 143)
// after Env["TERM_DELAY"] seconds.
func fakeAgent() int {
	spec, err := agent.Decode(os.Getenv(agent.EnvSpec))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake agent:", err)
		return 90
	}
	if spec.Argv[0] == "sh" {
		// A shell trial (the conformance suite's): the real agent runs it.
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		code, err := agent.Run(ctx, agent.Options{Spec: spec})
		if err != nil {
			fmt.Fprintln(os.Stderr, "virga agent:", err)
		}
		return min(code, 255)
	}
	node := os.Getenv("SLURM_NODEID")
	dir := spec.Env["MARKERS"]
	mark := func(name, text string) {
		if dir != "" {
			_ = os.WriteFile(filepath.Join(dir, name+"-"+node), []byte(text), 0o644)
		}
	}
	mark("start", fmt.Sprintf("%s %s %s %d", os.Getenv("SLURMD_NODENAME"), os.Getenv("SLURM_JOB_ID"),
		os.Getenv("SLURM_JOB_NODELIST"), time.Now().UnixNano()))
	argv := spec.Argv
	ignore := argv[0] == "ignore-term"
	if ignore {
		argv = argv[1:]
	}
	secs, code := 3600.0, 0
	if len(argv) >= 3 && argv[0] == "run" {
		secs, _ = strconv.ParseFloat(argv[1], 64)
		code, _ = strconv.Atoi(argv[2])
		if len(argv) >= 4 && argv[3] != node {
			secs = 3600
		}
	}
	termCode := 143
	if v := spec.Env["TERM_CODE"]; v != "" {
		termCode, _ = strconv.Atoi(v)
	}
	delay, _ := strconv.ParseFloat(spec.Env["TERM_DELAY"], 64)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM)
	done := time.After(time.Duration(secs * float64(time.Second)))
	for {
		select {
		case <-done:
			return code
		case <-sigs:
			mark("term", strconv.FormatInt(time.Now().UnixNano(), 10))
			if ignore {
				continue
			}
			time.Sleep(time.Duration(delay * float64(time.Second)))
			return termCode
		}
	}
}
