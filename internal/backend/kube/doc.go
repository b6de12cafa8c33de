// Package kube runs attempts on a Kubernetes cluster: each node of an
// attempt's gang is a Pod running `virga agent` (package agent) from the
// configured image, in one namespace, and the backend follows them through one
// shared informer on Virga's pods (a label selector in that namespace), never
// by polling.
//
// # Why a bare Pod and not a batch Job
//
// An attempt is one or more bare Pods with restartPolicy Never. Virga's
// control loop is the one that decides whether an attempt is retried, from
// what checkpoint, on which pool, and whether the retry counts against the
// trial's restarts (a preemption does not). A Job's controller retries and
// replaces pods on its own: that would hide preemptions from Virga (a spot
// reclaim would become a silent new pod that restarts from whatever is on its
// disk) and count one Virga attempt as several runs, or several attempts as
// one. A Job with backoffLimit 0 would do nothing Virga needs and add an
// object, a controller and their latency to every attempt's path (the
// controller creates the pod, the backend must watch both). With bare Pods
// every create and delete is Virga's own, and what the backend reports is
// what the kubelet and scheduler did.
//
// # Pods, pools and gangs
//
// The pod runs Config.Image with the command Config.Command (`virga agent`)
// and the environment agent.EnvSpec (the attempt's agent.Spec),
// agent.EnvNodeRank and agent.EnvMasterAddr; it requests and is limited to
// the per-node share of the attempt (StartSpec.PerNode) in cpu, memory and
// nvidia.com/gpu (Guaranteed QoS, the last class the kubelet evicts under node
// pressure). A pool (Config.Pools) becomes the pod's node selector, node
// affinity and tolerations; SpotSelector and OnDemandSelector give the node
// labels and tolerations of Karpenter, GKE, EKS managed node groups and AKS.
//
// An attempt of N > 1 nodes is N pods created together (if one create fails
// the others are deleted and Start fails: all or nothing) and a headless
// Service owned by the first pod (deleted with it by the garbage collector).
// Pod r has hostname <name>-<r> and the Service as subdomain, so rank 0 is
// <name>-0.<name>.<namespace>.svc, the gang's VIRGA_MASTER_ADDR. The attempt
// is Started once all N pods run. When one pod of the gang fails, is
// preempted or is lost, the backend deletes the others (with the attempt's
// stop grace) and reports the attempt Exited once, Preempted if a pod was
// preempted.
//
// # What counts as a preemption
//
// An attempt ends Exited{Preempted: true} when one of its pods carries the
// DisruptionTarget condition (PreemptionByScheduler, EvictionByEvictionAPI,
// DeletionByTaintManager, TerminationByKubelet, DeletionByPodGC), ends with
// status reason Evicted, Preempting, NodeLost, Shutdown, Terminated or
// NodeShutdown, or is deleted once it ran without Virga asking (a node drain
// without the eviction API, a spot node's termination handler, its node
// removed and the pod garbage collected). A pod deleted by someone else before
// it ever ran ends the attempt Lost.
//
// # Lifecycle
//
// Stop deletes the attempt's pods with the grace period given (the kubelet
// sends SIGTERM, then SIGKILL after it); pods carry terminationGracePeriodSeconds
// = StartSpec.StopGrace so that an eviction gives the trial as long. A finished
// pod is kept for Config.FinishedTTL (for `kubectl logs`) and then deleted. Adopt
// takes over an attempt of an earlier server from the informer's cache: pods
// that still run are watched, pods that ended report their status, no pods at
// all means Exited Lost. Every attempt gets Started at most once and Exited
// exactly once. Free, Capacity and Pools account each pool as Nodes x Node
// minus what its live attempts hold; the scheduler still decides where pods go,
// and a pod that does not fit a node waits Pending.
package kube
