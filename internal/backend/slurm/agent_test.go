package slurm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/agent"
	"github.com/virga-ml/virga/internal/backend"
)

// TestRealAgent runs attempts through the real `virga agent` (built from
// cmd/virga) on the test cluster: a gang of 2 nodes x 2 processes gets
// PyTorch's rendezvous variables with the first node as master, and a Stop
// reaches the trial as SIGTERM through the agent.
func TestRealAgent(t *testing.T) {
	needCluster(t)
	bin := filepath.Join(t.TempDir(), "virga")
	build := exec.Command("go", "build", "-o", bin, "github.com/virga-ml/virga/cmd/virga")
	build.Dir = "../../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building virga: %v\n%s", err, out)
	}
	prefix := fmt.Sprintf("va%d-%s", os.Getpid(), time.Now().Format("150405"))
	t.Cleanup(func() { cancelJobs(prefix) })
	h := newHarnessWith(t, Config{Pools: testPools(), AgentPath: bin, JobPrefix: prefix, PollInterval: 250 * time.Millisecond})
	b := h.b
	ctx := context.Background()

	gang := startSpec(t, 1, "ondemand", "", "sh", "-c",
		`echo "rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE node=$NODE_RANK master=$MASTER_ADDR:$MASTER_PORT ckpt=${VIRGA_CHECKPOINT_DIR:+set}"`)
	gang.Nodes, gang.ProcessesPerNode, gang.Resources = 2, 2, virga.Resources{CPU: 2, MemoryMB: 400}
	if err := b.Start(ctx, gang); err != nil {
		t.Fatal(err)
	}
	term := startSpec(t, 2, "od1", "", "sh", "-c", `trap 'echo got-term; exit 0' TERM; echo ready; while :; do sleep 0.1; done`)
	if err := b.Start(ctx, term); err != nil {
		t.Fatal(err)
	}

	ev := h.exited(t, 1, 90*time.Second, true)
	log, _ := os.ReadFile(filepath.Join(gang.Dir, "output.log"))
	if exitCode(ev) != 0 {
		t.Fatalf("gang: %+v\n%s", ev, log)
	}
	master := "master=virga1:" + strconv.Itoa(agent.MasterPort(1))
	for _, want := range []string{"rank=0 local=0 world=4 node=0 " + master, "rank=1 local=1 world=4 node=0 " + master,
		"rank=2 local=0 world=4 node=1 " + master, "rank=3 local=1 world=4 node=1 " + master, "ckpt=set"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("the gang's output lacks %q:\n%s", want, log)
		}
	}

	h.wait(t, 2, backend.Started, 60*time.Second)
	waitContains(t, filepath.Join(term.Dir, "output.log"), "ready")
	_ = b.Stop(2, 10*time.Second)
	ev = h.exited(t, 2, 30*time.Second, true)
	log, _ = os.ReadFile(filepath.Join(term.Dir, "output.log"))
	if exitCode(ev) != 0 || !strings.Contains(string(log), "got-term") {
		t.Fatalf("stopped through the agent: %+v, want exit code 0 after the trial's SIGTERM trap:\n%s", ev, log)
	}
}

func waitContains(t *testing.T, path, s string) {
	t.Helper()
	for range 300 {
		if b, _ := os.ReadFile(path); strings.Contains(string(b), s) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	b, _ := os.ReadFile(path)
	t.Fatalf("%s never said %q:\n%s", path, s, b)
}
