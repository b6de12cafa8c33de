package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestGangOnLocalBackend: a trial of 2 nodes x 2 processes runs as 4
// processes with distinct ranks; when one of them dies, the whole gang ends
// and the trial restarts from its checkpoint with all 4 again.
func TestGangOnLocalBackend(t *testing.T) {
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger")
	script := filepath.Join(dir, "trial.sh")
	// Each process logs its rank; rank 2 of the first attempt dies after
	// the checkpoint of step 0; the others wait for SIGTERM.
	body := fmt.Sprintf(`#!/bin/sh
echo "attempt=$VIRGA_ATTEMPT_ID rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT from=$(cat "$VIRGA_CHECKPOINT_DIR/step" 2>/dev/null || echo none)" >> %s
if [ "$RANK" = 0 ]; then
  echo 0 > "$VIRGA_CHECKPOINT_DIR/step"
  echo 'VIRGA_METRIC {"step": 0, "metrics": {"loss": 1}}'
fi
if [ "$RANK" = 2 ] && [ ! -e %s/died ]; then sleep 1; touch %s/died; kill -9 $$; fi
sleep 2
`, ledger, dir, dir)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	exp := filepath.Join(dir, "gang.yaml")
	y := fmt.Sprintf(`name: gang
entrypoint: [%s]
objective: {metric: loss, direction: minimize}
resources: {cpu: 0.25, nodes: 2, processes_per_node: 2}
max_restarts: 2
stop_grace: 5s
`, script)
	if err := os.WriteFile(exp, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "state")
	out, err := exec.Command(virgaBin, "run", "--data-dir", data, exp).CombinedOutput()
	if err != nil {
		t.Fatalf("virga run: %v\n%s", err, out)
	}
	b, err := os.ReadFile(ledger)
	if err != nil {
		t.Fatal(err)
	}
	byAttempt := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		byAttempt[f[0]] = append(byAttempt[f[0]], strings.Join(f[1:], " "))
	}
	if len(byAttempt) != 2 {
		t.Fatalf("attempts: %v; want 2 (the gang that lost rank 2, then its restart)\n%s", byAttempt, out)
	}
	for a, ranks := range byAttempt {
		slices.Sort(ranks)
		var got []string
		for _, r := range ranks {
			got = append(got, strings.Fields(r)[0]+" "+strings.Fields(r)[2])
		}
		want := []string{"rank=0 world=4", "rank=1 world=4", "rank=2 world=4", "rank=3 world=4"}
		if !slices.Equal(got, want) {
			t.Errorf("%s: processes %v; want %v", a, got, want)
		}
	}
	second := byAttempt[slices.Max(keys(byAttempt))]
	for _, r := range second {
		if !strings.HasSuffix(r, "from=0") {
			t.Errorf("restarted gang process %q; want every rank to resume from the checkpoint of step 0", r)
		}
	}
	if !bytes.Contains(out, []byte("COMPLETED")) {
		t.Errorf("the experiment did not complete:\n%s", out)
	}
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// TestDDPExampleLocal runs examples/ddp-torch (two PyTorch DDP processes,
// gloo on CPU) on the local backend: both trials complete, each a gang of
// rank 0 and rank 1 of a world of 2.
func TestDDPExampleLocal(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import torch.distributed").Run(); err != nil {
		t.Fatalf("the DDP example needs PyTorch under /usr/bin/python3 (Debian's python3-torch; scripts/test.sh installs it): %v", err)
	}
	data := filepath.Join(t.TempDir(), "state")
	cmd := exec.Command(virgaBin, "run", "--data-dir", data, "examples/ddp-torch/experiment.yaml")
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("virga run: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("2 completed")) {
		t.Fatalf("want 2 completed trials:\n%s", out)
	}
	logs, _ := filepath.Glob(filepath.Join(data, "attempts", "*", "output.log"))
	if len(logs) != 2 {
		t.Fatalf("attempt logs %v; want 2", logs)
	}
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if !bytes.Contains(b, []byte("rank 0/2")) || !bytes.Contains(b, []byte("rank 1/2")) || !bytes.Contains(b, []byte("epoch 3: val_loss")) {
			t.Errorf("%s: want ranks 0 and 1 of 2 and 4 epochs:\n%s", l, b)
		}
	}
}

// TestGangLauncherSharesItsGroup: the local backend's gang launcher keeps
// the trial's processes (and what they start) in its own process group, so
// that the shim's SIGKILL to that group leaves nothing behind.
func TestGangLauncherSharesItsGroup(t *testing.T) {
	cmd := exec.Command(virgaBin, "gang", "2", "29557", "30", "--", "sh", "-c", "sleep 300 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	inGroup := func() []string {
		out, _ := exec.Command("pgrep", "-g", strconv.Itoa(pgid)).Output()
		return strings.Fields(string(out))
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(inGroup()) < 5 && time.Now().Before(deadline) { // launcher, 2 sh, 2 sleep
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(inGroup()); n < 5 {
		t.Fatalf("%d processes in the launcher's group; want the launcher, both members and their children (5)", n)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	_ = cmd.Wait()
	deadline = time.Now().Add(5 * time.Second)
	for len(inGroup()) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if left := inGroup(); len(left) > 0 {
		t.Fatalf("processes %v outlived the SIGKILL of the launcher's group", left)
	}
}
