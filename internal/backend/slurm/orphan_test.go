package slurm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
)

// submitLate plays the sbatch of a server that died while it ran: the job
// of s, exactly as b's Start submits it, reaches Slurm after its server is
// gone (the server never learnt its job ID).
func submitLate(t *testing.T, b *Backend, s *backend.StartSpec) string {
	t.Helper()
	p, err := b.poolNamed(s.Pool)
	if err != nil {
		t.Fatal(err)
	}
	script, args := b.job(s, p)
	cmd := exec.Command(b.cfg.Sbatch, args...)
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch by hand: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// waitState waits until the job named name is in one of states, and
// returns the state.
func waitState(t *testing.T, name string, timeout time.Duration, states ...string) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var st string
	for time.Now().Before(deadline) {
		if st = squeueState(t, name); st != "" && strings.Contains(" "+strings.Join(states, " ")+" ", " "+st+" ") {
			return st
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("job %s is %q after %s, want one of %v", name, st, timeout, states)
	return ""
}

// TestOrphanJobs: a server killed while sbatch runs leaves a job that it
// never learnt the ID of. The restarted server adopts it if its attempt is
// still live, and cancels it before it runs if the attempt was settled
// meanwhile (found lost while that sbatch was still under way, and run
// again as a new attempt): the trial's work runs once.
func TestOrphanJobs(t *testing.T) {
	needCluster(t)
	prefix := fmt.Sprintf("vo%d-%s", os.Getpid(), time.Now().Format("150405"))
	t.Cleanup(func() { cancelJobs(prefix) })
	ctx := context.Background()
	h := newHarness(t, prefix) // the restarted server

	// 1. Attempt 31 is still live: the restarted server adopts its job,
	// which runs once, to its end.
	m31 := t.TempDir()
	submitLate(t, h.b, startSpec(t, 31, "od1", m31, "run", "1", "3"))
	if err := h.b.Adopt(ctx, &virga.Attempt{ID: 31, Pool: "od1"}, node1CPU); err != nil {
		t.Fatal(err)
	}
	if ev := h.exited(t, 31, 60*time.Second, true); exitCode(ev) != 3 || !exists(filepath.Join(m31, "start-0")) {
		t.Fatalf("adopted orphan: %+v (ran: %v), want exit code 3", ev, exists(filepath.Join(m31, "start-0")))
	}

	// 2. Attempt 32 was adopted before its sbatch got through: found lost,
	// its trial runs again as attempt 33. Then 32's job reaches Slurm.
	if err := h.b.Adopt(ctx, &virga.Attempt{ID: 32, Pool: "od1"}, node1CPU); err != nil {
		t.Fatal(err)
	}
	if ev := h.exited(t, 32, 30*time.Second, false); !ev.Lost {
		t.Fatalf("adopted before its job existed: %+v, want Lost", ev)
	}
	m33 := t.TempDir()
	if err := h.b.Start(ctx, startSpec(t, 33, "od1", m33, "run", "4", "0")); err != nil {
		t.Fatal(err)
	}
	m32 := t.TempDir()
	submitLate(t, h.b, startSpec(t, 32, "od1", m32, "run", "1", "0"))
	waitState(t, JobName(prefix, 32), 20*time.Second, "CANCELLED", "COMPLETED", "FAILED")
	if b, err := os.ReadFile(filepath.Join(m32, "start-0")); err == nil {
		t.Fatalf("the orphan job of lost attempt 32 ran the trial (%s)", bytes.TrimSpace(b))
	}
	if st := squeueState(t, JobName(prefix, 32)); st != "CANCELLED" {
		t.Fatalf("the orphan job of lost attempt 32 is %s, want CANCELLED", st)
	}
	if ev := h.exited(t, 33, 60*time.Second, true); exitCode(ev) != 0 || !exists(filepath.Join(m33, "start-0")) {
		t.Fatalf("the trial's new attempt: %+v, want exit code 0", ev)
	}

	// 3. Once every live attempt is adopted, a job with the server's
	// prefix of an attempt it never heard of (settled by an earlier
	// server) is cancelled too, even with no attempt left to watch.
	m34 := t.TempDir()
	submitLate(t, h.b, startSpec(t, 34, "od1", m34, "run", "1", "0"))
	h.b.AdoptedAll() // a poll at once: nothing else would run one
	waitState(t, JobName(prefix, 34), 20*time.Second, "CANCELLED", "COMPLETED", "FAILED")
	if st := squeueState(t, JobName(prefix, 34)); st != "CANCELLED" || exists(filepath.Join(m34, "start-0")) {
		t.Fatalf("the job of unknown attempt 34 is %s (ran: %v), want CANCELLED before it ran", st, exists(filepath.Join(m34, "start-0")))
	}
}
