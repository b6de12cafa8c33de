package slurm

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/virga-ml/virga/internal/spec"
)

// ResolveCapacity reads the cluster (ReadCluster, with scontrol) for the
// partitions of c's Slurm pools and resolves them (Resolve). It does
// nothing when c has no pool of backend slurm.
func ResolveCapacity(ctx context.Context, c *spec.Capacity, scontrol string) error {
	var parts []string
	for i := range c.Pools {
		if p := &c.Pools[i]; p.Backend == spec.BackendSlurm && !slices.Contains(parts, p.Slurm.Partition) {
			parts = append(parts, p.Slurm.Partition)
		}
	}
	if len(parts) == 0 {
		return nil
	}
	cl, err := ReadCluster(ctx, scontrol, parts)
	if err != nil {
		return fmt.Errorf("%s: reading the Slurm partitions %s of its pools: %w (a Slurm pool reads what it leaves out, node, nodes, market and warning, from its partition: run where Slurm's commands work, or give them)",
			c.File, strings.Join(parts, ", "), err)
	}
	return Resolve(c, cl)
}

// Resolve completes c's pools of backend slurm from what the cluster says
// of their partitions, and checks what the file gives against it:
//
//   - node: CPUs, memory and GPUs (and their type) left out are those of
//     the partition's smallest node; given, they must fit on one of its
//     nodes;
//   - nodes: left out, the partition's nodes that hold such a node (min
//     0); given, at most that many;
//   - market: spot when Slurm preempts the partition's jobs (PreemptType
//     partition_prio, a PreemptMode other than OFF, and a partition of a
//     higher PriorityTier on some of its nodes), on-demand when it never
//     does; given, it must agree. Under preempt/qos the partition does not
//     tell, and the file must say;
//   - warning: a spot pool's is the partition's GraceTime; given, at most
//     that;
//   - the partition's MaxTime becomes the pool's time limit.
//
// The problems are a *spec.Error at the file's lines.
func Resolve(c *spec.Capacity, cl *Cluster) error {
	var probs []spec.Problem
	for i := range c.Pools {
		p := &c.Pools[i]
		if p.Backend == spec.BackendSlurm {
			probs = append(probs, resolvePool(c.File, p, cl)...)
		}
	}
	if len(probs) > 0 {
		slices.SortStableFunc(probs, func(a, b spec.Problem) int {
			if a.Line != b.Line {
				return a.Line - b.Line
			}
			return a.Col - b.Col
		})
		return &spec.Error{Problems: probs}
	}
	return nil
}

// resolvePool resolves one pool (see Resolve).
func resolvePool(file string, p *spec.Pool, cl *Cluster) []spec.Problem {
	var probs []spec.Problem
	// problem reports at field's position when the file gives it, else at
	// fallback's, else at the pool's.
	problem := func(field string, fallbacks []string, format string, args ...any) {
		pos := p.Pos
		for _, f := range append([]string{field}, fallbacks...) {
			if at, ok := p.Gave(f); ok {
				pos = at
				break
			}
		}
		probs = append(probs, spec.Problem{File: file, Line: pos.Line, Col: pos.Col, Path: p.Path(field), Msg: fmt.Sprintf(format, args...)})
	}
	name := p.Slurm.Partition
	part := cl.Partition(name)
	if part == nil {
		names := make([]string, len(cl.Partitions))
		for i := range cl.Partitions {
			names[i] = cl.Partitions[i].Name
		}
		how := "given as slurm: {partition: ...}"
		if _, ok := p.Gave("slurm"); !ok {
			how = "the pool's name, as slurm: {partition: ...} is not given"
		}
		problem("slurm.partition", []string{"slurm", "name"}, "the cluster has no partition %q (%s); its partitions: %s", name, how, strings.Join(names, ", "))
		return probs
	}
	nodes := cl.Nodes[name]
	if len(nodes) == 0 {
		problem("slurm.partition", []string{"slurm", "name"}, "partition %s has no nodes; name a partition with nodes", name)
		return probs
	}

	// 1. The node's shape: the smallest node's where the file says nothing.
	small, large := nodes[0], nodes[0]
	types := map[string]bool{}
	for _, n := range nodes {
		small.CPUs, large.CPUs = min(small.CPUs, n.CPUs), max(large.CPUs, n.CPUs)
		small.MemoryMB, large.MemoryMB = min(small.MemoryMB, n.MemoryMB), max(large.MemoryMB, n.MemoryMB)
		small.GPUs, large.GPUs = min(small.GPUs, n.GPUs), max(large.GPUs, n.GPUs)
		types[n.GPUType] = true
	}
	memKnown := small.MemoryMB > 1 // RealMemory defaults to 1 when the site does not set it
	shapeOK := true
	if _, ok := p.Gave("node.cpu"); !ok {
		p.Node.CPU = float64(small.CPUs)
	} else if p.Node.CPU > float64(large.CPUs) {
		problem("node.cpu", nil, "%g CPUs, more than any node of partition %s has (at most %d); remove cpu: to use the partition's (%d), or give at most %d",
			p.Node.CPU, name, large.CPUs, small.CPUs, large.CPUs)
		shapeOK = false
	}
	if _, ok := p.Gave("node.memory"); !ok {
		if memKnown {
			p.Node.MemoryMB = small.MemoryMB
		}
	} else if memKnown && p.Node.MemoryMB > large.MemoryMB {
		problem("node.memory", nil, "%d MiB, more than any node of partition %s has (RealMemory at most %d MiB); remove memory: to use the partition's (%d MiB), or give at most %d MiB",
			p.Node.MemoryMB, name, large.MemoryMB, small.MemoryMB, large.MemoryMB)
		shapeOK = false
	}
	if _, ok := p.Gave("node.gpu"); !ok {
		p.Node.GPU = small.GPUs
	} else if p.Node.GPU > large.GPUs {
		problem("node.gpu", nil, "%d GPUs, more than any node of partition %s has (Gres gpu at most %d); remove gpu: to use the partition's (%d), or give at most %d",
			p.Node.GPU, name, large.GPUs, small.GPUs, large.GPUs)
		shapeOK = false
	}
	nodeType := ""
	if len(types) == 1 {
		nodeType = small.GPUType
	}
	if _, ok := p.Gave("node.gpu_type"); !ok {
		if p.Node.GPU > 0 {
			p.Node.GPUType = nodeType
		}
	} else if p.Node.GPU == 0 {
		problem("node.gpu_type", nil, "names the GPU type, but the nodes of partition %s have no GPU (no Gres gpu); remove gpu_type:", name)
		shapeOK = false
	} else if nodeType != "" && !strings.EqualFold(nodeType, p.Node.GPUType) {
		problem("node.gpu_type", nil, "%s, but the GPUs of partition %s are of type %s (Gres); remove gpu_type: to use the partition's", p.Node.GPUType, name, nodeType)
		shapeOK = false
	}
	if p.Node.CPU <= 0 {
		problem("node.cpu", []string{"node"}, "partition %s's nodes report no CPUs; give the CPUs of one node, e.g. node: {cpu: 8}", name)
		shapeOK = false
	}

	// 2. The nodes that hold such a node.
	var fit []string
	for _, n := range nodes {
		if float64(n.CPUs) >= p.Node.CPU && (!memKnown || n.MemoryMB >= p.Node.MemoryMB) && n.GPUs >= p.Node.GPU {
			fit = append(fit, n.Name)
		}
	}
	if _, ok := p.Gave("nodes"); !ok {
		p.Nodes = spec.NodeCount{Min: 0, Max: len(fit)}
	} else if shapeOK && p.Nodes.Max > len(fit) {
		problem("nodes", nil, "%d, but partition %s has %d nodes that hold node: {cpu: %g, memory: %dMiB, gpu: %d} (%s); remove nodes: to use them all, or give at most %d",
			p.Nodes.Max, name, len(fit), p.Node.CPU, p.Node.MemoryMB, p.Node.GPU, listNames(fit), len(fit))
	}

	// 3. Whether Slurm preempts the partition's jobs, and with what notice.
	preemptible, known, why := Preemptible(cl, part, nodes)
	if _, ok := p.Gave("market"); ok {
		switch {
		case known && p.Market == spec.Spot && !preemptible:
			problem("market", nil, "spot, but Slurm never preempts the jobs of partition %s (%s); remove market: (a Slurm pool reads it from its partition), or name a preemptible partition", name, why)
		case known && p.Market == spec.OnDemand && preemptible:
			problem("market", nil, "on-demand, but Slurm preempts the jobs of partition %s (%s); remove market: (a Slurm pool reads it from its partition), or name a partition that is never preempted", name, why)
		}
	} else if !known {
		problem("market", nil, "left out, but the partition does not tell whether Slurm preempts its jobs (%s); set market: spot if they may be preempted, market: on-demand if not", why)
		return probs
	} else if preemptible {
		p.Market = spec.Spot
	} else {
		p.Market = spec.OnDemand
	}
	if p.Market == spec.OnDemand {
		for _, f := range []string{"warning", "on_demand_price"} {
			if _, ok := p.Gave(f); ok {
				problem(f, nil, "only for spot pools, and Slurm never preempts the jobs of partition %s (%s); remove it", name, why)
			}
		}
		if _, ok := p.Gave("preemption"); ok && p.Preemption.Kind != spec.PreemptNone {
			problem("preemption", nil, "a model of reclaims, but Slurm never preempts the jobs of partition %s (%s); remove it", name, why)
		}
		p.Warning = 0
	} else {
		if _, ok := p.Gave("preemption"); ok && p.Preemption.Kind == spec.PreemptNone {
			problem("preemption", nil, "none says the pool is never reclaimed, but Slurm preempts the jobs of partition %s (%s); remove it (a model such as {rate: 0.5/h, outage: 10m} only feeds virga sim and virga estimate)", name, why)
		}
		if _, ok := p.Gave("warning"); !ok {
			p.Warning = spec.Duration(part.GraceTime)
		} else if p.Warning.D() > part.GraceTime {
			problem("warning", nil, "%s, but partition %s's GraceTime is %s: Slurm kills a preempted job's steps that long after SIGTERM; remove warning: to use the GraceTime, or give at most %s",
				p.Warning.D(), name, part.GraceTime, part.GraceTime)
		}
	}
	p.Slurm.MaxTime = spec.Duration(part.MaxTime)
	p.Resolved = len(probs) == 0
	return probs
}

// Preemptible tells whether Slurm may preempt the jobs of partition part
// (whose nodes are nodes), whether the partition tells at all (under
// preempt/qos it depends on the job's QoS), and why, for messages.
func Preemptible(cl *Cluster, part *Partition, nodes []Node) (preemptible, known bool, why string) {
	pt := cl.Preempt.PreemptType
	mode := part.PreemptMode
	if mode == "" {
		mode = cl.Preempt.PreemptMode
	}
	switch {
	case pt == "" || pt == "preempt/none":
		return false, true, "the cluster's PreemptType is preempt/none"
	case mode == "OFF" || strings.HasPrefix(mode, "OFF,"):
		return false, true, "its PreemptMode is OFF"
	case pt != "preempt/partition_prio":
		return false, false, fmt.Sprintf("the cluster's PreemptType is %s: a job's QoS decides", pt)
	}
	// partition_prio: a job of a partition of a higher PriorityTier on the
	// same nodes preempts.
	shared := map[string]bool{}
	for _, n := range nodes {
		for _, q := range n.Partitions {
			shared[q] = true
		}
	}
	var higher []string
	for _, q := range cl.Partitions {
		if q.Name != part.Name && q.PriorityTier > part.PriorityTier && (len(shared) == 0 || shared[q.Name]) {
			higher = append(higher, fmt.Sprintf("%s (PriorityTier %d)", q.Name, q.PriorityTier))
		}
	}
	if len(higher) == 0 {
		return false, true, fmt.Sprintf("no partition of a higher PriorityTier than its %d shares its nodes", part.PriorityTier)
	}
	return true, true, fmt.Sprintf("PreemptMode %s, and %s on its nodes outranks its PriorityTier %d", mode, strings.Join(higher, ", "), part.PriorityTier)
}

// listNames lists up to 5 names.
func listNames(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	if len(names) > 5 {
		return strings.Join(names[:5], ", ") + fmt.Sprintf(" and %d more", len(names)-5)
	}
	return strings.Join(names, ", ")
}

// timeLimitOf is the time limit of a pool built from a resolved spec pool.
func timeLimitOf(p *spec.Pool) time.Duration {
	if p.Slurm == nil {
		return 0
	}
	return p.Slurm.MaxTime.D()
}
