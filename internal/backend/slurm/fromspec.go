package slurm

import (
	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/spec"
)

// PoolFromSpec builds a backend pool from a capacity file's pool (backend
// slurm): its partition, QoS and account (the partition defaults to the
// pool's name), its node shape, its nodes (the maximum of a growing pool),
// and, for a spot pool, preemptible with its warning (which should match the
// partition's GraceTime). A node without memory leaves --mem out: Slurm's
// default applies (on many sites the whole node's memory).
func PoolFromSpec(p *spec.Pool) Pool {
	out := Pool{
		Name:        p.Name,
		Partition:   p.Name,
		Node:        virga.Resources{CPU: p.Node.CPU, MemoryMB: p.Node.MemoryMB, GPU: p.Node.GPU},
		Nodes:       max(p.Nodes.Max, p.Nodes.Min, 1),
		Preemptible: p.Market == spec.Spot,
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
