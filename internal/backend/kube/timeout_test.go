package kube

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/clock"
)

func TestStartTimeout(t *testing.T) {
	for _, spot := range []bool{false, true} {
		c := newCluster(t)
		b := c.backend(Config{StartTimeout: 50 * time.Millisecond, Pools: []Pool{{Name: "p", Spot: spot, Nodes: 2,
			Node: virga.Resources{CPU: 8, MemoryMB: 32 << 10, GPU: 1}}}})
		s := startSpec(1)
		s.Nodes = 2
		s.Resources.GPU = 2
		if err := b.Start(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		c.run("virga-1-0") // the other never gets a node
		ev := next(t, b)
		if ev.Kind != backend.Exited || ev.Preempted != spot || ev.Lost == spot || !strings.Contains(ev.Message, "did not all run within 50ms") {
			t.Fatalf("spot %v: got %+v", spot, ev)
		}
		waitFor(t, "the pods to be deleted", func() bool { return !c.exists("virga-1-0") && !c.exists("virga-1-1") })
		if f := b.Free(); f != b.Capacity() {
			t.Errorf("free %+v", f)
		}
		none(t, b)
	}
}

func TestStartTimeoutDoesNotEndARunningAttempt(t *testing.T) {
	c := newCluster(t)
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	b := c.backend(Config{StartTimeout: time.Minute, Clock: clk})
	if err := b.Start(context.Background(), startSpec(1)); err != nil {
		t.Fatal(err)
	}
	c.run("virga-1-0")
	next(t, b)
	if clk.Waiters() != 1 {
		t.Fatalf("%d timers on the clock, want the start timeout's", clk.Waiters())
	}
	clk.Advance(2 * time.Minute) // the timeout's timer runs, and finds it running
	if clk.Waiters() != 0 {
		t.Fatalf("%d timers on the clock after the timeout, want none", clk.Waiters())
	}
	none(t, b)
}

func TestInvalidImageEndsTheAttempt(t *testing.T) {
	c := newCluster(t)
	b := c.backend(Config{})
	if err := b.Start(context.Background(), startSpec(1)); err != nil {
		t.Fatal(err)
	}
	pod := c.get("virga-1-0")
	pod.Spec.NodeName = "n1"
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: "InvalidImageName", Message: `couldn't parse image name "UPPER"`}}}}
	c.update(pod)
	ev := next(t, b)
	if ev.Kind != backend.Exited || !ev.Lost || !strings.Contains(ev.Message, "InvalidImageName") {
		t.Fatalf("got %+v", ev)
	}
}

// A pod whose node vanished stays terminating (no kubelet confirms its
// deletion): LostAfter past its deadline, it counts as gone.
func TestStuckTerminatingPodIsLostWithItsNode(t *testing.T) {
	c := newCluster(t)
	b := c.backend(Config{LostAfter: 20 * time.Millisecond})
	if err := b.Start(context.Background(), startSpec(1)); err != nil {
		t.Fatal(err)
	}
	c.run("virga-1-0")
	next(t, b)
	pod := c.get("virga-1-0")
	deadline := metav1.NewTime(time.Now().Add(30 * time.Millisecond))
	pod.DeletionTimestamp = &deadline
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse})
	c.update(pod)
	ev := next(t, b)
	if ev.Kind != backend.Exited || !ev.Preempted || ev.Signal != "killed" {
		t.Fatalf("got %+v", ev)
	}
}

func TestNodeLostAfterTolerations(t *testing.T) {
	c := newCluster(t)
	b := c.backend(Config{NodeLostAfter: 45 * time.Second})
	if err := b.Start(context.Background(), startSpec(1)); err != nil {
		t.Fatal(err)
	}
	pod := c.get("virga-1-0")
	n := 0
	for _, tl := range pod.Spec.Tolerations {
		if (tl.Key == "node.kubernetes.io/unreachable" || tl.Key == "node.kubernetes.io/not-ready") &&
			tl.Effect == corev1.TaintEffectNoExecute && tl.TolerationSeconds != nil && *tl.TolerationSeconds == 45 {
			n++
		}
	}
	if n != 2 {
		t.Errorf("tolerations %+v", pod.Spec.Tolerations)
	}
}
