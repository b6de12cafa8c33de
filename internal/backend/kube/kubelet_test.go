package kube

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
)

// cluster is a fake API server (client-go's fake clientset) with a fake
// kubelet and scheduler that the tests drive: they move pods through the
// states a real cluster would.
type cluster struct {
	t  *testing.T
	cs *fake.Clientset
	ns string

	mu      sync.Mutex
	uid     int
	watches chan struct{} // one value per watch started
	// graceful: a delete marks the pod terminating (deletionTimestamp) and
	// leaves it for the kubelet (finishDelete); otherwise the kubelet kills
	// the container at once (exit 143 if it ran) and the pod is removed.
	graceful bool
	deletes  []metav1.DeleteOptions
	// failCreate makes the n-th pod create (1-based) fail.
	failCreate int
	creates    int
}

var podsGVR = corev1.SchemeGroupVersion.WithResource("pods")

func newCluster(t *testing.T) *cluster {
	c := &cluster{t: t, cs: fake.NewClientset(), ns: "virga-test", watches: make(chan struct{}, 16)}
	c.cs.PrependWatchReactor("pods", func(action k8stesting.Action) (bool, watch.Interface, error) {
		w, err := c.cs.Tracker().Watch(podsGVR, action.GetNamespace())
		c.watches <- struct{}{}
		return true, w, err
	})
	c.cs.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		pod := action.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.creates++
		if c.failCreate > 0 && c.creates == c.failCreate {
			return true, nil, fmt.Errorf("admission webhook refused pod %s", pod.Name)
		}
		c.uid++
		pod.UID = types.UID(fmt.Sprintf("uid-%d", c.uid))
		pod.CreationTimestamp = metav1.Now()
		pod.Status.Phase = corev1.PodPending
		return false, nil, nil // on to the tracker
	})
	c.cs.PrependReactor("delete", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		da := action.(k8stesting.DeleteActionImpl)
		c.mu.Lock()
		c.deletes = append(c.deletes, da.DeleteOptions)
		graceful := c.graceful
		c.mu.Unlock()
		obj, err := c.cs.Tracker().Get(podsGVR, da.Namespace, da.Name)
		if err != nil {
			return true, nil, err
		}
		pod := obj.(*corev1.Pod).DeepCopy()
		if graceful && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			if pod.DeletionTimestamp == nil {
				now := metav1.Now()
				pod.DeletionTimestamp = &now
				pod.DeletionGracePeriodSeconds = da.DeleteOptions.GracePeriodSeconds
				return true, nil, c.cs.Tracker().Update(podsGVR, pod, da.Namespace)
			}
			return true, nil, nil
		}
		// The kubelet sends SIGTERM; the agent exits 143.
		if running(pod) {
			terminate(pod, 143, "Error")
			pod.Status.Phase = corev1.PodFailed
			if err := c.cs.Tracker().Update(podsGVR, pod, da.Namespace); err != nil {
				return true, nil, err
			}
		}
		return true, nil, c.cs.Tracker().Delete(podsGVR, da.Namespace, da.Name)
	})
	return c
}

// backend starts a backend over the cluster and waits until its informer
// watches.
func (c *cluster) backend(cfg Config) *Backend {
	c.t.Helper()
	if cfg.Namespace == "" {
		cfg.Namespace = c.ns
	}
	if cfg.Image == "" {
		cfg.Image = "ghcr.io/virga-ml/virga:test"
	}
	if cfg.Capacity == (virga.Resources{}) && len(cfg.Pools) == 0 {
		cfg.Capacity = virga.Resources{CPU: 64, MemoryMB: 256 << 10, GPU: 8}
	}
	b, err := New(c.cs, cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	select {
	case <-c.watches:
	case <-time.After(10 * time.Second):
		c.t.Fatal("the informer never started its watch")
	}
	c.t.Cleanup(func() { _ = b.Close() })
	return b
}

func (c *cluster) get(name string) *corev1.Pod {
	c.t.Helper()
	obj, err := c.cs.Tracker().Get(podsGVR, c.ns, name)
	if err != nil {
		c.t.Fatalf("pod %s: %v", name, err)
	}
	return obj.(*corev1.Pod).DeepCopy()
}

func (c *cluster) exists(name string) bool {
	_, err := c.cs.Tracker().Get(podsGVR, c.ns, name)
	return err == nil
}

func (c *cluster) update(pod *corev1.Pod) {
	c.t.Helper()
	if err := c.cs.Tracker().Update(podsGVR, pod, c.ns); err != nil {
		c.t.Fatalf("updating pod %s: %v", pod.Name, err)
	}
}

// schedule binds the pod to a node, as the scheduler does.
func (c *cluster) schedule(name, node string) {
	pod := c.get(name)
	pod.Spec.NodeName = node
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue})
	c.update(pod)
}

// run starts the pod's container, as the kubelet does (scheduling it first
// if needed).
func (c *cluster) run(name string) {
	pod := c.get(name)
	if pod.Spec.NodeName == "" {
		pod.Spec.NodeName = "node-" + name
	}
	now := metav1.Now()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.StartTime = &now
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, Ready: true,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
	c.update(pod)
}

// exit ends the pod's container with code: Succeeded for 0, Failed
// otherwise.
func (c *cluster) exit(name string, code int32) {
	pod := c.get(name)
	reason := "Completed"
	pod.Status.Phase = corev1.PodSucceeded
	if code != 0 {
		reason = "Error"
		pod.Status.Phase = corev1.PodFailed
	}
	terminate(pod, code, reason)
	c.update(pod)
}

// disrupt adds the DisruptionTarget condition with reason, as the eviction
// API, the scheduler, the taint manager or the kubelet do before killing a
// pod.
func (c *cluster) disrupt(name, reason string) {
	pod := c.get(name)
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget,
		Status: corev1.ConditionTrue, Reason: reason, Message: "test: " + reason})
	c.update(pod)
}

// fail ends the pod Failed with a status reason (Evicted, NodeLost, ...)
// and its container with code.
func (c *cluster) fail(name, reason string, code int32) {
	pod := c.get(name)
	pod.Status.Phase = corev1.PodFailed
	pod.Status.Reason = reason
	pod.Status.Message = "test: " + reason
	terminate(pod, code, "Error")
	c.update(pod)
}

// remove deletes the pod from the API at once (someone else's delete, the
// pod garbage collector, or the end of a graceful deletion).
func (c *cluster) remove(name string) {
	c.t.Helper()
	if err := c.cs.Tracker().Delete(podsGVR, c.ns, name); err != nil {
		c.t.Fatalf("deleting pod %s: %v", name, err)
	}
}

// finishDelete ends a terminating pod's container with code and removes it.
func (c *cluster) finishDelete(name string, code int32) {
	pod := c.get(name)
	if pod.DeletionTimestamp == nil {
		c.t.Fatalf("pod %s is not being deleted", name)
	}
	terminate(pod, code, "Error")
	pod.Status.Phase = corev1.PodFailed
	c.update(pod)
	c.remove(name)
}

func (c *cluster) deleteOptions() []metav1.DeleteOptions {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]metav1.DeleteOptions(nil), c.deletes...)
}

func running(pod *corev1.Pod) bool {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Running != nil {
			return true
		}
	}
	return false
}

func terminate(pod *corev1.Pod, code int32, reason string) {
	now := metav1.Now()
	var started metav1.Time
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Running != nil {
			started = cs.State.Running.StartedAt
		}
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason,
			StartedAt: started, FinishedAt: now}}}}
}

// next returns the backend's next event, failing after a while.
func next(t *testing.T, b *Backend) backend.Event {
	t.Helper()
	select {
	case ev, ok := <-b.Events():
		if !ok {
			t.Fatal("events closed")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return backend.Event{}
}

// none checks that no event comes for a short while.
func none(t *testing.T, b *Backend) {
	t.Helper()
	select {
	case ev := <-b.Events():
		t.Fatalf("unexpected event %+v", ev)
	case <-time.After(100 * time.Millisecond):
	}
}

// waitFor waits until cond holds (the informer delivers asynchronously).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func startSpec(id int64) *backend.StartSpec {
	return &backend.StartSpec{AttemptID: id, TrialID: 10 + id, ExperimentID: 1, Argv: []string{"python", "train.py", "--lr=0.1"},
		Env: map[string]string{"VIRGA_HPARAMS": `{"lr":0.1}`}, Resources: virga.Resources{CPU: 2, MemoryMB: 4096, GPU: 1},
		Nodes: 1, ProcessesPerNode: 1, StopGrace: 30 * time.Second, ReportURL: fmt.Sprintf("http://virga.virga:7070/api/v1/attempts/%d/report", id),
		Token: "tok"}
}

func hasPrefix(s, p string) bool { return strings.HasPrefix(s, p) }
