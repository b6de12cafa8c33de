package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/agent"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/backend/backendtest"
)

// kwokProcessAnnotation marks a pod whose trial a kwokKubelet runs: the
// KWOK stages of scripts/kube.sh leave its deletion to the kwokKubelet.
const kwokProcessAnnotation = "virga.dev/kwok-process"

// TestKWOKConformance runs the backend conformance suite against the real
// control plane of scripts/kube.sh, the backend under deploy/kubernetes's
// Role: its pods are admitted, scheduled onto KWOK's fake nodes of the
// on-demand and spot pools, and turn Running there, whereupon a
// kwokKubelet runs each one's trial as a local process.
func TestKWOKConformance(t *testing.T) {
	admin, ns := kwokNamespace(t)
	roleClient := asServiceAccount(t, admin, ns)
	newKWOKKubelet(t, admin, ns)
	// Virga's own accounting is of these pools; the fake nodes are larger.
	pools := karpenterPools(t, virga.Resources{CPU: 1, MemoryMB: 256}, 3, 2)
	backendtest.Run(t, backendtest.Harness{
		New: func(t *testing.T) backend.Backend {
			b, err := New(roleClient, Config{Namespace: ns, Image: "virga:kwok", Instance: "conformance", Pools: pools})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			return b
		},
		Unit: virga.Resources{CPU: 1, MemoryMB: 64},
		Caps: backendtest.Caps{Signals: true, Gang: true, MinGrace: time.Second},
		// A pod's way through the API server, the scheduler and KWOK takes
		// a second or two, more on a loaded machine.
		Wait: time.Minute,
	})
}

// kwokKubelet is the kubelet of KWOK's fake nodes for the pods of one
// namespace, with local processes: when KWOK marks a pod Running, it runs
// the pod's trial (its agent spec's argv, with the gang's RANK; or, made by
// newKWOKAgentKubelet, the pod's container itself: `virga agent` and all)
// in a process group of its own and annotates the pod kwokProcessAnnotation; when
// the process ends, it annotates the pod with its exit status (128+N for a
// signal, as a container runtime reports it), which KWOK's stage turns
// into the pod's phase. A pod's deletion sends SIGTERM to the group (to a
// container's first process alone) and SIGKILL when the grace period ends
// (to a container's every process); once the process ended, the pod gets
// its terminated status and is removed, as the kubelet does.
type kwokKubelet struct {
	t      *testing.T
	client *Client
	ns     string
	// image, if set, is the directory standing for the container image's
	// binaries (the test's build of virga): the kubelet then runs each
	// pod's container (see containerCommand), its scratch directories and
	// logs under root.
	image, root string

	mu    sync.Mutex
	procs map[types.UID]*kwokProc
	runs  []kwokRun // every process started, in order
	wg    sync.WaitGroup
}

// kwokRun is one process a kwokKubelet ran: its pod's attempt, trial and
// rank labels, its node, and when it started and ended (zero while it runs).
type kwokRun struct {
	attempt, trial, rank, node string
	argv                       []string // the command it ran
	log                        string   // its output's file (container mode)
	start, end                 time.Time
}

// kwokProc is one pod's process.
type kwokProc struct {
	name     string
	cmd      *exec.Cmd
	done     chan struct{} // closed once it ended
	ended    bool          // it ended, with code
	code     int
	deleting bool // the pod is being deleted: remove it once the process ended
	// container: the process is a pod's container (PID 1 of its own):
	// SIGTERM goes to it alone, SIGKILL to every process it started.
	container bool
	gone      bool // the pod was removed
	run       int  // its index in kwokKubelet.runs
}

func newKWOKKubelet(t *testing.T, client *Client, ns string) *kwokKubelet {
	return startKWOKKubelet(t, &kwokKubelet{t: t, client: client, ns: ns, procs: map[types.UID]*kwokProc{}})
}

// startKWOKKubelet starts k's informer on its namespace's pods.
func startKWOKKubelet(t *testing.T, k *kwokKubelet) *kwokKubelet {
	client, ns := k.client, k.ns
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.pod(obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { k.pod(obj.(*corev1.Pod)) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				k.removed(pod)
			}
		},
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	f.Start(stop)
	t.Cleanup(func() {
		close(stop)
		f.Shutdown()
		k.killAll()
	})
	return k
}

// pod acts on a pod's new state.
func (k *kwokKubelet) pod(pod *corev1.Pod) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p := k.procs[pod.UID]
	switch {
	case p == nil && pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodRunning &&
		pod.Annotations[kwokExitAnnotation] == "":
		k.startLocked(pod)
	case p != nil && pod.DeletionTimestamp != nil && !p.deleting:
		p.deleting = true
		if p.ended {
			k.wg.Add(1)
			go k.finish(pod.UID, p)
			return
		}
		secs := int64(30)
		if pod.DeletionGracePeriodSeconds != nil {
			secs = *pod.DeletionGracePeriodSeconds
		}
		k.terminate(p, time.Duration(secs)*time.Second)
	}
}

// removed is a pod's removal: a process still running is killed.
func (k *kwokKubelet) removed(pod *corev1.Pod) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if p := k.procs[pod.UID]; p != nil {
		p.gone = true
		k.terminate(p, 0)
	}
}

// terminate sends SIGTERM to p's group, and SIGKILL after grace (at once
// if it is zero).
func (k *kwokKubelet) terminate(p *kwokProc, grace time.Duration) {
	pgid := p.cmd.Process.Pid
	select {
	case <-p.done:
		return // reaped: its group id may be another's now
	default:
	}
	kill := func() {
		if p.container {
			killTree(pgid)
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	if grace <= 0 {
		kill()
		return
	}
	if p.container {
		_ = syscall.Kill(pgid, syscall.SIGTERM)
	} else {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
	}
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		select {
		case <-p.done:
		case <-time.After(grace):
			kill()
		}
	}()
}

// startLocked runs the pod's trial, or in container mode its container.
// k.mu is held.
func (k *kwokKubelet) startLocked(pod *corev1.Pod) {
	var cmd *exec.Cmd
	var logPath string
	if k.image != "" {
		var err error
		if cmd, logPath, err = k.containerCommand(pod); err != nil {
			k.t.Errorf("pod %s: %v", pod.Name, err)
			return
		}
	} else {
		env := map[string]string{}
		for _, e := range pod.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		spec, err := agent.Decode(env[agent.EnvSpec])
		if err != nil {
			k.t.Errorf("pod %s: %v", pod.Name, err)
			return
		}
		cmd = exec.Command(spec.Argv[0], spec.Argv[1:]...)
		cmd.Dir = spec.Workdir
		cmd.Env = append(os.Environ(), "RANK="+env[agent.EnvNodeRank], agent.EnvNodeRank+"="+env[agent.EnvNodeRank])
		for k, v := range spec.Env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	if c, ok := cmd.Stdout.(io.Closer); ok {
		defer c.Close() // the started process has its own copy
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The pod is marked before its process starts: from then on, KWOK
	// leaves its deletion to k.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, kwokProcessAnnotation)
	if _, err := k.client.CoreV1().Pods(k.ns).Patch(context.Background(), pod.Name, types.MergePatchType, []byte(patch),
		metav1.PatchOptions{}); err != nil {
		if !apierrors.IsNotFound(err) {
			k.t.Errorf("pod %s: %v", pod.Name, err)
		}
		return
	}
	if err := cmd.Start(); err != nil {
		k.t.Errorf("pod %s: %v", pod.Name, err)
		return
	}
	p := &kwokProc{name: pod.Name, cmd: cmd, done: make(chan struct{}), run: len(k.runs), container: k.image != ""}
	k.procs[pod.UID] = p
	k.runs = append(k.runs, kwokRun{attempt: pod.Labels[LabelAttempt], trial: pod.Labels[LabelTrial],
		rank: pod.Labels[LabelRank], node: pod.Spec.NodeName, argv: cmd.Args, log: logPath, start: time.Now()})
	k.wg.Add(1)
	go k.run(pod.UID, p)
}

// run waits for the pod's process to end and records its end in the pod.
func (k *kwokKubelet) run(uid types.UID, p *kwokProc) {
	defer k.wg.Done()
	ctx := context.Background()
	pods := k.client.CoreV1().Pods(k.ns)
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
	close(p.done)
	p.ended, p.code = true, code
	k.runs[p.run].end = time.Now()
	deleting, gone := p.deleting, p.gone
	k.mu.Unlock()
	switch {
	case gone:
	case deleting:
		k.wg.Add(1)
		go k.finish(uid, p)
	default:
		// KWOK's stage ends the container with this code. Should the pod
		// be deleted meanwhile, pod sees it and calls finish.
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"%d"}}}`, kwokExitAnnotation, code)
		if _, err := pods.Patch(ctx, p.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil &&
			!apierrors.IsNotFound(err) {
			k.t.Errorf("pod %s: %v", p.name, err)
		}
	}
}

// finish gives the deleted pod of an ended process its terminated status
// and removes it.
func (k *kwokKubelet) finish(uid types.UID, p *kwokProc) {
	defer k.wg.Done()
	ctx := context.Background()
	pods := k.client.CoreV1().Pods(k.ns)
	pod, err := pods.Get(ctx, p.name, metav1.GetOptions{})
	if err != nil || pod.UID != uid {
		return
	}
	reason := "Completed"
	pod.Status.Phase = corev1.PodSucceeded
	if p.code != 0 {
		reason, pod.Status.Phase = "Error", corev1.PodFailed
	}
	terminateAt(pod, int32(p.code), reason, metav1.Now())
	if _, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		k.t.Logf("pod %s: status: %v", p.name, err)
	}
	zero := int64(0)
	if err := pods.Delete(ctx, p.name, metav1.DeleteOptions{GracePeriodSeconds: &zero,
		Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		k.t.Errorf("pod %s: delete: %v", p.name, err)
	}
}

// ran returns the processes run so far.
func (k *kwokKubelet) ran() []kwokRun {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]kwokRun(nil), k.runs...)
}

// killAll ends every process still running at the end of the test.
func (k *kwokKubelet) killAll() {
	k.mu.Lock()
	for _, p := range k.procs {
		p.gone = true
		k.terminate(p, 0)
	}
	k.mu.Unlock()
	k.wg.Wait()
}
