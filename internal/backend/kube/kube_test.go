package kube

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/agent"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/spec"
)

func envOf(pod *corev1.Pod) map[string]string {
	m := map[string]string{}
	for _, e := range pod.Spec.Containers[0].Env {
		m[e.Name] = e.Value
	}
	return m
}

func TestPodSpec(t *testing.T) {
	c := newCluster(t)
	b := c.backend(Config{ServiceAccount: "trainer", ImagePullSecrets: []string{"regcred"}})
	s := startSpec(1)
	s.Timeout = 90 * time.Minute
	if err := b.Start(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	pod := c.get("virga-1-0")
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %q", pod.Spec.RestartPolicy)
	}
	ctr := pod.Spec.Containers[0]
	if ctr.Image != "ghcr.io/virga-ml/virga:test" || len(ctr.Command) != 2 || ctr.Command[0] != "virga" || ctr.Command[1] != "agent" {
		t.Errorf("image %q command %q", ctr.Image, ctr.Command)
	}
	env := envOf(pod)
	as, err := agent.Decode(env[agent.EnvSpec])
	if err != nil {
		t.Fatal(err)
	}
	if as.AttemptID != 1 || as.TrialID != 11 || as.Server != "http://virga.virga:7070" || as.Token != "tok" || as.Nodes != 1 || as.Argv[0] != "python" {
		t.Errorf("agent spec %+v", as)
	}
	if env[agent.EnvNodeRank] != "0" || env[agent.EnvMasterAddr] != "127.0.0.1" {
		t.Errorf("rank %q master %q", env[agent.EnvNodeRank], env[agent.EnvMasterAddr])
	}
	for _, rl := range []corev1.ResourceList{ctr.Resources.Requests, ctr.Resources.Limits} {
		if q := rl[corev1.ResourceCPU]; q.Cmp(resource.MustParse("2")) != 0 {
			t.Errorf("cpu %s", q.String())
		}
		if q := rl[corev1.ResourceMemory]; q.Cmp(resource.MustParse("4Gi")) != 0 {
			t.Errorf("memory %s", q.String())
		}
		if q := rl[GPUResource]; q.Cmp(resource.MustParse("1")) != 0 {
			t.Errorf("gpu %s", q.String())
		}
	}
	want := map[string]string{LabelAttempt: "1", LabelTrial: "11", LabelExperiment: "1", LabelRank: "0",
		LabelManagedBy: "virga", LabelInstance: "virga"}
	for k, v := range want {
		if pod.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, pod.Labels[k], v)
		}
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || *g != 30 {
		t.Errorf("terminationGracePeriodSeconds %v", g)
	}
	if d := pod.Spec.ActiveDeadlineSeconds; d == nil || *d != 5400 {
		t.Errorf("activeDeadlineSeconds %v", d)
	}
	if pod.Spec.ServiceAccountName != "trainer" || pod.Spec.ImagePullSecrets[0].Name != "regcred" {
		t.Errorf("service account %q pull secrets %v", pod.Spec.ServiceAccountName, pod.Spec.ImagePullSecrets)
	}
	if pod.Spec.Hostname != "" || pod.Spec.Subdomain != "" {
		t.Errorf("a single-node pod has hostname %q subdomain %q", pod.Spec.Hostname, pod.Spec.Subdomain)
	}
	if svcs, _ := c.cs.CoreV1().Services(c.ns).List(context.Background(), metav1.ListOptions{}); len(svcs.Items) != 0 {
		t.Errorf("a single-node attempt has %d services", len(svcs.Items))
	}
	if err := b.Start(context.Background(), s); !errors.Is(err, virga.ErrConflict) {
		t.Errorf("starting attempt 1 twice: %v", err)
	}
}

func TestSucceeded(t *testing.T) {
	c := newCluster(t)
	b := c.backend(Config{})
	if err := b.Start(context.Background(), startSpec(1)); err != nil {
		t.Fatal(err)
	}
	if f := b.Free(); f.GPU != 7 || f.CPU != 62 {
		t.Errorf("free %+v after a start", f)
	}
	c.schedule("virga-1-0", "gpu-node-1")
	none(t, b) // scheduled is not running
	c.run("virga-1-0")
	ev := next(t, b)
	if ev.Kind != backend.Started || ev.AttemptID != 1 || ev.Message != "virga-1-0 on gpu-node-1" {
		t.Fatalf("got %+v", ev)
	}
	c.exit("virga-1-0", 0)
	ev = next(t, b)
	if ev.Kind != backend.Exited || ev.ExitCode == nil || *ev.ExitCode != 0 || ev.Preempted || ev.Lost {
		t.Fatalf("got %+v", ev)
	}
	if f := b.Free(); f != b.Capacity() {
		t.Errorf("free %+v after the exit, capacity %+v", f, b.Capacity())
	}
	none(t, b)
}

func TestFailedWithExitCode(t *testing.T) {
	c := newCluster(t)
	b := c.backend(Config{})
	if err := b.Start(context.Background(), startSpec(1)); err != nil {
		t.Fatal(err)
	}
	c.run("virga-1-0")
	next(t, b)
	c.exit("virga-1-0", 3)
	ev := next(t, b)
	if ev.Kind != backend.Exited || ev.ExitCode == nil || *ev.ExitCode != 3 || ev.Preempted || ev.Lost {
		t.Fatalf("got %+v", ev)
	}
}

func TestOOMKilled(t *testing.T) {
	c := newCluster(t)
	b := c.backend(Config{})
	if err := b.Start(context.Background(), startSpec(1)); err != nil {
		t.Fatal(err)
	}
	c.run("virga-1-0")
	next(t, b)
	pod := c.get("virga-1-0")
	terminate(pod, 137, "OOMKilled")
	pod.Status.Phase = corev1.PodFailed
	c.update(pod)
	ev := next(t, b)
	if ev.Kind != backend.Exited || ev.Signal != "killed" || ev.ExitCode != nil || ev.Preempted || ev.Message != "pod virga-1-0: container OOMKilled" {
		t.Fatalf("got %+v", ev)
	}
}

// A pod that runs and ends between two watch events still gets Started
// before Exited.
func TestQuickPodStartsThenExits(t *testing.T) {
	c := newCluster(t)
	b := c.backend(Config{})
	if err := b.Start(context.Background(), startSpec(1)); err != nil {
		t.Fatal(err)
	}
	pod := c.get("virga-1-0")
	now := metav1.Now()
	pod.Status.Phase = corev1.PodSucceeded
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, StartedAt: now, FinishedAt: now}}}}
	c.update(pod)
	if ev := next(t, b); ev.Kind != backend.Started {
		t.Fatalf("got %+v", ev)
	}
	if ev := next(t, b); ev.Kind != backend.Exited || *ev.ExitCode != 0 {
		t.Fatalf("got %+v", ev)
	}
}

func TestPreemptions(t *testing.T) {
	cases := []struct {
		name   string
		play   func(c *cluster, pod string)
		signal string
	}{
		{"evicted", func(c *cluster, pod string) {
			c.disrupt(pod, "EvictionByEvictionAPI")
			c.fail(pod, "Evicted", 143)
		}, "terminated"},
		{"preempted by the scheduler", func(c *cluster, pod string) {
			c.disrupt(pod, "PreemptionByScheduler")
			c.remove(pod) // deleted with its last status (running)
		}, "killed"},
		{"taint manager", func(c *cluster, pod string) {
			c.disrupt(pod, "DeletionByTaintManager")
			c.finishDeleteOf(pod, 137)
		}, "killed"},
		{"kubelet node shutdown", func(c *cluster, pod string) {
			c.disrupt(pod, "TerminationByKubelet")
			c.fail(pod, "Terminated", 143)
		}, "terminated"},
		{"node lost", func(c *cluster, pod string) {
			p := c.get(pod)
			p.Status.Phase = corev1.PodFailed
			p.Status.Reason = "NodeLost"
			c.update(p)
		}, "killed"},
		{"node shutdown", func(c *cluster, pod string) { c.fail(pod, "NodeShutdown", 143) }, "terminated"},
		{"deleted by someone else", func(c *cluster, pod string) { c.remove(pod) }, "killed"},
		{"node gone, pod garbage collected", func(c *cluster, pod string) {
			c.disrupt(pod, "DeletionByPodGC")
			c.remove(pod)
		}, "killed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			b := c.backend(Config{})
			if err := b.Start(context.Background(), startSpec(1)); err != nil {
				t.Fatal(err)
			}
			c.run("virga-1-0")
			next(t, b)
			tc.play(c, "virga-1-0")
			ev := next(t, b)
			if ev.Kind != backend.Exited || !ev.Preempted || ev.Lost || ev.Signal != tc.signal {
				t.Fatalf("got %+v", ev)
			}
			if !hasPrefix(ev.Message, "preempted: pod virga-1-0 ") {
				t.Errorf("message %q", ev.Message)
			}
			none(t, b)
		})
	}
}

// finishDeleteOf marks the pod terminating and then ends it, as a graceful
// delete by another controller does.
func (c *cluster) finishDeleteOf(name string, code int32) {
	pod := c.get(name)
	now := metav1.Now()
	pod.DeletionTimestamp = &now
	c.update(pod)
	c.finishDelete(name, code)
}

func TestDeletedBeforeItRanIsLost(t *testing.T) {
	c := newCluster(t)
	b := c.backend(Config{})
	if err := b.Start(context.Background(), startSpec(1)); err != nil {
		t.Fatal(err)
	}
	c.schedule("virga-1-0", "n1")
	c.remove("virga-1-0")
	ev := next(t, b)
	if ev.Kind != backend.Exited || !ev.Lost || ev.Preempted {
		t.Fatalf("got %+v", ev)
	}
}

func TestEvictedBeforeItRanIsPreempted(t *testing.T) {
	c := newCluster(t)
	b := c.backend(Config{})
	if err := b.Start(context.Background(), startSpec(1)); err != nil {
		t.Fatal(err)
	}
	c.schedule("virga-1-0", "spot-1")
	c.disrupt("virga-1-0", "EvictionByEvictionAPI")
	c.remove("virga-1-0")
	ev := next(t, b)
	if ev.Kind != backend.Exited || !ev.Preempted || ev.Lost {
		t.Fatalf("got %+v", ev)
	}
}

func TestStopPassesGrace(t *testing.T) {
	c := newCluster(t)
	c.graceful = true
	b := c.backend(Config{})
	if err := b.Start(context.Background(), startSpec(1)); err != nil {
		t.Fatal(err)
	}
	c.run("virga-1-0")
	next(t, b)
	if err := b.Stop(1, 45*time.Second); err != nil {
		t.Fatal(err)
	}
	d := c.deleteOptions()
	if len(d) != 1 || d[0].GracePeriodSeconds == nil || *d[0].GracePeriodSeconds != 45 {
		t.Fatalf("deletes %+v", d)
	}
	waitFor(t, "the pod to be terminating", func() bool { return c.get("virga-1-0").DeletionTimestamp != nil })
	none(t, b) // terminating is not over
	c.finishDelete("virga-1-0", 143)
	ev := next(t, b)
	if ev.Kind != backend.Exited || ev.Signal != "terminated" || ev.Preempted || ev.Lost {
		t.Fatalf("got %+v", ev)
	}
	if err := b.Stop(1, time.Second); err != nil {
		t.Errorf("stopping an ended attempt: %v", err)
	}
	if err := b.Stop(99, time.Second); err != nil {
		t.Errorf("stopping an unknown attempt: %v", err)
	}
	none(t, b)
}

func TestStopZeroGraceSendsOneSecond(t *testing.T) {
	c := newCluster(t)
	b := c.backend(Config{})
	if err := b.Start(context.Background(), startSpec(1)); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(1, 0); err != nil {
		t.Fatal(err)
	}
	if d := c.deleteOptions(); len(d) != 1 || *d[0].GracePeriodSeconds != 1 {
		t.Fatalf("deletes %+v", d)
	}
	ev := next(t, b) // deleted while pending
	if ev.Kind != backend.Exited || ev.Lost || ev.Preempted || ev.Signal != "terminated" {
		t.Fatalf("got %+v", ev)
	}
}

func TestGang(t *testing.T) {
	c := newCluster(t)
	c.graceful = true
	b := c.backend(Config{Namespace: "ml"})
	c.ns = "ml"
	s := startSpec(7)
	s.Nodes, s.ProcessesPerNode = 2, 4
	s.Resources = virga.Resources{CPU: 16, MemoryMB: 64 << 10, GPU: 8}
	if err := b.Start(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	svc, err := c.cs.CoreV1().Services("ml").Get(context.Background(), "virga-7", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || svc.Spec.Selector[LabelAttempt] != "7" || !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("service %+v", svc.Spec)
	}
	if len(svc.OwnerReferences) != 1 || svc.OwnerReferences[0].Name != "virga-7-0" || svc.OwnerReferences[0].UID == "" {
		t.Errorf("service owners %+v", svc.OwnerReferences)
	}
	for rank, name := range []string{"virga-7-0", "virga-7-1"} {
		pod := c.get(name)
		env := envOf(pod)
		if pod.Spec.Hostname != name || pod.Spec.Subdomain != "virga-7" {
			t.Errorf("%s: hostname %q subdomain %q", name, pod.Spec.Hostname, pod.Spec.Subdomain)
		}
		if env[agent.EnvMasterAddr] != "virga-7-0.virga-7.ml.svc" || env[agent.EnvNodeRank] != string(rune('0'+rank)) {
			t.Errorf("%s: env %v", name, env)
		}
		gpu := pod.Spec.Containers[0].Resources.Limits[GPUResource]
		if gpu.Value() != 4 {
			t.Errorf("%s: %d GPUs per node", name, gpu.Value())
		}
	}
	c.run("virga-7-0")
	none(t, b) // one of two
	c.run("virga-7-1")
	if ev := next(t, b); ev.Kind != backend.Started {
		t.Fatalf("got %+v", ev)
	}
	// Rank 1's node is lost: its pod is garbage collected; rank 0 is
	// deleted by the backend with the attempt's grace.
	c.disrupt("virga-7-1", "DeletionByPodGC")
	c.remove("virga-7-1")
	ev := next(t, b)
	if ev.Kind != backend.Exited || !ev.Preempted || ev.Signal != "killed" {
		t.Fatalf("got %+v", ev)
	}
	waitFor(t, "rank 0 to be deleted", func() bool { return c.get("virga-7-0").DeletionTimestamp != nil })
	if d := c.deleteOptions(); len(d) != 1 || *d[0].GracePeriodSeconds != 30 {
		t.Errorf("deletes %+v", d)
	}
	c.finishDelete("virga-7-0", 143)
	none(t, b)
	if f := b.Free(); f != b.Capacity() {
		t.Errorf("free %+v", f)
	}
}

func TestGangOnePodFails(t *testing.T) {
	c := newCluster(t)
	b := c.backend(Config{})
	s := startSpec(3)
	s.Nodes = 2
	if err := b.Start(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	c.run("virga-3-0")
	c.run("virga-3-1")
	next(t, b)
	c.exit("virga-3-0", 1)
	ev := next(t, b)
	if ev.Kind != backend.Exited || ev.Preempted || ev.ExitCode == nil || *ev.ExitCode != 1 {
		t.Fatalf("got %+v", ev)
	}
	waitFor(t, "rank 1 to be deleted", func() bool { return !c.exists("virga-3-1") })
	none(t, b)
}

func TestGangSucceeds(t *testing.T) {
	c := newCluster(t)
	b := c.backend(Config{})
	s := startSpec(3)
	s.Nodes = 2
	if err := b.Start(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	c.run("virga-3-0")
	c.run("virga-3-1")
	next(t, b)
	c.exit("virga-3-1", 0)
	none(t, b) // rank 0 still runs
	c.exit("virga-3-0", 0)
	if ev := next(t, b); ev.Kind != backend.Exited || *ev.ExitCode != 0 {
		t.Fatalf("got %+v", ev)
	}
}

func TestGangCreateFailsDeletesTheRest(t *testing.T) {
	c := newCluster(t)
	c.failCreate = 2
	b := c.backend(Config{})
	s := startSpec(4)
	s.Nodes = 2
	err := b.Start(context.Background(), s)
	if err == nil {
		t.Fatal("start succeeded")
	}
	if c.exists("virga-4-0") {
		t.Error("rank 0 was left behind")
	}
	if f := b.Free(); f != b.Capacity() {
		t.Errorf("free %+v", f)
	}
	none(t, b)
}

func TestAdoptAfterRestart(t *testing.T) {
	c := newCluster(t)
	b1 := c.backend(Config{FinishedTTL: -1})
	for id := int64(1); id <= 3; id++ {
		if err := b1.Start(context.Background(), startSpec(id)); err != nil {
			t.Fatal(err)
		}
	}
	c.run("virga-1-0")
	c.run("virga-2-0")
	next(t, b1)
	next(t, b1)
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}
	// While no server watches: 2 succeeds, 3 is deleted by someone.
	c.exit("virga-2-0", 0)
	c.remove("virga-3-0")

	b2 := c.backend(Config{FinishedTTL: -1})
	ctx := context.Background()
	for id := int64(1); id <= 4; id++ {
		if err := b2.Adopt(ctx, &virga.Attempt{ID: id}, virga.Resources{CPU: 1}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[int64][]backend.Event{}
	for range 5 { // 1: Started; 2: Started, Exited; 3, 4: Exited Lost
		ev := next(t, b2)
		got[ev.AttemptID] = append(got[ev.AttemptID], ev)
	}
	if e := got[1]; len(e) != 1 || e[0].Kind != backend.Started {
		t.Errorf("attempt 1: %+v", e)
	}
	if e := got[2]; len(e) != 2 || e[1].Kind != backend.Exited || *e[1].ExitCode != 0 {
		t.Errorf("attempt 2: %+v", e)
	}
	for _, id := range []int64{3, 4} {
		if e := got[id]; len(e) != 1 || e[0].Kind != backend.Exited || !e[0].Lost {
			t.Errorf("attempt %d: %+v", id, e)
		}
	}
	// Attempt 1 holds its recorded resources (2 CPUs, 1 GPU), not the
	// argument.
	if f := b2.Free(); f.GPU != 7 || f.CPU != 62 {
		t.Errorf("free %+v", f)
	}
	if err := b2.Adopt(ctx, &virga.Attempt{ID: 1}, virga.Resources{}); !errors.Is(err, virga.ErrConflict) {
		t.Errorf("adopting twice: %v", err)
	}
	if err := b2.Start(ctx, startSpec(1)); !errors.Is(err, virga.ErrConflict) {
		t.Errorf("starting an adopted attempt: %v", err)
	}
	c.exit("virga-1-0", 0)
	if ev := next(t, b2); ev.Kind != backend.Exited || ev.AttemptID != 1 || *ev.ExitCode != 0 {
		t.Fatalf("got %+v", ev)
	}
	none(t, b2)
	if f := b2.Free(); f != b2.Capacity() {
		t.Errorf("free %+v", f)
	}
}

func TestAdoptStoppingAttempt(t *testing.T) {
	c := newCluster(t)
	c.graceful = true
	b1 := c.backend(Config{})
	if err := b1.Start(context.Background(), startSpec(1)); err != nil {
		t.Fatal(err)
	}
	c.run("virga-1-0")
	next(t, b1)
	if err := b1.Stop(1, time.Minute); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod to be terminating", func() bool { return c.get("virga-1-0").DeletionTimestamp != nil })
	_ = b1.Close()

	b2 := c.backend(Config{})
	if err := b2.Adopt(context.Background(), &virga.Attempt{ID: 1}, virga.Resources{}); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, b2); ev.Kind != backend.Started {
		t.Fatalf("got %+v", ev)
	}
	c.finishDelete("virga-1-0", 143)
	if ev := next(t, b2); ev.Kind != backend.Exited || ev.Preempted || ev.Signal != "terminated" {
		t.Fatalf("got %+v", ev)
	}
}

func TestAdoptGangMissingANode(t *testing.T) {
	c := newCluster(t)
	b1 := c.backend(Config{})
	s := startSpec(5)
	s.Nodes = 2
	if err := b1.Start(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	c.run("virga-5-0")
	c.run("virga-5-1")
	next(t, b1)
	_ = b1.Close()
	c.remove("virga-5-1")

	b2 := c.backend(Config{})
	if err := b2.Adopt(context.Background(), &virga.Attempt{ID: 5}, virga.Resources{}); err != nil {
		t.Fatal(err)
	}
	ev := next(t, b2)
	if ev.Kind != backend.Exited || !ev.Lost {
		t.Fatalf("got %+v", ev)
	}
	waitFor(t, "rank 0 to be deleted", func() bool { return !c.exists("virga-5-0") })
}

func TestFinishedPodsAreDeletedAfterTTL(t *testing.T) {
	c := newCluster(t)
	b := c.backend(Config{FinishedTTL: 20 * time.Millisecond})
	if err := b.Start(context.Background(), startSpec(1)); err != nil {
		t.Fatal(err)
	}
	c.run("virga-1-0")
	next(t, b)
	c.exit("virga-1-0", 0)
	next(t, b)
	waitFor(t, "the finished pod to be deleted", func() bool { return !c.exists("virga-1-0") })
}

func TestPools(t *testing.T) {
	c := newCluster(t)
	spot, err := SpotSelector("gke")
	if err != nil {
		t.Fatal(err)
	}
	onDemand, _ := OnDemandSelector("gke")
	pOD := Pool{Name: "on-demand", Node: virga.Resources{CPU: 8, MemoryMB: 32 << 10, GPU: 1}, Nodes: 2}
	onDemand.Apply(&pOD)
	pSpot := Pool{Name: "spot", NodeSelector: map[string]string{"cloud.google.com/gke-accelerator": "nvidia-l4"},
		Node: virga.Resources{CPU: 8, MemoryMB: 32 << 10, GPU: 1}, Nodes: 4, Spot: true, Warning: 30 * time.Second}
	spot.Apply(&pSpot)
	b := c.backend(Config{Pools: []Pool{pOD, pSpot}})
	if got, want := b.Capacity(), (virga.Resources{CPU: 48, MemoryMB: 192 << 10, GPU: 6}); got != want {
		t.Errorf("capacity %+v, want %+v", got, want)
	}
	s := startSpec(1)
	s.Pool = "spot"
	if err := b.Start(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	pod := c.get("virga-1-0")
	if pod.Spec.NodeSelector["cloud.google.com/gke-spot"] != "true" || pod.Spec.NodeSelector["cloud.google.com/gke-accelerator"] != "nvidia-l4" {
		t.Errorf("node selector %v", pod.Spec.NodeSelector)
	}
	if len(pod.Spec.Tolerations) != 1 || pod.Spec.Tolerations[0].Key != "cloud.google.com/gke-spot" {
		t.Errorf("tolerations %v", pod.Spec.Tolerations)
	}
	if pod.Annotations[AnnotationPool] != "spot" {
		t.Errorf("annotations %v", pod.Annotations)
	}
	ps := b.Pools()
	if len(ps) != 2 || ps[0].Name != "on-demand" || ps[0].Preemptible || !ps[1].Preemptible || !ps[1].Up ||
		ps[1].Warning != 30*time.Second || ps[1].Free.GPU != 3 || ps[0].Free.GPU != 2 {
		t.Errorf("pools %+v", ps)
	}
	s = startSpec(2)
	if err := b.Start(context.Background(), s); err != nil { // default: on-demand
		t.Fatal(err)
	}
	pod = c.get("virga-2-0")
	if a := pod.Spec.Affinity; a == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Operator != corev1.NodeSelectorOpDoesNotExist {
		t.Errorf("affinity %+v", a)
	}
	s = startSpec(3)
	s.Resources.GPU = 2
	s.Nodes = 1
	if err := b.Start(context.Background(), s); !errors.Is(err, virga.ErrNoCapacity) {
		t.Errorf("2 GPUs on one 1-GPU node: %v", err)
	}
	s = startSpec(4)
	s.Resources = virga.Resources{CPU: 8, MemoryMB: 8192, GPU: 2}
	s.Nodes = 2
	if err := b.Start(context.Background(), s); !errors.Is(err, virga.ErrNoCapacity) {
		t.Errorf("2 GPUs in a pool with 1 left: %v", err)
	}
	s.Pool = "spot"
	if err := b.Start(context.Background(), s); err != nil {
		t.Errorf("a gang of 2 on spot: %v", err)
	}
	if err := b.Start(context.Background(), &backend.StartSpec{AttemptID: 9, TrialID: 9, Argv: []string{"x"}, Pool: "nope"}); err == nil {
		t.Error("an unknown pool was accepted")
	}
	if b.Pools()[1].Free.GPU != 1 {
		t.Errorf("pools %+v", b.Pools())
	}
}

func TestSpotSelectors(t *testing.T) {
	cases := []struct {
		provider, key, value, tolerationKey string
	}{
		{"karpenter", "karpenter.sh/capacity-type", "spot", ""},
		{"GKE", "cloud.google.com/gke-spot", "true", "cloud.google.com/gke-spot"},
		{"eks", "eks.amazonaws.com/capacityType", "SPOT", ""},
		{"aks", "kubernetes.azure.com/scalesetpriority", "spot", "kubernetes.azure.com/scalesetpriority"},
	}
	for _, tc := range cases {
		p, err := SpotSelector(tc.provider)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.NodeSelector) != 1 || p.NodeSelector[tc.key] != tc.value {
			t.Errorf("%s: selector %v", tc.provider, p.NodeSelector)
		}
		if tc.tolerationKey == "" {
			if len(p.Tolerations) != 0 {
				t.Errorf("%s: tolerations %v", tc.provider, p.Tolerations)
			}
		} else if len(p.Tolerations) != 1 || p.Tolerations[0].Key != tc.tolerationKey || p.Tolerations[0].Value != tc.value ||
			p.Tolerations[0].Effect != corev1.TaintEffectNoSchedule || p.Tolerations[0].Operator != corev1.TolerationOpEqual {
			t.Errorf("%s: tolerations %v", tc.provider, p.Tolerations)
		}
		od, err := OnDemandSelector(tc.provider)
		if err != nil {
			t.Fatal(err)
		}
		if od.NodeSelector[tc.key] == tc.value || (len(od.NodeSelector) == 0 && od.Affinity == nil) {
			t.Errorf("%s: on-demand %+v", tc.provider, od)
		}
	}
	if _, err := SpotSelector("openstack"); err == nil {
		t.Error("unknown provider accepted")
	}
	if p, _ := OnDemandSelector("karpenter"); p.NodeSelector["karpenter.sh/capacity-type"] != "on-demand" {
		t.Errorf("karpenter on-demand %v", p.NodeSelector)
	}
	if p, _ := OnDemandSelector("eks"); p.NodeSelector["eks.amazonaws.com/capacityType"] != "ON_DEMAND" {
		t.Errorf("eks on-demand %v", p.NodeSelector)
	}
}

func TestConfigErrors(t *testing.T) {
	c := newCluster(t)
	for _, cfg := range []Config{
		{Image: "i", Capacity: virga.Resources{CPU: 1}},     // no namespace
		{Namespace: "n", Capacity: virga.Resources{CPU: 1}}, // no image
		{Namespace: "n", Image: "i"},                        // no capacity
		{Namespace: "n", Image: "i", Instance: "Bad_Name", Capacity: virga.Resources{CPU: 1}},
		{Namespace: "n", Image: "i", Pools: []Pool{{Name: "a", Node: virga.Resources{CPU: 1, MemoryMB: 1}}}}, // no nodes
		{Namespace: "n", Image: "i", Pools: []Pool{{Name: "a", Nodes: 1, Node: virga.Resources{CPU: 1, MemoryMB: 1}},
			{Name: "a", Nodes: 1, Node: virga.Resources{CPU: 1, MemoryMB: 1}}}},
	} {
		if _, err := New(c.cs, cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}

func TestEventsClosedByClose(t *testing.T) {
	c := newCluster(t)
	b := c.backend(Config{})
	_ = b.Close()
	if _, ok := <-b.Events(); ok {
		t.Error("events still open")
	}
	if err := b.Start(context.Background(), startSpec(1)); err == nil {
		t.Error("start after close")
	}
}

func TestPoolFromSpec(t *testing.T) {
	sp := &spec.Pool{Name: "a100-spot", Node: spec.NodeShape{CPU: 12, MemoryMB: 85 << 10, GPU: 1}, Nodes: spec.NodeCount{Max: 8},
		Market: spec.Spot, Warning: spec.Duration(30 * time.Second), Kubernetes: &spec.KubernetesPool{
			NodeSelector: map[string]string{"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"},
			Tolerations:  []spec.Toleration{{Key: "nvidia.com/gpu", Operator: "Exists", Effect: "NoSchedule"}},
			Provider:     "gke"}}
	p, err := PoolFromSpec(sp)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "a100-spot" || p.Nodes != 8 || !p.Spot || p.Warning != 30*time.Second || p.Node.GPU != 1 ||
		p.NodeSelector["cloud.google.com/gke-spot"] != "true" || p.NodeSelector["cloud.google.com/gke-accelerator"] != "nvidia-tesla-a100" ||
		len(p.Tolerations) != 2 || p.Tolerations[0].Operator != corev1.TolerationOpExists {
		t.Errorf("pool %+v", p)
	}
	sp = &spec.Pool{Name: "od", Node: spec.NodeShape{CPU: 4}, Nodes: spec.NodeCount{Min: 2, Max: 2}, Market: spec.OnDemand,
		Kubernetes: &spec.KubernetesPool{Provider: "karpenter"}}
	p, err = PoolFromSpec(sp)
	if err != nil {
		t.Fatal(err)
	}
	if p.Spot || p.NodeSelector["karpenter.sh/capacity-type"] != "on-demand" || p.Nodes != 2 {
		t.Errorf("pool %+v", p)
	}
	// A node without memory does not count memory.
	c := newCluster(t)
	b := c.backend(Config{Pools: []Pool{p}})
	if err := b.Start(context.Background(), spec1()); err != nil {
		t.Fatal(err)
	}
	if _, err := PoolFromSpec(&spec.Pool{Name: "x", Node: spec.NodeShape{CPU: 1}, Kubernetes: &spec.KubernetesPool{Provider: "nimbus"}}); err == nil {
		t.Error("unknown provider accepted")
	}
}

func spec1() *backend.StartSpec {
	s := startSpec(1)
	s.Resources.GPU = 0
	return s
}

// A Stop that comes while Start is still creating a gang's pods deletes them
// once they exist.
func TestStopDuringStart(t *testing.T) {
	c := newCluster(t)
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	c.cs.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		entered <- struct{}{}
		<-release
		return false, nil, nil
	})
	b := c.backend(Config{})
	s := startSpec(1)
	s.Nodes = 2
	done := make(chan error, 1)
	go func() { done <- b.Start(context.Background(), s) }()
	<-entered
	if err := b.Stop(1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ev := next(t, b)
	if ev.Kind != backend.Exited || ev.Preempted || ev.Lost || ev.Signal != "terminated" {
		t.Fatalf("got %+v", ev)
	}
	if c.exists("virga-1-0") || c.exists("virga-1-1") {
		t.Error("pods left after a stop during the start")
	}
	if d := c.deleteOptions(); len(d) != 2 || *d[0].GracePeriodSeconds != 10 {
		t.Errorf("deletes %+v", d)
	}
	none(t, b)
}
