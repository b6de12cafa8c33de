package slurm

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/backend/backendtest"
)

// TestConformance runs the backend conformance suite against the test
// cluster: the default pool spans both nodes, the second is virga1 alone.
// The test binary is the agent on the nodes (TestMain), running the
// suite's shell trials with the real agent.Run.
func TestConformance(t *testing.T) {
	needCluster(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("vc%d-%s", os.Getpid(), time.Now().Format("150405"))
	t.Cleanup(func() { cancelJobs(prefix) })
	cfg := Config{AgentPath: exe, JobPrefix: prefix, PollInterval: 100 * time.Millisecond, Pools: []Pool{
		{Name: "ondemand", Partition: "ondemand", Node: shape, Nodes: 2},
		{Name: "od1", Partition: "ondemand", Node: shape, Nodes: 1, Args: []string{"--nodelist=virga1"}},
	}}
	backendtest.Run(t, backendtest.Harness{
		New: func(t *testing.T) backend.Backend {
			b, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			return b
		},
		Unit: virga.Resources{CPU: 1, MemoryMB: 64},
		Caps: backendtest.Caps{Gang: true, Signals: true},
		Wait: 60 * time.Second,
	})
}
