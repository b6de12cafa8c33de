package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/clock"
)

// Labels and annotations the backend puts on its pods and services.
const (
	LabelManagedBy  = "app.kubernetes.io/managed-by" // "virga"
	LabelInstance   = "virga.dev/instance"           // Config.Instance
	LabelAttempt    = "virga.dev/attempt"
	LabelTrial      = "virga.dev/trial"
	LabelExperiment = "virga.dev/experiment"
	LabelRank       = "virga.dev/rank"

	AnnotationPool      = "virga.dev/pool"
	AnnotationNodes     = "virga.dev/nodes"
	AnnotationResources = "virga.dev/resources" // the whole attempt's: "cpu,memory_mb,gpu"
	AnnotationStopGrace = "virga.dev/stop-grace"

	// ContainerName is the name of the agent's container in each pod.
	ContainerName = "agent"
	// GPUResource is the default extended resource name of a GPU.
	GPUResource corev1.ResourceName = "nvidia.com/gpu"
)

// Pool is one capacity pool: a set of the cluster's nodes picked by labels,
// of one shape.
type Pool struct {
	// Name identifies the pool in StartSpec.Pool and in attempts. Required
	// when there are pools, unique.
	Name string `json:"name"`
	// NodeSelector, Tolerations and Affinity are set on the pool's pods
	// (SpotSelector gives those of the major clouds' spot nodes).
	NodeSelector map[string]string   `json:"node_selector,omitempty"`
	Tolerations  []corev1.Toleration `json:"tolerations,omitempty"`
	Affinity     *corev1.Affinity    `json:"affinity,omitempty"`
	// Node is what one node of the pool offers to trials (its allocatable
	// share Virga may use) and Nodes how many the pool has at most; the
	// pool's capacity is Nodes x Node.
	Node  virga.Resources `json:"node"`
	Nodes int             `json:"nodes"`
	// Spot marks the pool preemptible; Warning is how long before a reclaim
	// the provider warns (GKE and AKS 30 s, AWS 120 s).
	Spot    bool          `json:"spot,omitempty"`
	Warning time.Duration `json:"warning,omitempty"`
}

// Capacity returns Nodes x Node.
func (p Pool) Capacity() virga.Resources {
	n := max(p.Nodes, 0)
	return virga.Resources{CPU: p.Node.CPU * float64(n), MemoryMB: p.Node.MemoryMB * int64(n), GPU: p.Node.GPU * n}
}

// Config configures the backend.
type Config struct {
	// Name is the backend's name in attempts; default "kubernetes".
	Name string
	// Namespace is where pods and services are created and watched.
	// Required.
	Namespace string
	// Image is the container image with the `virga` binary (see
	// deploy/Dockerfile) and the trainer's code and libraries. Required.
	Image           string
	ImagePullPolicy corev1.PullPolicy
	// ImagePullSecrets are names of secrets in Namespace.
	ImagePullSecrets []string
	// ServiceAccount runs the pods (empty: the namespace's default). The
	// agent needs no Kubernetes API access.
	ServiceAccount string
	// Workdir, if set, is the trial's working directory in the pod (the
	// agent's spec and the container's); empty keeps the experiment's, which
	// the agent uses if the image has it and ignores otherwise.
	Workdir string
	// Command is the container's command; default ["virga", "agent"].
	Command []string
	// Instance tells apart the servers that share a namespace: it is the
	// value of the virga.dev/instance label the informer selects on, and the
	// prefix of pod names (<instance>-<attempt id>-<rank>). Default "virga".
	// A DNS label starting with a letter, of at most 30 characters (pod
	// hostnames must fit in 63).
	Instance string
	// Pools are the capacity pools, the first being the default. With none,
	// the backend has one unnamed pool of Capacity on any node.
	Pools    []Pool
	Capacity virga.Resources
	// GPUResource is the extended resource name of GPUs; default
	// nvidia.com/gpu.
	GPUResource corev1.ResourceName
	// Labels and Annotations are added to every pod.
	Labels      map[string]string
	Annotations map[string]string
	// Env is added to every pod's environment (e.g. the trainer's
	// credentials are better mounted, but proxies go here).
	Env []corev1.EnvVar
	// FinishedTTL is how long a finished attempt's pods are kept (for
	// `kubectl logs`) before the backend deletes them; default 10 minutes,
	// negative keeps them.
	FinishedTTL time.Duration
	// StartTimeout, if positive, ends an attempt whose pods do not all run
	// within it of its start (no node could be had, an image that cannot be
	// pulled): its pods are deleted and it is reported Exited without
	// Started, Preempted on a spot pool (its capacity is not there) and
	// Lost otherwise. Zero waits as long as it takes (an autoscaler may take
	// minutes to add a node).
	StartTimeout time.Duration
	// LostAfter is how long a pod may stay terminating past the end of its
	// deletion's grace period before it is taken as gone with its node (the
	// kubelet of an unreachable node never confirms the deletion); default
	// 1 minute.
	LostAfter time.Duration
	// NodeLostAfter, if positive, is how long pods tolerate their node being
	// unreachable or not ready before the taint manager evicts them (the
	// cluster's default is 5 minutes): a spot node that vanished without
	// notice is then noticed sooner.
	NodeLostAfter time.Duration
	// APITimeout bounds each API call; default 30 s. SyncTimeout bounds the
	// informer's first list in New; default 60 s.
	APITimeout  time.Duration
	SyncTimeout time.Duration
	// Clock is the backend's time: event times and the timers of stops,
	// start timeouts and stuck deletions; nil means the real clock.
	Clock  clock.Clock
	Logger *slog.Logger
}

// unaccountedMemoryMB stands for the memory of a node whose memory is not
// counted (a capacity file's node without memory): 1 PiB.
const unaccountedMemoryMB = 1 << 30

var dnsLabel = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

// pool is one pool and its bookkeeping (acct, one of Backend.acct's,
// guarded by Backend.mu).
type pool struct {
	Pool
	acct *backend.Pool
}

// Backend runs attempts as pods. Create it with New.
type Backend struct {
	cfg    Config
	client kubernetes.Interface
	log    *slog.Logger
	named  bool
	pools  []*pool        // in the order of acct's
	acct   *backend.Pools // guarded by mu

	factory  informers.SharedInformerFactory
	informer cache.SharedIndexInformer
	stop     chan struct{}
	q        *backend.EventQueue

	mu       sync.Mutex
	attempts map[int64]*attempt
	ended    map[int64]bool
	timers   map[clock.Timer]bool
	closed   bool
	swept    bool

	calls struct{ create, del atomic.Int64 }
}

var (
	_ backend.Backend = (*Backend)(nil)
	_ backend.Pooled  = (*Backend)(nil)
	_ backend.Adopter = (*Backend)(nil)
	_ backend.Sizer   = (*Backend)(nil)
	_ backend.Remote  = (*Backend)(nil)
)

const attemptIndex = "attempt"

// New validates cfg, starts the informer on the backend's pods in
// cfg.Namespace and waits until it has listed them (so that Adopt finds
// what runs). Close stops it.
func New(client kubernetes.Interface, cfg Config) (*Backend, error) {
	if client == nil {
		return nil, errors.New("kubernetes backend: no client")
	}
	if cfg.Name == "" {
		cfg.Name = "kubernetes"
	}
	if cfg.Namespace == "" {
		return nil, errors.New("kubernetes backend: a namespace is required")
	}
	if cfg.Image == "" {
		return nil, errors.New("kubernetes backend: an image (with the virga binary) is required")
	}
	if len(cfg.Command) == 0 {
		cfg.Command = []string{"virga", "agent"}
	}
	if cfg.Instance == "" {
		cfg.Instance = "virga"
	}
	if len(cfg.Instance) > 30 || !dnsLabel.MatchString(cfg.Instance) {
		return nil, fmt.Errorf("kubernetes backend: instance %q must be a DNS label (a-z, 0-9, '-', starting with a letter) of at most 30 characters", cfg.Instance)
	}
	if cfg.GPUResource == "" {
		cfg.GPUResource = GPUResource
	}
	if cfg.FinishedTTL == 0 {
		cfg.FinishedTTL = 10 * time.Minute
	}
	if cfg.LostAfter <= 0 {
		cfg.LostAfter = time.Minute
	}
	if cfg.APITimeout <= 0 {
		cfg.APITimeout = 30 * time.Second
	}
	if cfg.SyncTimeout <= 0 {
		cfg.SyncTimeout = time.Minute
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	b := &Backend{cfg: cfg, client: client, log: cfg.Logger, attempts: map[int64]*attempt{},
		ended: map[int64]bool{}, timers: map[clock.Timer]bool{}, stop: make(chan struct{})}
	var accts []backend.Pool
	confs := make([]Pool, len(cfg.Pools)) // the caller's, completed
	if len(cfg.Pools) == 0 {
		if cfg.Capacity == (virga.Resources{}) {
			return nil, errors.New("kubernetes backend: give pools, or the capacity of its single pool")
		}
		accts = []backend.Pool{{Capacity: cfg.Capacity}}
	} else {
		b.named = true
		seen := map[string]bool{}
		for i, p := range cfg.Pools {
			switch {
			case p.Name == "":
				return nil, fmt.Errorf("kubernetes backend: pool %d has no name", i+1)
			case seen[p.Name]:
				return nil, fmt.Errorf("kubernetes backend: pool %q is listed twice", p.Name)
			case p.Nodes < 1:
				return nil, fmt.Errorf("kubernetes backend: pool %q: nodes must be at least 1", p.Name)
			case p.Node.CPU <= 0 || p.Node.MemoryMB < 0 || p.Node.GPU < 0:
				return nil, fmt.Errorf("kubernetes backend: pool %q: node needs a positive cpu", p.Name)
			}
			seen[p.Name] = true
			if p.Node.MemoryMB == 0 {
				p.Node.MemoryMB = unaccountedMemoryMB
			}
			confs[i] = p
			accts = append(accts, backend.Pool{Name: p.Name, Capacity: p.Capacity(), Preemptible: p.Spot, Warning: p.Warning})
		}
	}
	b.acct = backend.NewPools(b.named, accts)
	for i, acct := range b.acct.All() {
		p := &pool{acct: acct}
		if b.named {
			p.Pool = confs[i]
		}
		b.pools = append(b.pools, p)
	}

	sel := labels.SelectorFromSet(labels.Set{LabelManagedBy: "virga", LabelInstance: cfg.Instance}).String()
	b.factory = informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel }))
	b.informer = b.factory.Core().V1().Pods().Informer()
	if err := b.informer.AddIndexers(cache.Indexers{attemptIndex: func(obj any) ([]string, error) {
		if p, ok := obj.(*corev1.Pod); ok && p.Labels[LabelAttempt] != "" {
			return []string{p.Labels[LabelAttempt]}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, fmt.Errorf("kubernetes backend: %w", err)
	}
	if _, err := b.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { b.onPod(obj, false) },
		UpdateFunc: func(_, obj any) { b.onPod(obj, false) },
		DeleteFunc: func(obj any) { b.onPod(obj, true) },
	}); err != nil {
		return nil, fmt.Errorf("kubernetes backend: %w", err)
	}
	b.q = backend.NewEventQueue()
	b.factory.Start(b.stop)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.SyncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), b.informer.HasSynced) {
		close(b.stop)
		b.factory.Shutdown()
		b.q.Close()
		return nil, fmt.Errorf("kubernetes backend: listing pods in namespace %q did not finish within %s (is the API server reachable, and may this service account list pods there?)", cfg.Namespace, cfg.SyncTimeout)
	}
	return b, nil
}

// Name returns Config.Name ("kubernetes").
func (b *Backend) Name() string { return b.cfg.Name }

// Remote reports true: attempts run `virga agent` in pods.
func (b *Backend) Remote() bool { return true }

// Events delivers Started and Exited events; Close closes it.
func (b *Backend) Events() <-chan backend.Event { return b.q.Out() }

// Free returns what the pools' live attempts leave of their capacity.
func (b *Backend) Free() virga.Resources {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.acct.Free()
}

// Capacity returns the sum of the pools' Nodes x Node (or Config.Capacity).
func (b *Backend) Capacity() virga.Resources {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.acct.Capacity()
}

// Pools returns each pool's status, or nil without named pools. Spot pools
// are always reported up: the cluster's autoscaler, not Virga, knows when
// spot nodes can be had, and a pod that finds none waits Pending.
func (b *Backend) Pools() []backend.PoolStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.acct.Status()
}

// APICalls counts the calls this backend made to the API server other than
// the informer's list and watch (shared by all attempts): pod and service
// creates and deletes.
type APICalls struct {
	Create, Delete int64
}

// Calls returns the API calls made so far.
func (b *Backend) Calls() APICalls {
	return APICalls{Create: b.calls.create.Load(), Delete: b.calls.del.Load()}
}

// Close stops the informer and closes Events. Pods go on running and can be
// adopted by the next server; finished pods not yet deleted are left for the
// next server's sweep.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	for t := range b.timers {
		t.Stop()
	}
	b.timers = nil
	b.mu.Unlock()
	close(b.stop)
	b.factory.Shutdown()
	b.q.Close()
	return nil
}

// after runs f after d unless the backend is closed first. Called with b.mu
// held; f runs without it.
func (b *Backend) after(d time.Duration, f func()) {
	if b.closed {
		return
	}
	var t clock.Timer
	t = b.cfg.Clock.AfterFunc(max(d, 0), func() {
		b.mu.Lock()
		if b.timers == nil || !b.timers[t] {
			b.mu.Unlock()
			return
		}
		delete(b.timers, t)
		b.mu.Unlock()
		f()
	})
	b.timers[t] = true
}

// poolNamed returns the pool called name ("": the default).
func (b *Backend) poolNamed(name string) (*pool, error) {
	acct, err := b.acct.Get(name) // fixed after New: no lock needed
	if err != nil {
		return nil, fmt.Errorf("kubernetes backend: %w", err)
	}
	for _, p := range b.pools {
		if p.acct == acct {
			return p, nil
		}
	}
	panic("kubernetes backend: a pool without its bookkeeping")
}

// baseName is the name of an attempt's service and the prefix of its pods.
func (b *Backend) baseName(id int64) string { return b.cfg.Instance + "-" + strconv.FormatInt(id, 10) }

func podName(base string, rank int) string { return base + "-" + strconv.Itoa(rank) }
