package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/client"
	"github.com/virga-ml/virga/internal/backend/slurm"
	"github.com/virga-ml/virga/internal/backend/slurm/slurmtest"
	"github.com/virga-ml/virga/internal/server"
)

// needSlurm skips without the test cluster and otherwise takes turns with
// the other packages' tests that use it.
func needSlurm(t *testing.T) {
	t.Helper()
	slurmtest.Need(t)
}

// slurmCapacity writes a capacity file of the test cluster's spot partition:
// the server reads the CPUs, the nodes, that it is preempted and the warning
// from the partition.
func slurmCapacity(t *testing.T, dir string) string {
	p := filepath.Join(dir, "slurm.yaml")
	y := `pools:
  - name: spot
    backend: slurm
    node: {memory: 1000MiB}
    price: 0.3
    on_demand_price: 1
`
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSlurmPreemptionEndToEnd runs an experiment on the real Slurm test
// cluster through `virga agent`, and preempts its trials with a
// high-priority job that takes both nodes: the experiment completes, every
// step is acknowledged, each preemption repeats at most the one step after
// the last checkpoint (the checkpoint interval), preemptions count no
// restart, and the attempts that Slurm preempted end PREEMPTED.
func TestSlurmPreemptionEndToEnd(t *testing.T) {
	needSlurm(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	srv, err := server.Start(context.Background(), server.Config{DataDir: filepath.Join(dir, "state"), Version: "test",
		CapacityFile: slurmCapacity(t, dir), Agent: virgaBin})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c := client.New(srv.URL, srv.Token)
	exp := stepExperiment(t, dir, "slurm-preempt", 2, 2, 40, 150, "")
	b, _ := os.ReadFile(exp)
	b = []byte(strings.Replace(string(b), "stop_grace: 5s", "stop_grace: 10s\nresources: {cpu: 1, memory: 200MiB}", 1))
	e, err := c.Submit(context.Background(), "slurm-preempt.yaml", b)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both trials to pass step 5 on Slurm", 90*time.Second, func() bool {
		ts, err := c.Trials(context.Background(), e.ID)
		if err != nil || len(ts) != 2 {
			return false
		}
		return ts[0].Step >= 5 && ts[1].Step >= 5
	})
	// A job of the high-priority partition that needs both whole nodes.
	out, err := exec.Command("sbatch", "--parsable", "--partition=ondemand", "--nodes=2", "--exclusive",
		"--job-name=virga-test-preemptor", "--output=/dev/null", "--wrap=sleep 3").CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch of the preempting job: %v\n%s", err, out)
	}
	t.Logf("preempting job %s", strings.TrimSpace(string(out)))
	waitDone(t, c, e.ID, 180*time.Second)

	ts, err := c.Trials(context.Background(), e.ID)
	if err != nil {
		t.Fatal(err)
	}
	preempted := 0
	for _, tr := range ts {
		if tr.State != virga.TrialCompleted {
			t.Errorf("trial %d: %s (%s); want COMPLETED", tr.ID, tr.State, tr.Message)
		}
		if tr.Restarts != 0 {
			t.Errorf("trial %d: %d restarts; a preemption is not the trial's failure", tr.ID, tr.Restarts)
		}
		v, err := c.Trial(context.Background(), tr.ID)
		if err != nil {
			t.Fatal(err)
		}
		var outcomes []string
		for _, a := range v.AttemptList {
			outcomes = append(outcomes, fmt.Sprintf("%d:%s/%s", a.Number, a.Pool, a.Outcome))
			if a.Outcome == virga.OutcomePreempted {
				preempted++
			}
		}
		l := readLedger(t, dir, tr.ID)
		ms, err := c.Metrics(context.Background(), tr.ID)
		if err != nil {
			t.Fatal(err)
		}
		stored := map[int64]bool{}
		for _, m := range ms {
			stored[m.Step] = true
		}
		for s := range 40 {
			// Nothing lost: every step's report is stored (a report stored
			// just as the preemption stopped the trial may not have reached
			// it: not acknowledged to the trial, but kept all the same).
			if !stored[int64(s)] {
				t.Errorf("trial %d: step %d is not stored (acknowledged to the trial: %v)", tr.ID, s, l.acks[s])
			}
			// Checkpointed every step: a preemption repeats at most the
			// step it interrupted.
			if n := len(l.steps[s]); n > 1+len(l.starts)-1 {
				t.Errorf("trial %d: step %d computed %d times over %d starts", tr.ID, s, n, len(l.starts))
			}
		}
		repeated := 0
		for _, pids := range l.steps {
			repeated += len(pids) - 1
		}
		if repeated > len(l.starts)-1 {
			t.Errorf("trial %d: %d steps repeated over %d resumptions; want at most one per resumption", tr.ID, repeated, len(l.starts)-1)
		}
		t.Logf("trial %d: attempts %v, starts %+v, steps repeated %d", tr.ID, outcomes, l.starts, repeated)
	}
	if preempted == 0 {
		t.Fatalf("no attempt ended PREEMPTED; the high-priority job should have preempted both trials")
	}
}

// TestSlurmCheckpointEveryNSteps: on the Slurm test cluster, through
// `virga agent`, a trial that reports every step and writes its checkpoint
// every 10 steps, reporting at once after each write, completes in one
// attempt with its last checkpoint recorded (the agent used to upload each
// checkpoint again at the next report, and the server to count every such
// repeat as unreported, until the fifth checkpoint's upload got 422).
func TestSlurmCheckpointEveryNSteps(t *testing.T) {
	needSlurm(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	srv, err := server.Start(context.Background(), server.Config{DataDir: filepath.Join(dir, "state"), Version: "test",
		CapacityFile: slurmCapacity(t, dir), Agent: virgaBin})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c := client.New(srv.URL, srv.Token)
	const steps = 60
	exp := stepExperiment(t, dir, "slurm-every", 1, 1, steps, 5, "  checkpoint_every: 10")
	b, _ := os.ReadFile(exp)
	b = []byte(strings.Replace(string(b), "stop_grace: 5s", "stop_grace: 5s\nresources: {cpu: 1, memory: 200MiB}", 1))
	e, err := c.Submit(context.Background(), "slurm-every.yaml", b)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, c, e.ID, 180*time.Second)
	ts, err := c.Trials(context.Background(), e.ID)
	if err != nil || len(ts) != 1 {
		t.Fatalf("trials: %v, %v", ts, err)
	}
	tr := ts[0]
	if tr.State != virga.TrialCompleted || tr.Step != steps-1 || tr.Checkpoint == "" {
		t.Errorf("trial %d: %s at step %d (%s), checkpoint %q; want COMPLETED at step %d with a checkpoint",
			tr.ID, tr.State, tr.Step, tr.Message, tr.Checkpoint, steps-1)
	}
	if l := readLedger(t, dir, tr.ID); len(l.starts) != 1 {
		t.Errorf("trial %d started %d times (%+v); want once", tr.ID, len(l.starts), l.starts)
	}
}

// TestDDPExampleSlurm runs examples/ddp-torch on the Slurm test cluster
// (examples/ddp-torch/slurm.yaml), twice: as the example says (one node, two
// processes), and as a gang of two nodes of one process each (one Slurm job
// of --nodes=2, an agent per node, MASTER_ADDR the first node).
func TestDDPExampleSlurm(t *testing.T) {
	needSlurm(t)
	if err := exec.Command("/usr/bin/python3", "-c", "import torch.distributed").Run(); err != nil {
		t.Fatalf("the DDP example needs PyTorch under /usr/bin/python3 (Debian's python3-torch; scripts/test.sh installs it): %v", err)
	}
	root, _ := filepath.Abs("../..")
	twoNodes := filepath.Join(t.TempDir(), "ddp-2nodes.yaml")
	b, err := os.ReadFile(filepath.Join(root, "examples/ddp-torch/experiment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	y := strings.Replace(string(b), "resources: {cpu: 1, processes_per_node: 2}", "resources: {cpu: 1, nodes: 2}", 1)
	y = strings.Replace(y, "workdir: ../..", "workdir: "+root, 1)
	// One trial: a grid of one point is refused, so run the single searcher.
	y = strings.Replace(y, "lr: {type: categorical, values: [0.05, 0.2]}", "lr: 0.2", 1)
	y = strings.Replace(y, "searcher: grid", "searcher: single", 1)
	if err := os.WriteFile(twoNodes, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, file, world string }{
		{"one node, two processes", "examples/ddp-torch/experiment.yaml", "2"},
		{"two nodes", twoNodes, "2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "state")
			if err := os.Chmod(filepath.Dir(data), 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(virgaBin, "run", "--data-dir", data, c.file, "--capacity", "examples/ddp-torch/slurm.yaml")
			cmd.Dir = root
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("virga run: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), "COMPLETED") || strings.Contains(string(out), "FAILED") {
				t.Fatalf("want every trial COMPLETED:\n%s", out)
			}
			logs, _ := filepath.Glob(filepath.Join(data, "attempts", "*", "output.log"))
			if len(logs) == 0 {
				t.Fatalf("no attempt logs in %s", data)
			}
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				for _, want := range []string{"rank 0/" + c.world, "rank 1/" + c.world, "epoch 3: val_loss"} {
					if !strings.Contains(string(b), want) {
						t.Errorf("%s: no %q:\n%s", l, want, b)
					}
				}
			}
		})
	}
}

// TestAlgoSlurmTwoNodes: `virga algo linear-learner` as a trial of two
// nodes on the real Slurm test cluster (one job of --nodes=2, an agent per
// node): the first node's process coordinates and works, the other's works
// over the network (MASTER_ADDR); the trial completes with every row of
// every pass and the validation loss, and both processes read shards.
func TestAlgoSlurmTwoNodes(t *testing.T) {
	needSlurm(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	exp := filepath.Join(dir, "algo.yaml")
	y := `name: algo-two-nodes
entrypoint: [` + virgaBin + `, algo, linear-learner, --input, ` + digits + `, --label, last, --param, classes=10, --epochs, "4", --batch, "16", --checkpoint-every, 100ms]
objective: {metric: validation_loss, direction: minimize}
resources: {cpu: 1, nodes: 2}
`
	if err := os.WriteFile(exp, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "state")
	out, err := exec.Command(virgaBin, "run", "--data-dir", data, exp, "--capacity", slurmCapacity(t, dir)).CombinedOutput()
	if err != nil {
		t.Fatalf("virga run: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "COMPLETED") || !strings.Contains(string(out), "best trial 1: validation_loss=") {
		t.Fatalf("want the trial COMPLETED with its validation loss:\n%s", out)
	}
	logs, _ := filepath.Glob(filepath.Join(data, "attempts", "*", "output.log"))
	var log []byte
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		log = append(log, b...)
	}
	if n := strings.Count(string(log), ": done; read shards ["); n != 2 || strings.Contains(string(log), "read shards []") {
		t.Errorf("want both nodes' workers to have read shards:\n%s", log)
	}
	b, err := exec.Command(virgaBin, "best", "--data-dir", data, "1", "--json").Output()
	if err != nil || !strings.Contains(string(b), `"rows": 7188`) {
		t.Errorf("the best trial's metrics: %v\n%s; want rows 7188 (4 passes of 1797)", err, b)
	}
}

// TestSlurmOrphanAfterCrash kills the server while sbatch submits a trial's
// job: that sbatch outlives the server and reaches slurmctld only after the
// restarted server has found the attempt lost and run the trial again as a
// new attempt. The late job is cancelled before it runs, and the trial runs
// once.
func TestSlurmOrphanAfterCrash(t *testing.T) {
	needSlurm(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sbatch, err := exec.LookPath("sbatch")
	if err != nil {
		t.Fatal(err)
	}
	// The first sbatch is slow: it submits 5 s later, in a process of its
	// own, while the server that ran it waits on a sleep (and dies).
	bin := filepath.Join(dir, "bin")
	wrapper := fmt.Sprintf(`#!/bin/sh
if mkdir %[1]s/first 2>/dev/null; then
  cat >%[1]s/script
  setsid sh -c 'sleep 5; exec %[2]s "$@" <%[1]s/script' sh "$@" </dev/null >%[1]s/late.out 2>&1 &
  touch %[1]s/inflight
  exec sleep 120
fi
exec %[2]s "$@"
`, dir, sbatch)
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "sbatch"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	data := filepath.Join(dir, "state")
	prefix := slurm.PrefixFor(data)
	t.Cleanup(func() {
		out, _ := exec.Command("squeue", "--me", "-h", "-o", "%i %j").Output()
		for line := range strings.Lines(string(out)) {
			if id, name, ok := strings.Cut(strings.TrimSpace(line), " "); ok && strings.HasPrefix(name, prefix+"-a") {
				_ = exec.Command("scancel", id).Run()
			}
		}
	})
	capFile := slurmCapacity(t, dir)
	start := func() *server.Server {
		t.Helper()
		srv, err := server.Start(context.Background(), server.Config{DataDir: data, Version: "test", CapacityFile: capFile, Agent: virgaBin})
		if err != nil {
			t.Fatal(err)
		}
		return srv
	}
	srv := start()
	c := client.New(srv.URL, srv.Token)
	b, _ := os.ReadFile(stepExperiment(t, dir, "slurm-orphan", 1, 1, 4, 300, ""))
	b = []byte(strings.Replace(string(b), "stop_grace: 5s", "stop_grace: 5s\nresources: {cpu: 1, memory: 200MiB}", 1))
	e, err := c.Submit(context.Background(), "slurm-orphan.yaml", b)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first sbatch to be under way", 30*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(dir, "inflight"))
		return err == nil
	})
	_ = srv.Close() // the server dies while its sbatch is under way
	srv = start()
	defer srv.Close()
	c = client.New(srv.URL, srv.Token)
	waitDone(t, c, e.ID, 120*time.Second)

	var late string
	waitFor(t, "the late sbatch to submit its job", 30*time.Second, func() bool {
		out, _ := os.ReadFile(filepath.Join(dir, "late.out"))
		late = strings.TrimSpace(string(out))
		return late != ""
	})
	var state string
	waitFor(t, "the late job "+late+" to end", 30*time.Second, func() bool {
		out, _ := exec.Command("squeue", "--me", "-h", "--states=all", "-j", late, "-O", "State").Output()
		state = strings.TrimSpace(string(out))
		return state != "" && state != "PENDING" && state != "RUNNING" && state != "COMPLETING"
	})
	ts, err := c.Trials(context.Background(), e.ID)
	if err != nil || len(ts) != 1 {
		t.Fatalf("trials %v, %v", ts, err)
	}
	l := readLedger(t, dir, ts[0].ID)
	if state != "CANCELLED" || len(l.starts) != 1 {
		t.Fatalf("the late job %s is %s and the trial started %d times (%+v); want it cancelled, and one start",
			late, state, len(l.starts), l.starts)
	}
	if ts[0].State != virga.TrialCompleted {
		t.Errorf("trial: %s (%s), want COMPLETED", ts[0].State, ts[0].Message)
	}
}
