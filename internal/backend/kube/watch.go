package kube

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
)

// attempt is the backend's state of one live attempt, guarded by
// Backend.mu.
type attempt struct {
	id    int64
	name  string // the Service's name and the pods' prefix
	nodes int
	pool  *pool // nil: adopted on a pool no longer configured
	res   virga.Resources
	grace time.Duration // StartSpec.StopGrace: the survivors' grace when a gang breaks

	creating  bool // Start is creating the pods: no events yet
	stopping  bool // Stop was called
	stopGrace time.Duration
	started   bool
	startedT  time.Time // the Time of its Started event
	exited    bool
	pods      []*podState // by rank

	// cause is the rank of the first pod whose failure, preemption or loss
	// ends the attempt (-1: none yet); preempt says why the attempt counts
	// as preempted (empty: it does not).
	cause   int
	preempt string
	// abort, when set, says why the backend itself ended the attempt
	// before it ran (StartTimeout, an image that can never be pulled); its
	// pods are being deleted. abortPreempted reports it Preempted rather
	// than Lost.
	abort          string
	abortPreempted bool
}

// podState is what the backend knows of one pod of an attempt.
type podState struct {
	pod      *corev1.Pod // last seen; nil before the informer saw it
	gone     bool        // deleted from the API
	deleting bool        // Virga asked for its deletion
	ran      bool        // its container ran at some point
	// stuck: it stayed terminating LostAfter past its grace period: taken
	// as gone with its node.
	stuck    bool
	watching bool // a timer for stuck is set
}

// onPod is the informer's handler for every add, update and delete of one of
// the backend's pods.
func (b *Backend) onPod(obj any, gone bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	id, err := strconv.ParseInt(pod.Labels[LabelAttempt], 10, 64)
	if err != nil {
		return
	}
	rank, err := strconv.Atoi(pod.Labels[LabelRank])
	if err != nil {
		return
	}
	b.mu.Lock()
	a := b.attempts[id]
	if a == nil || a.exited || rank < 0 || rank >= len(a.pods) || pod.Name != podName(a.name, rank) {
		b.mu.Unlock()
		return
	}
	ps := a.pods[rank]
	ps.pod = pod
	ps.gone = ps.gone || gone
	b.watchTerminating(a, ps)
	dels := b.evaluate(a)
	grace := a.grace
	b.mu.Unlock()
	_ = b.deleteAll(dels, grace)
}

// watchTerminating sets a timer for a pod being deleted: if it is still
// there LostAfter past its deletion's deadline, its node is taken as gone.
// Called with b.mu held.
func (b *Backend) watchTerminating(a *attempt, ps *podState) {
	if ps.watching || ps.gone || ps.pod == nil || ps.pod.DeletionTimestamp == nil {
		return
	}
	ps.watching = true
	d := ps.pod.DeletionTimestamp.Time.Add(b.cfg.LostAfter).Sub(b.cfg.Clock.Now())
	b.after(d, func() {
		b.mu.Lock()
		if b.attempts[a.id] != a || ps.gone {
			b.mu.Unlock()
			return
		}
		ps.stuck = true
		dels := b.evaluate(a)
		grace := a.grace
		b.mu.Unlock()
		_ = b.deleteAll(dels, grace)
	})
}

// fatalWaiting are the reasons a container waits that no retry of the
// kubelet can cure.
var fatalWaiting = map[string]bool{"InvalidImageName": true, "ErrImageNeverPull": true}

// abortAttempt ends an attempt that has not run: its pods are deleted and
// it is reported with why once they are gone. Called with b.mu held; returns
// the pods to delete.
func (b *Backend) abortAttempt(a *attempt, why string, preempted bool) (dels []string) {
	if a.exited || a.abort != "" {
		return nil
	}
	a.abort, a.abortPreempted = why, preempted
	for r, ps := range a.pods {
		if !ps.deleting && !ps.gone {
			ps.deleting = true
			dels = append(dels, podName(a.name, r))
		}
	}
	return append(dels, b.evaluate(a)...)
}

// watchStart sets the StartTimeout timer of an attempt. Called with b.mu
// held.
func (b *Backend) watchStart(a *attempt, since time.Time) {
	if b.cfg.StartTimeout <= 0 || a.started || a.exited {
		return
	}
	b.after(since.Add(b.cfg.StartTimeout).Sub(b.cfg.Clock.Now()), func() {
		b.mu.Lock()
		if b.attempts[a.id] != a || a.started || a.stopping {
			b.mu.Unlock()
			return
		}
		spot := a.pool != nil && a.pool.Spot
		why := fmt.Sprintf("its pods did not all run within %s", b.cfg.StartTimeout)
		if spot {
			why += fmt.Sprintf(" (no capacity in spot pool %q)", a.pool.Name)
		}
		dels := b.abortAttempt(a, why, spot)
		grace := a.grace
		b.mu.Unlock()
		_ = b.deleteAll(dels, grace)
	})
}

// podView is what one pod's last status says.
type podView struct {
	running bool   // the container runs now
	ran     bool   // the container started at some point
	ended   bool   // the pod is over: Succeeded, Failed or deleted
	ok      bool   // Succeeded
	preempt string // why it counts as preempted, if it does
	term    *corev1.ContainerStateTerminated
	node    string
	reason  string // status reason and message, for Exited's Message
	fatal   string // the container waits for good (an invalid image)
}

// Reasons of the DisruptionTarget condition and pod status reasons that mean
// the pod's capacity was taken away.
var (
	disruptionReasons = map[string]bool{
		"PreemptionByScheduler": true, "EvictionByEvictionAPI": true, "DeletionByTaintManager": true,
		"TerminationByKubelet": true, "DeletionByPodGC": true,
	}
	preemptStatusReasons = map[string]bool{
		"Evicted": true, "Preempting": true, "NodeLost": true, "Shutdown": true, "Terminated": true,
		"NodeShutdown": true,
	}
)

func (b *Backend) view(a *attempt, ps *podState) (v podView) {
	if ps.pod == nil {
		v.ended = ps.gone
		return v
	}
	if ps.stuck && v.preempt == "" && !ps.deleting && !a.stopping {
		defer func() {
			if v.preempt == "" {
				v.preempt = fmt.Sprintf("still terminating %s after its grace period: its node is gone", b.cfg.LostAfter)
			}
		}()
	}
	pod := ps.pod
	v.node = pod.Spec.NodeName
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != ContainerName {
			continue
		}
		switch {
		case cs.State.Running != nil:
			v.running, v.ran = true, true
		case cs.State.Terminated != nil:
			v.term = cs.State.Terminated
			v.ran = !cs.State.Terminated.StartedAt.IsZero()
		case cs.State.Waiting != nil && fatalWaiting[cs.State.Waiting.Reason]:
			v.fatal = cs.State.Waiting.Reason + ": " + cs.State.Waiting.Message
		}
		if cs.LastTerminationState.Terminated != nil && v.term == nil {
			v.term = cs.LastTerminationState.Terminated
			v.ran = v.ran || !v.term.StartedAt.IsZero()
		}
	}
	if pod.Status.Phase == corev1.PodRunning && len(pod.Status.ContainerStatuses) == 0 {
		v.running, v.ran = true, true
	}
	v.ran = v.ran || ps.ran
	switch pod.Status.Phase {
	case corev1.PodSucceeded:
		v.ended, v.ok = true, true
		v.running = false
	case corev1.PodFailed:
		v.ended = true
		v.running = false
	}
	v.ended = v.ended || ps.gone || ps.stuck
	if pod.Status.Reason != "" {
		v.reason = pod.Status.Reason
		if pod.Status.Message != "" {
			v.reason += ": " + pod.Status.Message
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			if disruptionReasons[c.Reason] {
				v.preempt = "DisruptionTarget " + c.Reason
				if c.Message != "" {
					v.preempt += ": " + c.Message
				}
			}
		}
	}
	if v.preempt == "" && preemptStatusReasons[pod.Status.Reason] {
		v.preempt = v.reason
	}
	if v.preempt == "" && !ps.deleting && !a.stopping && v.ran && !v.ok && (pod.DeletionTimestamp != nil || ps.gone) {
		if ps.gone {
			v.preempt = "deleted while it ran, not by Virga"
		} else {
			v.preempt = "being deleted while it ran, not by Virga"
		}
	}
	return v
}

// evaluate moves an attempt on from its pods' last states: Started once
// every pod runs, a broken gang's other pods deleted, Exited once it is
// over. It returns the pods to delete (with a.grace) after the lock is
// released.
func (b *Backend) evaluate(a *attempt) (dels []string) {
	if a.creating || a.exited {
		return nil
	}
	views := make([]podView, len(a.pods))
	allRan, allEnded := true, true
	for r, ps := range a.pods {
		v := b.view(a, ps)
		views[r] = v
		if v.ran {
			ps.ran = true
		}
		allRan = allRan && ps.ran
		allEnded = allEnded && v.ended
		if v.preempt != "" && a.preempt == "" {
			a.preempt = fmt.Sprintf("pod %s %s", podName(a.name, r), v.preempt)
			if v.node != "" {
				a.preempt += " on node " + v.node
			}
		}
		broken := v.preempt != "" || (v.ended && !v.ok && !(a.stopping || ps.deleting))
		if a.cause < 0 && broken {
			a.cause = r
		}
	}
	if a.abort == "" && !a.started && !a.stopping {
		for r, v := range views {
			if v.fatal != "" {
				return b.abortAttempt(a, fmt.Sprintf("pod %s cannot start: %s", podName(a.name, r), v.fatal), false)
			}
		}
	}
	now := b.cfg.Clock.Now()
	if !a.started && allRan {
		a.started = true
		var nodes []string
		t := time.Time{}
		for r, v := range views {
			if v.node != "" {
				nodes = append(nodes, podName(a.name, r)+" on "+v.node)
			}
			if st := startedAt(a.pods[r].pod); st.After(t) {
				t = st
			}
		}
		if t.IsZero() || t.After(now) {
			t = now
		}
		a.startedT = t
		b.q.Push(backend.Event{AttemptID: a.id, Kind: backend.Started, Time: t, Pool: a.poolName(),
			Message: strings.Join(nodes, ", ")})
	}
	if a.cause >= 0 && a.nodes > 1 {
		for r, ps := range a.pods {
			if r != a.cause && !ps.deleting && !views[r].ended {
				ps.deleting = true
				dels = append(dels, podName(a.name, r))
			}
		}
	}
	if !allEnded && (a.cause < 0 || !views[a.cause].ended) {
		return dels
	}
	// Over: report it once.
	src := 0
	if a.cause >= 0 {
		src = a.cause
	}
	v := views[src]
	ev := backend.Event{AttemptID: a.id, Kind: backend.Exited, Time: now, Pool: a.poolName(),
		Preempted: a.preempt != ""}
	msg := []string{}
	if a.preempt != "" {
		msg = append(msg, "preempted: "+a.preempt)
	}
	if a.abort != "" && !a.started {
		ev.Preempted, ev.Lost = a.abortPreempted, !a.abortPreempted
		if ev.Preempted {
			ev.Signal = "killed"
		}
		ev.Message = a.abort
		a.exited = true
		b.q.Push(ev)
		b.finish(a)
		return dels
	}
	if t := v.term; t != nil {
		if sig := t.Signal; sig != 0 {
			ev.Signal = syscall.Signal(sig).String()
		} else if sig := backend.StatusSignal(int(t.ExitCode)); sig != "" {
			// The runtime reports a process killed by signal N as 128+N.
			ev.Signal = sig
		} else {
			code := int(t.ExitCode)
			ev.ExitCode = &code
		}
		if t.Reason != "" && t.Reason != "Completed" && t.Reason != "Error" {
			msg = append(msg, fmt.Sprintf("pod %s: container %s", podName(a.name, src), t.Reason))
		}
		// The container's end, unless that is before the attempt's
		// Started: a gang's node that failed before the last one started,
		// or a status recorded to the second only.
		if !t.FinishedAt.IsZero() && !t.FinishedAt.After(now) {
			ev.Time = t.FinishedAt.Time
			if a.started && ev.Time.Before(a.startedT) {
				ev.Time = a.startedT
			}
		}
	} else {
		switch {
		case a.stopping || a.pods[src].deleting:
			ev.Signal = "terminated"
			msg = append(msg, fmt.Sprintf("pod %s deleted by Virga before its exit status was recorded", podName(a.name, src)))
		case a.preempt != "":
			ev.Signal = "killed"
		default:
			ev.Lost = true
			how := "was deleted before it ran, not by Virga"
			if a.pods[src].pod == nil && a.pods[src].gone {
				how = "was not found"
			} else if !a.pods[src].gone {
				how = "failed without an exit status"
			}
			msg = append(msg, fmt.Sprintf("pod %s %s", podName(a.name, src), how))
		}
	}
	if v.reason != "" && a.preempt == "" {
		msg = append(msg, fmt.Sprintf("pod %s: %s", podName(a.name, src), v.reason))
	}
	ev.Message = strings.Join(msg, "; ")
	a.exited = true
	b.q.Push(ev)
	b.finish(a)
	return dels
}

// finish releases an attempt that exited and schedules the deletion of its
// pods after FinishedTTL. Called with b.mu held.
func (b *Backend) finish(a *attempt) {
	if a.pool != nil {
		a.pool.acct.Release(a.res)
	}
	delete(b.attempts, a.id)
	b.ended[a.id] = true
	if b.cfg.FinishedTTL < 0 || b.closed {
		return
	}
	var left []string
	for r, ps := range a.pods {
		if !ps.gone && !ps.deleting && ps.pod != nil {
			left = append(left, podName(a.name, r))
		}
	}
	if len(left) == 0 {
		return
	}
	b.after(b.cfg.FinishedTTL, func() { _ = b.deleteAll(left, 0) })
}

func (a *attempt) poolName() string {
	if a.pool == nil {
		return ""
	}
	return a.pool.Name
}

func startedAt(pod *corev1.Pod) time.Time {
	if pod == nil {
		return time.Time{}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != ContainerName {
			continue
		}
		if r := cs.State.Running; r != nil {
			return r.StartedAt.Time
		}
		if t := cs.State.Terminated; t != nil {
			return t.StartedAt.Time
		}
	}
	return time.Time{}
}

func finishedAt(pod *corev1.Pod) time.Time {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == ContainerName && cs.State.Terminated != nil {
			return cs.State.Terminated.FinishedAt.Time
		}
	}
	if pod.Status.StartTime != nil {
		return pod.Status.StartTime.Time
	}
	return pod.CreationTimestamp.Time
}
