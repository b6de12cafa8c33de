package slurm

import (
	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/spec"
)

// PoolFromSpec builds a backend pool from a capacity file's pool (backend
// slurm), resolved against the cluster (Resolve): its partition, QoS and
// account (the partition defaults to the pool's name), its node shape, its
// nodes (the maximum of a growing pool), preemptible when it is a spot pool
// with its warning (the partition's GraceTime), and the partition's MaxTime
// as its time limit. A node without memory leaves --mem out: Slurm's
// default applies (on many sites the whole node's memory).
func PoolFromSpec(p *spec.Pool) Pool {
	out := Pool{
		Name:        p.Name,
		Partition:   p.Name,
		Node:        virga.Resources{CPU: p.Node.CPU, MemoryMB: p.Node.MemoryMB, GPU: p.Node.GPU},
		Nodes:       max(p.Nodes.Max, p.Nodes.Min, 1),
		Preemptible: p.Market == spec.Spot,
		TimeLimit:   timeLimitOf(p),
	}
	if out.Preemptible {
		out.Warning = p.Warning.D()
	}
	if s := p.Slurm; s != nil {
		if s.Partition != "" {
			out.Partition = s.Partition
		}
		out.QoS, out.Account = s.QoS, s.Account
	}
	return out
}
