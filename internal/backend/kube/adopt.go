package kube

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
)

// Adopt takes over an attempt started by an earlier server, from the pods
// the informer has listed (New waits for that list):
//
//   - no pod of the attempt is left: Exited Lost at once (it ended, or was
//     deleted, while no server watched it);
//   - its pods run: the attempt's resources are reserved in its pool
//     (a.Pool, else the pod's virga.dev/pool annotation; the whole
//     attempt's resources from the virga.dev/resources annotation, else
//     res), Started is emitted (readers accept a Started for an attempt
//     they saw running), and it is watched as one started here;
//   - its pods ended: Exited at once with their status (a finished pod is
//     kept for Config.FinishedTTL, so a server that comes back within it
//     still reads the exit code);
//   - part of a gang is missing: the rest is deleted and the attempt
//     reported as a gang that lost a node.
//
// A pod already being deleted when adopted counts as deleted by Virga (an
// earlier server's Stop) unless it carries a preemption's condition or
// reason. Adopt returns an error, emitting nothing, if the attempt is live
// or ended here.
func (b *Backend) Adopt(ctx context.Context, at *virga.Attempt, res virga.Resources) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return fmt.Errorf("kubernetes backend: closed")
	}
	if b.attempts[at.ID] != nil || b.ended[at.ID] {
		b.mu.Unlock()
		return fmt.Errorf("kubernetes backend: %w: attempt %d is already running here", virga.ErrConflict, at.ID)
	}
	objs, err := b.informer.GetIndexer().ByIndex(attemptIndex, strconv.FormatInt(at.ID, 10))
	if err != nil {
		b.mu.Unlock()
		return fmt.Errorf("kubernetes backend: %w", err)
	}
	name := b.baseName(at.ID)
	var pods []*corev1.Pod
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok && p.Labels[LabelInstance] == b.cfg.Instance {
			pods = append(pods, p)
		}
	}
	if len(pods) == 0 {
		b.ended[at.ID] = true
		b.mu.Unlock()
		b.q.Push(backend.Event{AttemptID: at.ID, Kind: backend.Exited, Time: b.cfg.Clock.Now(), Lost: true, Pool: at.Pool,
			Message: "no pod of the attempt was found: it ended or was deleted while no server watched it"})
		return nil
	}
	first := pods[0]
	nodes := len(pods)
	if n, err := strconv.Atoi(first.Annotations[AnnotationNodes]); err == nil && n >= nodes {
		nodes = n
	}
	for _, p := range pods {
		if r, err := strconv.Atoi(p.Labels[LabelRank]); err == nil && r >= nodes {
			nodes = r + 1
		}
	}
	if r, ok := parseResources(first.Annotations[AnnotationResources]); ok {
		res = r
	}
	grace, _ := time.ParseDuration(first.Annotations[AnnotationStopGrace])
	poolName := at.Pool
	if poolName == "" {
		poolName = first.Annotations[AnnotationPool]
	}
	var p *pool // nil: a pool no longer configured, not counted
	if !b.named {
		p = b.pools[0]
	} else if q, err := b.poolNamed(poolName); err == nil {
		p = q
	}
	a := &attempt{id: at.ID, name: name, nodes: nodes, pool: p, res: res, grace: grace, cause: -1,
		pods: make([]*podState, nodes)}
	for i := range a.pods {
		a.pods[i] = &podState{gone: true} // a rank without a pod is lost
	}
	for _, pod := range pods {
		r, err := strconv.Atoi(pod.Labels[LabelRank])
		if err != nil || r < 0 || r >= nodes || pod.Name != podName(name, r) {
			continue
		}
		a.pods[r] = &podState{pod: pod, deleting: pod.DeletionTimestamp != nil && !disrupted(pod)}
	}
	if p != nil {
		p.acct.Reserve(res)
	}
	b.attempts[at.ID] = a
	for _, ps := range a.pods {
		b.watchTerminating(a, ps)
	}
	b.watchStart(a, first.CreationTimestamp.Time)
	dels := b.evaluate(a)
	b.mu.Unlock()
	_ = b.deleteAll(dels, grace)
	return nil
}

// disrupted reports whether a pod carries a preemption's condition or
// status reason.
func disrupted(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && disruptionReasons[c.Reason] {
			return true
		}
	}
	return preemptStatusReasons[pod.Status.Reason]
}
