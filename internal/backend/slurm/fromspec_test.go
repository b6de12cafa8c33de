package slurm

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/spec"
)

// TestExampleSlurmCapacity resolves the example Slurm capacity files
// against the recorded test cluster: their pools name little more than a
// partition, and get the rest from it; the pools then load for estimates.
func TestExampleSlurmCapacity(t *testing.T) {
	shape := virga.Resources{CPU: 2, MemoryMB: 4000}
	for _, tt := range []struct {
		file string
		want []Pool
	}{
		{"../../../examples/ddp-torch/slurm.yaml", []Pool{
			{Name: "spot", Partition: "spot", Node: shape, Nodes: 2, Preemptible: true, Warning: 15 * time.Second},
			{Name: "ondemand", Partition: "ondemand", Node: shape, Nodes: 2},
		}},
		{"../../../examples/capacity/slurm.yaml", []Pool{
			{Name: "spot", Partition: "spot", Node: shape, Nodes: 2, Preemptible: true, Warning: 15 * time.Second},
			{Name: "ondemand", Partition: "ondemand", Node: virga.Resources{CPU: 1, MemoryMB: 1024}, Nodes: 2},
		}},
	} {
		t.Run(filepath.Base(tt.file), func(t *testing.T) {
			c, _, err := spec.LoadCapacity(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			if err := Resolve(c, recordedCluster(t)); err != nil {
				t.Fatal(err)
			}
			var got []Pool
			for i := range c.Pools {
				got = append(got, PoolFromSpec(&c.Pools[i]))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("pools (-want +got):\n%s", diff)
			}
			if _, err := capacity.Load(c, filepath.Dir(tt.file)); err != nil {
				t.Errorf("loading the resolved pools: %v", err)
			}
		})
	}
}

// TestPoolFromSpec: a pool that gives everything keeps it; QoS, account
// and the partition's MaxTime reach the backend's pool.
func TestPoolFromSpec(t *testing.T) {
	c, err := spec.ParseCapacity("c.yaml", []byte("pools:\n  - name: gpu\n    backend: slurm\n    slurm: {partition: a100, qos: high, account: ml}\n    node: {cpu: 32, memory: 256GiB, gpu: 8}\n    nodes: 4\n    market: on-demand\n    price: 30\n"))
	if err != nil {
		t.Fatal(err)
	}
	c.Pools[0].Slurm.MaxTime = spec.Duration(48 * time.Hour)
	want := Pool{Name: "gpu", Partition: "a100", QoS: "high", Account: "ml", Node: virga.Resources{CPU: 32, MemoryMB: 256 * 1024, GPU: 8}, Nodes: 4, TimeLimit: 48 * time.Hour}
	if diff := cmp.Diff(want, PoolFromSpec(&c.Pools[0])); diff != "" {
		t.Errorf("pool (-want +got):\n%s", diff)
	}
}
