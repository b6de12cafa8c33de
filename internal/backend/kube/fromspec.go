package kube

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/spec"
)

// PoolFromSpec builds a backend pool from a capacity file's pool (backend
// kubernetes): its node shape, its nodes (the maximum of a growing pool),
// spot market and warning, and its kubernetes placement. A provider's spot
// labels and tolerations (SpotSelector) are added to a spot pool's node
// selector, and for an on-demand pool the labels or affinity that keep its
// pods off the provider's spot nodes (OnDemandSelector).
func PoolFromSpec(p *spec.Pool) (Pool, error) {
	out := Pool{
		Name:  p.Name,
		Node:  virga.Resources{CPU: p.Node.CPU, MemoryMB: p.Node.MemoryMB, GPU: p.Node.GPU},
		Nodes: max(p.Nodes.Max, p.Nodes.Min, 1),
		Spot:  p.Market == spec.Spot,
	}
	if out.Spot {
		out.Warning = p.Warning.D()
	}
	k := p.Kubernetes
	if k == nil {
		return out, nil
	}
	if len(k.NodeSelector) > 0 {
		out.NodeSelector = map[string]string{}
		for key, v := range k.NodeSelector {
			out.NodeSelector[key] = v
		}
	}
	for _, t := range k.Tolerations {
		op := corev1.TolerationOperator(t.Operator)
		if op == "" {
			op = corev1.TolerationOpEqual
		}
		out.Tolerations = append(out.Tolerations, corev1.Toleration{Key: t.Key, Operator: op, Value: t.Value,
			Effect: corev1.TaintEffect(t.Effect)})
	}
	if k.Provider != "" {
		sel := SpotSelector
		if !out.Spot {
			sel = OnDemandSelector
		}
		pl, err := sel(k.Provider)
		if err != nil {
			return Pool{}, fmt.Errorf("pool %s: %w", p.Name, err)
		}
		pl.Apply(&out)
	}
	return out, nil
}
