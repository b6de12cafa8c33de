package kube

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
)

// TestKWOKScale starts 1,000 attempts at once on 300 KWOK nodes (the
// cluster's 200 and 100 of the test's own), ends them through KWOK's stage
// and waits until their pods are gone, counting the requests the backend
// sends by verb and the pod watch events of the namespace. In the steady
// state (from the first attempt's Started on) the backend lists nothing;
// it sends 2 calls per attempt (create, and delete after FinishedTTL).
func TestKWOKScale(t *testing.T) {
	admin, ns := kwokNamespace(t)
	roleClient := asServiceAccount(t, admin, ns)
	ctx := context.Background()
	const trials, extraNodes = 1000, 100

	for i := range extraNodes {
		name := fmt.Sprintf("kwok-%s-x%03d", ns, i)
		capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32"),
			corev1.ResourceMemory: resource.MustParse("128Gi"), corev1.ResourcePods: resource.MustParse("110")}
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
			Labels: map[string]string{"type": "kwok", "virga.dev/pool": "on-demand", "kubernetes.io/hostname": name,
				"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "karpenter.sh/capacity-type": "on-demand"}},
			Status: corev1.NodeStatus{Allocatable: capacity, Capacity: capacity}}
		if _, err := admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	waitFor(t, "300 Ready KWOK nodes", func() bool {
		nodes, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=kwok"})
		if err != nil {
			return false
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready >= 300
	})

	pools := karpenterPools(t, virga.Resources{CPU: 32, MemoryMB: 128 << 10}, 200, 100)
	b, err := New(roleClient, Config{Namespace: ns, Image: "virga:kwok", Instance: "scale", Pools: pools,
		FinishedTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	evs := collect(b)

	// The namespace's pod events, as the backend's informer gets them.
	w, err := admin.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var watchEvents atomic.Int64
	go func() {
		for range w.ResultChan() {
			watchEvents.Add(1)
		}
	}()

	began := time.Now()
	var steady map[string]int64
	for id := int64(1); id <= trials; id++ {
		pool := "on-demand"
		if id%3 == 0 {
			pool = "spot"
		}
		s := &backend.StartSpec{AttemptID: id, TrialID: id, ExperimentID: 1, Argv: []string{"train"},
			Resources: virga.Resources{CPU: 1, MemoryMB: 1024}, Nodes: 1, ProcessesPerNode: 1, Pool: pool,
			StopGrace: 5 * time.Second, Token: "scale",
			ReportURL: fmt.Sprintf("http://127.0.0.1:9/api/v1/attempts/%d/report", id)}
		if err := b.Start(ctx, s); err != nil {
			t.Fatalf("start attempt %d: %v", id, err)
		}
		if id == 1 {
			evs.wait(t, 1, backend.Started)
			steady = roleClient.RequestsByVerb()
		}
	}
	for id := int64(1); id <= trials; id++ {
		evs.wait(t, id, backend.Started)
	}
	running := time.Since(began)
	// Each trial ends with exit code 0, through KWOK's stage.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"0"}}}`, kwokExitAnnotation)
	for id := int64(1); id <= trials; id++ {
		if _, err := admin.CoreV1().Pods(ns).Patch(ctx, podName(fmt.Sprintf("scale-%d", id), 0), types.MergePatchType,
			[]byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for id := int64(1); id <= trials; id++ {
		if ev := evs.wait(t, id, backend.Exited); ev.ExitCode == nil || *ev.ExitCode != 0 || ev.Preempted || ev.Lost {
			t.Errorf("attempt %d: %+v, want exit code 0", id, ev)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err == nil && len(pods.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the finished pods are not deleted within 2 minutes (%d left, %v)", len(pods.Items), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	elapsed := time.Since(began)
	end := roleClient.RequestsByVerb()
	diff := map[string]int64{}
	var calls int64
	for v, n := range end {
		if d := n - steady[v]; d != 0 {
			diff[v] = d
			if v != "watch" {
				calls += d
			}
		}
	}
	events := watchEvents.Load()
	t.Logf("%d attempts on 300 nodes: all Started after %s, pods gone after %s", trials, running.Round(time.Millisecond),
		elapsed.Round(time.Millisecond))
	t.Logf("backend requests in the steady state %v: %.3f calls per attempt (the first attempt's create excepted)",
		diff, float64(calls)/float64(trials))
	t.Logf("backend requests in all %v", end)
	t.Logf("%d pod watch events, %.1f per attempt, %.0f per second", events, float64(events)/trials,
		float64(events)/elapsed.Seconds())
	if diff["list"] != 0 {
		t.Errorf("%d list calls in the steady state, want none", diff["list"])
	}
	if diff["create"] != trials-1 || diff["delete"] != trials {
		t.Errorf("steady state: %d creates and %d deletes, want %d and %d", diff["create"], diff["delete"], trials-1, trials)
	}
	if float64(calls) > 2*trials {
		t.Errorf("%d calls for %d attempts, want at most 2 each", calls, trials)
	}
	for id, n := range evs.counts() {
		if n != [2]int{1, 1} {
			t.Errorf("attempt %d: %d Started and %d Exited events, want one of each", id, n[0], n[1])
		}
	}
}
