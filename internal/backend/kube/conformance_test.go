package kube

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
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
	"github.com/virga-ml/virga/internal/agent"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/backend/backendtest"
)

// TestConformance runs the backend conformance suite against the fake API
// server, with a kubelet that runs each pod's trial as a real process.
func TestConformance(t *testing.T) {
	k := newProcKubelet(t)
	pools := []Pool{
		{Name: "a", Node: virga.Resources{CPU: 1, MemoryMB: 256}, Nodes: 3},
		{Name: "b", Node: virga.Resources{CPU: 1, MemoryMB: 256}, Nodes: 2},
	}
	backendtest.Run(t, backendtest.Harness{
		New: func(t *testing.T) backend.Backend {
			b, err := New(k.cs, Config{Namespace: k.ns, Image: "ghcr.io/virga-ml/virga:test", Pools: pools})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			return b
		},
		Unit: virga.Resources{CPU: 1, MemoryMB: 64},
		// Kubernetes counts a deletion's grace in whole seconds.
		Caps: backendtest.Caps{Signals: true, Gang: true, MinGrace: time.Second},
	})
}

// procKubelet plays the scheduler and the kubelets of a fake API server
// with real processes: each pod created runs at once, its container
// replaced by the trial itself (the agent spec's argv, with the gang's
// RANK), in a process group of its own; the pod is Running while it runs,
// then Succeeded or Failed with its exit status (128+N for a signal, as a
// container runtime reports it). A delete sends SIGTERM to the group and
// SIGKILL when the grace period ends, and the pod is removed once the
// process ended, as the kubelet does.
type procKubelet struct {
	t  *testing.T
	cs *fake.Clientset
	ns string

	mu    sync.Mutex // serialises the pods' updates
	uid   int
	procs map[string]*podProc
	wg    sync.WaitGroup
}

// podProc is one pod's process.
type podProc struct {
	cmd      *exec.Cmd
	done     chan struct{} // closed once it ended and the pod says so
	deleting bool          // a delete is under way: remove the pod when it ends
}

func newProcKubelet(t *testing.T) *procKubelet {
	k := &procKubelet{t: t, cs: fake.NewClientset(), ns: "virga-test", procs: map[string]*podProc{}}
	k.cs.PrependWatchReactor("pods", func(action k8stesting.Action) (bool, watch.Interface, error) {
		w, err := k.cs.Tracker().Watch(podsGVR, action.GetNamespace())
		return true, w, err
	})
	k.cs.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		pod := action.(k8stesting.CreateAction).GetObject().(*corev1.Pod).DeepCopy()
		k.mu.Lock()
		defer k.mu.Unlock()
		k.uid++
		pod.UID = types.UID("uid-" + strconv.Itoa(k.uid))
		pod.CreationTimestamp = metav1.Now()
		pod.Status.Phase = corev1.PodPending
		if err := k.cs.Tracker().Create(podsGVR, pod, pod.Namespace); err != nil {
			return true, nil, err
		}
		k.startLocked(pod)
		return true, pod, nil
	})
	k.cs.PrependReactor("delete", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		da := action.(k8stesting.DeleteActionImpl)
		return true, nil, k.delete(da.Namespace, da.Name, da.DeleteOptions.GracePeriodSeconds)
	})
	t.Cleanup(k.killAll)
	return k
}

// startLocked runs the pod's trial and marks it Running. k.mu is held.
func (k *procKubelet) startLocked(pod *corev1.Pod) {
	env := map[string]string{}
	for _, e := range pod.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	spec, err := agent.Decode(env[agent.EnvSpec])
	if err != nil {
		k.t.Errorf("pod %s: %v", pod.Name, err)
		return
	}
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Dir = spec.Workdir
	cmd.Env = append(os.Environ(), "RANK="+env[agent.EnvNodeRank], agent.EnvNodeRank+"="+env[agent.EnvNodeRank])
	for k, v := range spec.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	now := metav1.Now()
	if err := cmd.Start(); err != nil {
		terminateAt(pod, 127, "StartError", now)
		pod.Status.Phase = corev1.PodFailed
		_ = k.cs.Tracker().Update(podsGVR, pod, pod.Namespace)
		return
	}
	p := &podProc{cmd: cmd, done: make(chan struct{})}
	k.procs[pod.Name] = p
	pod.Spec.NodeName = "node-" + pod.Name
	pod.Status.Phase = corev1.PodRunning
	pod.Status.StartTime = &now
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, Ready: true,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
	if err := k.cs.Tracker().Update(podsGVR, pod, pod.Namespace); err != nil {
		k.t.Errorf("pod %s: %v", pod.Name, err)
	}
	k.wg.Add(1)
	go k.wait(pod.Namespace, pod.Name, p)
}

// wait records the end of a pod's process in the pod, and removes a pod
// being deleted.
func (k *procKubelet) wait(ns, name string, p *podProc) {
	defer k.wg.Done()
	err := p.cmd.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	defer close(p.done)
	obj, err := k.cs.Tracker().Get(podsGVR, ns, name)
	if err != nil {
		return
	}
	pod := obj.(*corev1.Pod).DeepCopy()
	reason := "Completed"
	pod.Status.Phase = corev1.PodSucceeded
	if code != 0 {
		reason, pod.Status.Phase = "Error", corev1.PodFailed
	}
	terminateAt(pod, int32(code), reason, metav1.Now())
	_ = k.cs.Tracker().Update(podsGVR, pod, ns)
	if p.deleting {
		_ = k.cs.Tracker().Delete(podsGVR, ns, name)
	}
}

// delete is a pod's deletion: a pod whose process runs is marked
// terminating, its group sent SIGTERM, and SIGKILL after the grace (the
// pod's own if the delete gives none); any other pod is removed at once.
func (k *procKubelet) delete(ns, name string, graceSeconds *int64) error {
	k.mu.Lock()
	obj, err := k.cs.Tracker().Get(podsGVR, ns, name)
	if err != nil {
		k.mu.Unlock()
		return err
	}
	pod := obj.(*corev1.Pod).DeepCopy()
	p := k.procs[name]
	if p == nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		k.mu.Unlock()
		return k.cs.Tracker().Delete(podsGVR, ns, name)
	}
	grace := graceSeconds
	if grace == nil {
		grace = pod.Spec.TerminationGracePeriodSeconds
	}
	secs := int64(30)
	if grace != nil {
		secs = *grace
	}
	if pod.DeletionTimestamp == nil {
		now := metav1.Now()
		pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds = &now, &secs
		if err := k.cs.Tracker().Update(podsGVR, pod, ns); err != nil {
			k.mu.Unlock()
			return err
		}
	}
	first := !p.deleting
	p.deleting = true
	k.mu.Unlock()
	pgid := p.cmd.Process.Pid
	if secs <= 0 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return nil
	}
	if first {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
	}
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		select {
		case <-p.done:
		case <-time.After(time.Duration(secs) * time.Second):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}()
	return nil
}

// killAll ends every process still running at the end of the test.
func (k *procKubelet) killAll() {
	k.mu.Lock()
	for _, p := range k.procs {
		select {
		case <-p.done: // reaped: its group id may be another's now
		default:
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		}
	}
	k.mu.Unlock()
	k.wg.Wait()
}

// terminateAt marks the pod's container terminated with code at now.
func terminateAt(pod *corev1.Pod, code int32, reason string, now metav1.Time) {
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
