package slurm

import (
	"os"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/spec"
)

func TestPoolFromSpec(t *testing.T) {
	data, err := os.ReadFile("../../../examples/ddp-torch/slurm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := spec.ParseCapacity("slurm.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	var pools []Pool
	for i := range c.Pools {
		pools = append(pools, PoolFromSpec(&c.Pools[i]))
	}
	want := []Pool{
		{Name: "spot", Partition: "spot", Node: virga.Resources{CPU: 2, MemoryMB: 3900}, Nodes: 2, Preemptible: true, Warning: 120 * time.Second},
		{Name: "ondemand", Partition: "ondemand", Node: virga.Resources{CPU: 2, MemoryMB: 3900}, Nodes: 2},
	}
	if len(pools) != len(want) {
		t.Fatalf("pools %+v", pools)
	}
	for i := range want {
		if pools[i].Name != want[i].Name || pools[i].Partition != want[i].Partition || pools[i].Node != want[i].Node ||
			pools[i].Nodes != want[i].Nodes || pools[i].Preemptible != want[i].Preemptible || pools[i].Warning != want[i].Warning {
			t.Errorf("pool %d: %+v, want %+v", i, pools[i], want[i])
		}
	}
	c, err = spec.ParseCapacity("c.yaml", []byte("pools:\n  - name: gpu\n    backend: slurm\n    slurm: {partition: a100, qos: high, account: ml}\n    node: {cpu: 32, memory: 256GiB, gpu: 8}\n    nodes: 4\n    price: 30\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p := PoolFromSpec(&c.Pools[0]); p.Partition != "a100" || p.QoS != "high" || p.Account != "ml" || p.Node.GPU != 8 || p.Nodes != 4 || p.Preemptible {
		t.Fatalf("pool %+v", p)
	}
}
