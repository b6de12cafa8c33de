package kube

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Providers SpotSelector and OnDemandSelector know.
const (
	Karpenter = "karpenter" // karpenter.sh/capacity-type (any cloud Karpenter runs on)
	GKE       = "gke"       // Google Kubernetes Engine Spot VMs
	EKS       = "eks"       // Amazon EKS managed node groups
	AKS       = "aks"       // Azure Kubernetes Service spot node pools
)

// Placement is the part of a Pool that picks its nodes.
type Placement struct {
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	Affinity     *corev1.Affinity
}

// Apply sets p's node selector, tolerations and affinity on pool (keeping
// the pool's own selector labels and tolerations too).
func (p Placement) Apply(pool *Pool) {
	if len(p.NodeSelector) > 0 {
		if pool.NodeSelector == nil {
			pool.NodeSelector = map[string]string{}
		}
		for k, v := range p.NodeSelector {
			pool.NodeSelector[k] = v
		}
	}
	pool.Tolerations = append(pool.Tolerations, p.Tolerations...)
	if p.Affinity != nil {
		pool.Affinity = p.Affinity
	}
}

// SpotSelector returns the node labels and tolerations that place pods on
// the spot nodes of provider (Karpenter, GKE, EKS, AKS; case-insensitive):
//
//   - karpenter: karpenter.sh/capacity-type: spot
//   - gke: cloud.google.com/gke-spot: "true", and a toleration of the
//     cloud.google.com/gke-spot=true:NoSchedule taint that spot node pools
//     are often given
//   - eks: eks.amazonaws.com/capacityType: SPOT
//   - aks: kubernetes.azure.com/scalesetpriority: spot, and a toleration of
//     the kubernetes.azure.com/scalesetpriority=spot:NoSchedule taint AKS puts
//     on every spot node
func SpotSelector(provider string) (Placement, error) {
	switch strings.ToLower(provider) {
	case Karpenter:
		return Placement{NodeSelector: map[string]string{"karpenter.sh/capacity-type": "spot"}}, nil
	case GKE:
		return Placement{
			NodeSelector: map[string]string{"cloud.google.com/gke-spot": "true"},
			Tolerations: []corev1.Toleration{{Key: "cloud.google.com/gke-spot", Operator: corev1.TolerationOpEqual,
				Value: "true", Effect: corev1.TaintEffectNoSchedule}},
		}, nil
	case EKS:
		return Placement{NodeSelector: map[string]string{"eks.amazonaws.com/capacityType": "SPOT"}}, nil
	case AKS:
		return Placement{
			NodeSelector: map[string]string{"kubernetes.azure.com/scalesetpriority": "spot"},
			Tolerations: []corev1.Toleration{{Key: "kubernetes.azure.com/scalesetpriority", Operator: corev1.TolerationOpEqual,
				Value: "spot", Effect: corev1.TaintEffectNoSchedule}},
		}, nil
	}
	return Placement{}, fmt.Errorf("kubernetes backend: unknown provider %q (known: karpenter, gke, eks, aks)", provider)
}

// OnDemandSelector returns what keeps pods off provider's spot nodes:
// karpenter.sh/capacity-type: on-demand, eks.amazonaws.com/capacityType:
// ON_DEMAND, and for GKE and AKS (whose on-demand nodes carry no label) a
// node affinity requiring the spot label to be absent.
func OnDemandSelector(provider string) (Placement, error) {
	notSpot := func(key string) *corev1.Affinity {
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpDoesNotExist}},
			}}},
		}}
	}
	switch strings.ToLower(provider) {
	case Karpenter:
		return Placement{NodeSelector: map[string]string{"karpenter.sh/capacity-type": "on-demand"}}, nil
	case GKE:
		return Placement{Affinity: notSpot("cloud.google.com/gke-spot")}, nil
	case EKS:
		return Placement{NodeSelector: map[string]string{"eks.amazonaws.com/capacityType": "ON_DEMAND"}}, nil
	case AKS:
		return Placement{Affinity: notSpot("kubernetes.azure.com/scalesetpriority")}, nil
	}
	return Placement{}, fmt.Errorf("kubernetes backend: unknown provider %q (known: karpenter, gke, eks, aks)", provider)
}
