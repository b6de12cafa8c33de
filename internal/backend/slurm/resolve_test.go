package slurm

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend/slurm/slurmtest"
	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/spec"
)

// parseCapacity parses the pools of a capacity file ("pools:\n" + pools).
func parseCapacity(t *testing.T, pools string) *spec.Capacity {
	t.Helper()
	c, err := spec.ParseCapacity("c.yaml", []byte("pools:\n"+pools))
	if err != nil {
		t.Fatalf("ParseCapacity: %v", err)
	}
	return c
}

// TestResolveFromPartition: a Slurm pool that names only its partition
// gets the node's shape, the nodes, the market and the warning from it, and
// bills by the second without a minimum.
func TestResolveFromPartition(t *testing.T) {
	c := parseCapacity(t, `  - name: spot
    backend: slurm
  - name: od
    backend: slurm
    slurm: {partition: ondemand}
  - name: small
    backend: slurm
    slurm: {partition: spot}
    node: {cpu: 1, memory: 1GiB}
    warning: 10s
`)
	if err := Resolve(c, recordedCluster(t)); err != nil {
		t.Fatal(err)
	}
	shape := spec.NodeShape{CPU: 2, MemoryMB: 4000}
	want := []struct {
		node    spec.NodeShape
		nodes   spec.NodeCount
		market  spec.Market
		warning time.Duration
	}{
		{shape, spec.NodeCount{Min: 0, Max: 2}, spec.Spot, 15 * time.Second},
		{shape, spec.NodeCount{Min: 0, Max: 2}, spec.OnDemand, 0},
		{spec.NodeShape{CPU: 1, MemoryMB: 1024}, spec.NodeCount{Min: 0, Max: 2}, spec.Spot, 10 * time.Second},
	}
	for i, w := range want {
		p := &c.Pools[i]
		if p.Node != w.node || p.Nodes != w.nodes || p.Market != w.market || p.Warning.D() != w.warning {
			t.Errorf("pool %s: node %+v nodes %+v market %s warning %s; want %+v %+v %s %s",
				p.Name, p.Node, p.Nodes, p.Market, p.Warning.D(), w.node, w.nodes, w.market, w.warning)
		}
		if p.Billing != spec.BillingSlurm || p.Price.USDPerHour != 0 {
			t.Errorf("pool %s: billing %+v price %+v; want per second without minimum, price 0", p.Name, p.Billing, p.Price)
		}
	}
	// Slurm accounts by the second: a 12 s job costs 12 s, not the minute
	// of a cloud instance (5 times as much).
	set, err := capacity.Load(c, ".")
	if err != nil {
		t.Fatal(err)
	}
	if got := set.Pools[0].Billing.Billed(12 * time.Second); got != 12*time.Second {
		t.Errorf("a 12 s job is billed %s, want 12s", got)
	}
	got := PoolFromSpec(&c.Pools[0])
	wantPool := Pool{Name: "spot", Partition: "spot", Node: virga.Resources{CPU: 2, MemoryMB: 4000}, Nodes: 2, Preemptible: true, Warning: 15 * time.Second}
	if diff := cmp.Diff(wantPool, got); diff != "" {
		t.Errorf("PoolFromSpec (-want +got):\n%s", diff)
	}
}

// TestResolveContradictions: what the file gives and the partition
// contradicts is an error at the field's line, saying what would be right.
func TestResolveContradictions(t *testing.T) {
	for _, tt := range []struct {
		name, pools string
		want        []string // the problems, in order
	}{
		{"shape", `  - name: spot
    backend: slurm
    node: {cpu: 4, memory: 8GiB, gpu: 1}
`, []string{
			"c.yaml:4:17: pools[spot].node.cpu: 4 CPUs, more than any node of partition spot has (at most 2); remove cpu: to use the partition's (2), or give at most 2",
			"c.yaml:4:28: pools[spot].node.memory: 8192 MiB, more than any node of partition spot has (RealMemory at most 4000 MiB); remove memory: to use the partition's (4000 MiB), or give at most 4000 MiB",
			"c.yaml:4:39: pools[spot].node.gpu: 1 GPUs, more than any node of partition spot has (Gres gpu at most 0); remove gpu: to use the partition's (0), or give at most 0",
		}},
		{"nodes", `  - name: spot
    backend: slurm
    nodes: 3
`, []string{
			"c.yaml:4:12: pools[spot].nodes: 3, but partition spot has 2 nodes that hold node: {cpu: 2, memory: 4000MiB, gpu: 0} (virga1, virga2); remove nodes: to use them all, or give at most 2",
		}},
		{"on-demand market of a preempted partition", `  - name: spot
    backend: slurm
    market: on-demand
`, []string{
			"c.yaml:4:13: pools[spot].market: on-demand, but Slurm preempts the jobs of partition spot (PreemptMode REQUEUE, and ondemand (PriorityTier 10) on its nodes outranks its PriorityTier 1); remove market: (a Slurm pool reads it from its partition), or name a partition that is never preempted",
		}},
		{"spot market of a partition never preempted", `  - name: ondemand
    backend: slurm
    market: spot
`, []string{
			"c.yaml:4:13: pools[ondemand].market: spot, but Slurm never preempts the jobs of partition ondemand (its PreemptMode is OFF); remove market: (a Slurm pool reads it from its partition), or name a preemptible partition",
		}},
		{"spot fields on a partition never preempted", `  - name: ondemand
    backend: slurm
    warning: 30s
    on_demand_price: 2
    preemption: {rate: 1/h, outage: 5m}
`, []string{
			"c.yaml:4:14: pools[ondemand].warning: only for spot pools, and Slurm never preempts the jobs of partition ondemand (its PreemptMode is OFF); remove it",
			"c.yaml:5:22: pools[ondemand].on_demand_price: only for spot pools, and Slurm never preempts the jobs of partition ondemand (its PreemptMode is OFF); remove it",
			"c.yaml:6:17: pools[ondemand].preemption: a model of reclaims, but Slurm never preempts the jobs of partition ondemand (its PreemptMode is OFF); remove it",
		}},
		{"warning longer than the GraceTime", `  - name: spot
    backend: slurm
    warning: 2m
`, []string{
			"c.yaml:4:14: pools[spot].warning: 2m0s, but partition spot's GraceTime is 15s: Slurm kills a preempted job's steps that long after SIGTERM; remove warning: to use the GraceTime, or give at most 15s",
		}},
		{"never reclaimed, but preempted", `  - name: spot
    backend: slurm
    preemption: none
`, []string{
			"c.yaml:4:17: pools[spot].preemption: none says the pool is never reclaimed, but Slurm preempts the jobs of partition spot (PreemptMode REQUEUE, and ondemand (PriorityTier 10) on its nodes outranks its PriorityTier 1); remove it (a model such as {rate: 0.5/h, outage: 10m} only feeds virga sim and virga estimate)",
		}},
		{"GPU type without GPUs", `  - name: spot
    backend: slurm
    node: {gpu_type: a100}
`, []string{
			"c.yaml:4:22: pools[spot].node.gpu_type: names the GPU type, but the nodes of partition spot have no GPU (no Gres gpu); remove gpu_type:",
		}},
		{"no such partition", `  - name: gpu
    backend: slurm
  - name: a100
    backend: slurm
    slurm: {partition: a100}
`, []string{
			"c.yaml:2:11: pools[gpu].slurm.partition: the cluster has no partition \"gpu\" (the pool's name, as slurm: {partition: ...} is not given); its partitions: spot, ondemand",
			"c.yaml:6:24: pools[a100].slurm.partition: the cluster has no partition \"a100\" (given as slurm: {partition: ...}); its partitions: spot, ondemand",
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := parseCapacity(t, tt.pools)
			err := Resolve(c, recordedCluster(t))
			if err == nil {
				t.Fatal("no error")
			}
			if diff := cmp.Diff(tt.want, strings.Split(err.Error(), "\n")); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

// TestResolvePreemptTypes: under preempt/qos the partition does not tell
// whether its jobs are preempted (the file must say); under preempt/none
// nothing is; GPUs and their type come from Gres.
func TestResolvePreemptTypes(t *testing.T) {
	gpuNodes, err := ParseNodes("NodeName=g1 CPUTot=64 RealMemory=515000 Gres=gpu:a100:4(S:0-1) Partitions=gpu\n" +
		"NodeName=g2 CPUTot=32 RealMemory=257000 Gres=gpu:a100:8 Partitions=gpu\n")
	if err != nil {
		t.Fatal(err)
	}
	cl := &Cluster{Preempt: PreemptConfig{PreemptType: "preempt/qos", PreemptMode: "CANCEL"},
		Partitions: []Partition{{Name: "gpu", Nodes: "g[1-2]", PriorityTier: 1, GraceTime: time.Minute}},
		Nodes:      map[string][]Node{"gpu": gpuNodes}}
	c := parseCapacity(t, "  - {name: gpu, backend: slurm}\n")
	err = Resolve(c, cl)
	want := "c.yaml:2:5: pools[gpu].market: left out, but the partition does not tell whether Slurm preempts its jobs (the cluster's PreemptType is preempt/qos: a job's QoS decides); set market: spot if they may be preempted, market: on-demand if not"
	if err == nil || err.Error() != want {
		t.Fatalf("error %v\nwant %s", err, want)
	}
	c = parseCapacity(t, "  - {name: gpu, backend: slurm, market: spot, node: {gpu: 8}}\n")
	if err := Resolve(c, cl); err != nil {
		t.Fatal(err)
	}
	p := &c.Pools[0]
	if want := (spec.NodeShape{CPU: 32, MemoryMB: 257000, GPU: 8, GPUType: "a100"}); p.Node != want || p.Nodes.Max != 1 || p.Warning.D() != time.Minute {
		t.Errorf("pool: node %+v nodes %+v warning %s; want %+v on 1 node (g2), warning 1m", p.Node, p.Nodes, p.Warning.D(), want)
	}
	cl.Preempt = PreemptConfig{PreemptType: "preempt/none"}
	c = parseCapacity(t, "  - {name: gpu, backend: slurm}\n")
	if err := Resolve(c, cl); err != nil || c.Pools[0].Market != spec.OnDemand || c.Pools[0].Warning != 0 {
		t.Errorf("preempt/none: %v, market %s", err, c.Pools[0].Market)
	}
}

// TestResolveOnCluster reads the real test cluster (scripts/slurm.sh): a
// pool that names only its partition gets the node's shape, its
// preemptibility and the 15 s warning of the partition's GraceTime.
func TestResolveOnCluster(t *testing.T) {
	if os.Getenv(slurmtest.Env) == "" {
		t.Skip(slurmtest.Env + " is not set: start the test cluster with scripts/slurm.sh start")
	}
	// Only reads (scontrol show): no need to take turns with the tests
	// that run jobs.
	c := parseCapacity(t, "  - {name: s, backend: slurm, slurm: {partition: spot}}\n  - {name: ondemand, backend: slurm}\n")
	if err := ResolveCapacity(context.Background(), c, ""); err != nil {
		t.Fatal(err)
	}
	got := []Pool{PoolFromSpec(&c.Pools[0]), PoolFromSpec(&c.Pools[1])}
	want := []Pool{
		{Name: "s", Partition: "spot", Node: shape, Nodes: 2, Preemptible: true, Warning: 15 * time.Second},
		{Name: "ondemand", Partition: "ondemand", Node: shape, Nodes: 2},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pools from the cluster (-want +got):\n%s", diff)
	}
	c = parseCapacity(t, "  - {name: s, backend: slurm, slurm: {partition: spot}, node: {cpu: 3}}\n")
	err := ResolveCapacity(context.Background(), c, "")
	if want := "c.yaml:2:69: pools[s].node.cpu: 3 CPUs, more than any node of partition spot has (at most 2)"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %v; want it to start with %s", err, want)
	}
}
