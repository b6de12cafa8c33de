package kube

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/agent"
	"github.com/virga-ml/virga/internal/backend"
)

// Start reserves the attempt's resources in its pool and creates its pods
// (and, for a gang, its headless Service); it returns once they are created,
// and Started follows when every pod runs. It creates all of a gang's pods or
// none: if one create fails, the pods already created are deleted and Start
// returns the error. It returns an error wrapping virga.ErrNoCapacity if the
// attempt does not fit the pool's free capacity, a node of the pool cannot
// hold one of its nodes, or a ResourceQuota refuses a pod, and one wrapping
// virga.ErrConflict if the attempt ran here or its pods exist.
func (b *Backend) Start(ctx context.Context, s *backend.StartSpec) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("starting attempt: %w", err)
	}
	if s.AttemptID <= 0 || s.TrialID <= 0 {
		return errors.New("kubernetes backend: attempt and trial IDs must be positive")
	}
	if len(s.Argv) == 0 {
		return errors.New("kubernetes backend: empty command")
	}
	nodes := max(s.Nodes, 1)
	p, err := b.poolNamed(s.Pool)
	if err != nil {
		return err
	}
	per := s.PerNode()
	if b.named && !per.Fits(p.Node) {
		return fmt.Errorf("kubernetes backend: %w: one node of the attempt (cpu %g, memory %d MiB, gpu %d) is larger than a node of pool %q",
			virga.ErrNoCapacity, per.CPU, per.MemoryMB, per.GPU, p.Name)
	}
	a := &attempt{id: s.AttemptID, name: b.baseName(s.AttemptID), nodes: nodes, pool: p, res: s.Resources,
		grace: s.StopGrace, creating: true, cause: -1, pods: make([]*podState, nodes)}
	for i := range a.pods {
		a.pods[i] = &podState{}
	}

	b.mu.Lock()
	switch {
	case b.closed:
		b.mu.Unlock()
		return errors.New("kubernetes backend: closed")
	case b.attempts[s.AttemptID] != nil || b.ended[s.AttemptID]:
		b.mu.Unlock()
		return fmt.Errorf("kubernetes backend: %w: attempt %d was started here already", virga.ErrConflict, s.AttemptID)
	case !p.acct.Fits(s.Resources):
		b.mu.Unlock()
		return fmt.Errorf("kubernetes backend: %w in pool %q", virga.ErrNoCapacity, p.Name)
	}
	if !b.swept {
		b.swept = true
		go b.sweep() // the first start comes after recovery's adoptions
	}
	p.acct.Reserve(s.Resources)
	b.attempts[s.AttemptID] = a
	b.mu.Unlock()

	as := agent.FromStart(s)
	if b.cfg.Workdir != "" {
		as.Workdir = b.cfg.Workdir
	}
	env := as.Encode()
	var created []string
	var pod0 *corev1.Pod
	fail := func(err error) error {
		for _, name := range created {
			_ = b.deletePod(name, 0)
		}
		b.mu.Lock()
		delete(b.attempts, s.AttemptID)
		p.acct.Release(s.Resources)
		b.mu.Unlock()
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("kubernetes backend: %w: %v", virga.ErrConflict, err)
		}
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota") {
			return fmt.Errorf("kubernetes backend: %w: %v", virga.ErrNoCapacity, err)
		}
		return fmt.Errorf("kubernetes backend: starting attempt %d: %w", s.AttemptID, err)
	}
	for rank := range nodes {
		pod := b.pod(s, a, p, per, rank, env)
		cctx, cancel := context.WithTimeout(ctx, b.cfg.APITimeout)
		b.calls.create.Add(1)
		got, err := b.client.CoreV1().Pods(b.cfg.Namespace).Create(cctx, pod, metav1.CreateOptions{})
		cancel()
		if err != nil {
			return fail(err)
		}
		created = append(created, pod.Name)
		if rank == 0 {
			pod0 = got
		}
	}
	if nodes > 1 {
		svc := b.service(s, a, pod0)
		cctx, cancel := context.WithTimeout(ctx, b.cfg.APITimeout)
		b.calls.create.Add(1)
		_, err := b.client.CoreV1().Services(b.cfg.Namespace).Create(cctx, svc, metav1.CreateOptions{})
		cancel()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fail(err)
		}
	}

	b.mu.Lock()
	a.creating = false
	var dels []string
	if a.stopping {
		// Stop came while the pods were being created: delete them all.
		for i, ps := range a.pods {
			ps.deleting = true
			dels = append(dels, podName(a.name, i))
		}
	}
	b.watchStart(a, b.cfg.Clock.Now())
	dels = append(dels, b.evaluate(a)...)
	grace := a.grace
	if a.stopping {
		grace = a.stopGrace
	}
	b.mu.Unlock()
	_ = b.deleteAll(dels, grace)
	return nil
}

// pod builds rank's pod of an attempt.
func (b *Backend) pod(s *backend.StartSpec, a *attempt, p *pool, per virga.Resources, rank int, spec string) *corev1.Pod {
	master := "127.0.0.1"
	if a.nodes > 1 {
		master = podName(a.name, 0) + "." + a.name + "." + b.cfg.Namespace + ".svc"
	}
	env := []corev1.EnvVar{
		{Name: agent.EnvSpec, Value: spec},
		{Name: agent.EnvNodeRank, Value: strconv.Itoa(rank)},
		{Name: agent.EnvMasterAddr, Value: master},
	}
	env = append(env, b.cfg.Env...)
	rl := corev1.ResourceList{}
	if per.CPU > 0 {
		rl[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(math.Ceil(per.CPU*1000)), resource.DecimalSI)
	}
	if per.MemoryMB > 0 {
		rl[corev1.ResourceMemory] = *resource.NewQuantity(per.MemoryMB<<20, resource.BinarySI)
	}
	if per.GPU > 0 {
		rl[b.cfg.GPUResource] = *resource.NewQuantity(int64(per.GPU), resource.DecimalSI)
	}
	lbl := map[string]string{}
	for k, v := range b.cfg.Labels {
		lbl[k] = v
	}
	for k, v := range b.labels(s) {
		lbl[k] = v
	}
	lbl[LabelRank] = strconv.Itoa(rank)
	ann := map[string]string{}
	for k, v := range b.cfg.Annotations {
		ann[k] = v
	}
	ann[AnnotationNodes] = strconv.Itoa(a.nodes)
	ann[AnnotationResources] = formatResources(s.Resources)
	ann[AnnotationStopGrace] = s.StopGrace.String()
	if p.Name != "" {
		ann[AnnotationPool] = p.Name
	}
	grace := int64(math.Ceil(s.StopGrace.Seconds()))
	if s.StopGrace <= 0 {
		grace = 30
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName(a.name, rank), Namespace: b.cfg.Namespace, Labels: lbl, Annotations: ann},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			ServiceAccountName:            b.cfg.ServiceAccount,
			AutomountServiceAccountToken:  ptr(false),
			EnableServiceLinks:            ptr(false),
			NodeSelector:                  p.NodeSelector,
			Tolerations:                   p.Tolerations,
			Affinity:                      p.Affinity,
			Containers: []corev1.Container{{
				Name:            ContainerName,
				Image:           b.cfg.Image,
				ImagePullPolicy: b.cfg.ImagePullPolicy,
				Command:         b.cfg.Command,
				WorkingDir:      b.cfg.Workdir,
				Env:             env,
				Resources:       corev1.ResourceRequirements{Requests: rl, Limits: rl.DeepCopy()},
			}},
		},
	}
	if d := b.cfg.NodeLostAfter; d > 0 {
		secs := int64(math.Ceil(d.Seconds()))
		for _, key := range []string{"node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"} {
			pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Key: key,
				Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &secs})
		}
	}
	if s.Timeout > 0 {
		pod.Spec.ActiveDeadlineSeconds = ptr(int64(math.Ceil(s.Timeout.Seconds())))
	}
	for _, name := range b.cfg.ImagePullSecrets {
		pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: name})
	}
	if a.nodes > 1 {
		pod.Spec.Hostname = pod.Name
		pod.Spec.Subdomain = a.name
	}
	return pod
}

// service builds the headless Service of a gang, owned by its first pod so
// that the garbage collector deletes it with the pod.
func (b *Backend) service(s *backend.StartSpec, a *attempt, pod0 *corev1.Pod) *corev1.Service {
	lbl := b.labels(s)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: a.name, Namespace: b.cfg.Namespace, Labels: lbl},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			Selector:                 map[string]string{LabelManagedBy: "virga", LabelInstance: b.cfg.Instance, LabelAttempt: lbl[LabelAttempt]},
			PublishNotReadyAddresses: true, // rank 0 resolves as soon as it has an IP
			Ports: []corev1.ServicePort{{Name: "rendezvous", Port: int32(agent.MasterPort(s.AttemptID)),
				Protocol: corev1.ProtocolTCP}},
		},
	}
	if pod0 != nil && pod0.UID != "" {
		svc.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod0.Name, UID: pod0.UID}}
	}
	return svc
}

func (b *Backend) labels(s *backend.StartSpec) map[string]string {
	return map[string]string{
		LabelManagedBy:  "virga",
		LabelInstance:   b.cfg.Instance,
		LabelAttempt:    strconv.FormatInt(s.AttemptID, 10),
		LabelTrial:      strconv.FormatInt(s.TrialID, 10),
		LabelExperiment: strconv.FormatInt(s.ExperimentID, 10),
	}
}

// deletePod deletes a pod with a grace period (at least 1 s: 0 would remove
// the pod from the API at once while its containers may run on), ignoring
// one that is gone.
func (b *Backend) deletePod(name string, grace time.Duration) error {
	g := max(int64(math.Ceil(grace.Seconds())), 1)
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.APITimeout)
	defer cancel()
	b.calls.del.Add(1)
	err := b.client.CoreV1().Pods(b.cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &g})
	if err != nil && !apierrors.IsNotFound(err) {
		b.log.Warn("kubernetes backend: deleting a pod", "pod", name, "err", err)
		return err
	}
	return nil
}

func (b *Backend) deleteAll(names []string, grace time.Duration) error {
	var errs []error
	for _, n := range names {
		if err := b.deletePod(n, grace); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Stop deletes the attempt's pods with grace as their grace period: the
// kubelet sends the agent SIGTERM, and SIGKILL once grace has passed. Exited
// follows when they have ended. Stopping an attempt that is not running here
// is not an error.
func (b *Backend) Stop(attemptID int64, grace time.Duration) error {
	b.mu.Lock()
	a := b.attempts[attemptID]
	if a == nil || a.exited {
		b.mu.Unlock()
		return nil
	}
	a.stopping = true
	a.stopGrace = grace
	var dels []string
	if !a.creating {
		for i, ps := range a.pods {
			if !ps.deleting && !ps.gone {
				ps.deleting = true
				dels = append(dels, podName(a.name, i))
			}
		}
	}
	b.mu.Unlock()
	if err := b.deleteAll(dels, grace); err != nil {
		return fmt.Errorf("kubernetes backend: stopping attempt %d: %w", attemptID, err)
	}
	return nil
}

// sweep deletes the finished pods of attempts this server does not know
// that ended more than FinishedTTL ago: those an earlier server reported and
// could not delete before it went away.
func (b *Backend) sweep() {
	if b.cfg.FinishedTTL < 0 {
		return
	}
	now := b.cfg.Clock.Now()
	var dels []string
	b.mu.Lock()
	for _, obj := range b.informer.GetStore().List() {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.DeletionTimestamp != nil || (pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed) {
			continue
		}
		id, err := strconv.ParseInt(pod.Labels[LabelAttempt], 10, 64)
		if err != nil || b.attempts[id] != nil {
			continue
		}
		if end := finishedAt(pod); !end.IsZero() && now.Sub(end) > b.cfg.FinishedTTL {
			dels = append(dels, pod.Name)
		}
	}
	b.mu.Unlock()
	_ = b.deleteAll(dels, 0)
}

func formatResources(r virga.Resources) string {
	return strconv.FormatFloat(r.CPU, 'g', -1, 64) + "," + strconv.FormatInt(r.MemoryMB, 10) + "," + strconv.Itoa(r.GPU)
}

func parseResources(s string) (virga.Resources, bool) {
	f := strings.Split(s, ",")
	if len(f) != 3 {
		return virga.Resources{}, false
	}
	cpu, err1 := strconv.ParseFloat(f[0], 64)
	mem, err2 := strconv.ParseInt(f[1], 10, 64)
	gpu, err3 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil || err3 != nil {
		return virga.Resources{}, false
	}
	return virga.Resources{CPU: cpu, MemoryMB: mem, GPU: gpu}, true
}

func ptr[T any](v T) *T { return &v }
