package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
)

// kwokExitAnnotation makes the KWOK stage scripts/kube.sh installs end a
// running pod's container with the exit code it gives.
const kwokExitAnnotation = "virga.dev/kwok-exit-code"

// TestKWOK runs attempts against the real control plane scripts/kube.sh
// starts (kube-apiserver, etcd, controller-manager, scheduler) whose nodes
// KWOK plays: pods are created, admitted, scheduled onto the on-demand or
// spot pool's fake nodes, turn Running, and end when the test annotates
// them with an exit code (KWOK runs no containers), are deleted by Virga,
// or are evicted when their spot node is reclaimed.
//
//	scripts/kube.sh start && eval "$(scripts/kube.sh env)" && go test -run KWOK -v ./internal/backend/kube
func TestKWOK(t *testing.T) {
	client, ns := kwokNamespace(t)
	ctx := context.Background()

	// The backend runs as deploy/kubernetes's service account, under its Role.
	roleClient := asServiceAccount(t, client, ns)

	pools := karpenterPools(t, virga.Resources{CPU: 32, MemoryMB: 128 << 10}, 100, 100)
	cfg := Config{Namespace: ns, Image: "virga:kwok", Instance: "kwok", Pools: pools, FinishedTTL: time.Second}
	b, err := New(roleClient, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()

	base := time.Now().UnixMilli() % 1_000_000_000
	start := func(t *testing.T, id int64, nodes int, pool string) {
		t.Helper()
		s := &backend.StartSpec{AttemptID: id, TrialID: id, ExperimentID: 1, Argv: []string{"train"},
			Resources: virga.Resources{CPU: float64(nodes), MemoryMB: 1024 * int64(nodes)}, Nodes: nodes, ProcessesPerNode: 1,
			Pool: pool, StopGrace: 5 * time.Second, ReportURL: fmt.Sprintf("http://127.0.0.1:1/api/v1/attempts/%d/report", id),
			Token: "kwok"}
		if err := b.Start(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(t *testing.T, b *Backend, id int64, kind backend.EventKind) backend.Event {
		t.Helper()
		deadline := time.After(time.Minute)
		for {
			select {
			case ev := <-b.Events():
				t.Logf("event %+v", ev)
				if ev.AttemptID == id && ev.Kind == kind {
					return ev
				}
				if ev.AttemptID == id && ev.Kind == backend.Exited {
					t.Fatalf("attempt %d exited before %s: %+v", id, kind, ev)
				}
			case <-deadline:
				t.Fatalf("attempt %d: no %s within a minute", id, kind)
			}
		}
	}
	// exit plays the trial's exit with code in pod rank 0 of attempt id.
	exit := func(t *testing.T, id int64, code int) {
		t.Helper()
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"%d"}}}`, kwokExitAnnotation, code)
		if _, err := client.CoreV1().Pods(ns).Patch(ctx, podName(fmt.Sprintf("kwok-%d", id), 0), types.MergePatchType,
			[]byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	nodeOf := func(t *testing.T, id int64, rank int) *corev1.Node {
		t.Helper()
		pod, err := client.CoreV1().Pods(ns).Get(ctx, podName(fmt.Sprintf("kwok-%d", id), rank), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n, err := client.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	t.Run("exit code on demand", func(t *testing.T) {
		id := base + 1
		start(t, id, 1, "on-demand")
		wait(t, b, id, backend.Started)
		if n := nodeOf(t, id, 0); n.Labels["karpenter.sh/capacity-type"] != "on-demand" {
			t.Errorf("pod of the on-demand pool on node %s labelled %v", n.Name, n.Labels)
		}
		exit(t, id, 7)
		ev := wait(t, b, id, backend.Exited)
		if ev.Lost || ev.Preempted || ev.ExitCode == nil || *ev.ExitCode != 7 || ev.Pool != "on-demand" {
			t.Errorf("want exit code 7 in pool on-demand, got %+v", ev)
		}
	})
	t.Run("success on spot", func(t *testing.T) {
		id := base + 2
		start(t, id, 1, "spot")
		wait(t, b, id, backend.Started)
		if n := nodeOf(t, id, 0); n.Labels["karpenter.sh/capacity-type"] != "spot" {
			t.Errorf("pod of the spot pool on node %s labelled %v", n.Name, n.Labels)
		}
		exit(t, id, 0)
		ev := wait(t, b, id, backend.Exited)
		if ev.Lost || ev.Preempted || ev.ExitCode == nil || *ev.ExitCode != 0 || ev.Pool != "spot" {
			t.Errorf("want exit code 0 in pool spot, got %+v", ev)
		}
	})
	t.Run("stop", func(t *testing.T) {
		id := base + 3
		start(t, id, 1, "on-demand")
		wait(t, b, id, backend.Started)
		if err := b.Stop(id, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		ev := wait(t, b, id, backend.Exited)
		if ev.Preempted || ev.Lost || ev.ExitCode != nil {
			t.Errorf("want a stop, got %+v", ev)
		}
	})
	t.Run("spot reclaim", func(t *testing.T) {
		id := base + 4
		start(t, id, 1, "spot")
		wait(t, b, id, backend.Started)
		// The provider reclaims the node: a NoExecute taint the pod does not
		// tolerate has the taint manager evict it at once.
		n := nodeOf(t, id, 0)
		taint := corev1.Taint{Key: "virga.dev/reclaimed", Value: "true", Effect: corev1.TaintEffectNoExecute}
		n.Spec.Taints = append(n.Spec.Taints, taint)
		if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { untaint(t, client, n.Name, taint.Key) })
		ev := wait(t, b, id, backend.Exited)
		if !ev.Preempted || ev.Lost {
			t.Errorf("want a preemption, got %+v", ev)
		}
	})
	t.Run("gang of 2 and adopt", func(t *testing.T) {
		id := base + 5
		start(t, id, 2, "on-demand")
		wait(t, b, id, backend.Started)
		if _, err := client.CoreV1().Services(ns).Get(ctx, fmt.Sprintf("kwok-%d", id), metav1.GetOptions{}); err != nil {
			t.Errorf("the gang's Service: %v", err)
		}
		// The server restarts: a new backend adopts the running gang.
		_ = b.Close()
		b2, err := New(roleClient, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = b2.Close() }()
		if err := b2.Adopt(ctx, &virga.Attempt{ID: id}, virga.Resources{}); err != nil {
			t.Fatal(err)
		}
		wait(t, b2, id, backend.Started)
		exit(t, id, 3)
		ev := wait(t, b2, id, backend.Exited)
		if ev.Preempted || ev.Lost || ev.ExitCode == nil || *ev.ExitCode != 3 {
			t.Errorf("want exit code 3, got %+v", ev)
		}
	})
}

// kwokNamespace skips t unless VIRGA_TEST_KWOK is set; it returns an admin
// client of the cluster KUBECONFIG names and a namespace of t's own, deleted
// at its end, whose default service account exists.
func kwokNamespace(t *testing.T) (*Client, string) {
	t.Helper()
	if os.Getenv("VIRGA_TEST_KWOK") == "" {
		t.Skip("KWOK suite skipped: VIRGA_TEST_KWOK is not set (scripts/kube.sh start; eval \"$(scripts/kube.sh env)\")")
	}
	client, err := NewClient("")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := fmt.Sprintf("virga-kwok-%d", time.Now().UnixNano()%1_000_000)
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	// Pods cannot be created before the controller-manager has made the
	// namespace's default service account.
	waitFor(t, "the default service account of "+ns, func() bool {
		_, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})
	return client, ns
}

// asServiceAccount creates deploy/kubernetes/rbac.yaml's service account,
// Role and RoleBinding in ns, and returns a client that authenticates as
// that service account with a token the API server issues for it.
func asServiceAccount(t *testing.T, admin *Client, ns string) *Client {
	t.Helper()
	ctx := context.Background()
	data, err := os.ReadFile("../../../deploy/kubernetes/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var name string
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("deploy/kubernetes/rbac.yaml: %v", err)
		}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			o.Namespace, name = ns, o.Name
			_, err = admin.CoreV1().ServiceAccounts(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			o.Namespace = ns
			_, err = admin.RbacV1().Roles(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			o.Namespace = ns
			for i := range o.Subjects {
				o.Subjects[i].Namespace = ns
			}
			_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("deploy/kubernetes/rbac.yaml: unexpected %T", obj)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	tok, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	kc.Contexts["sa"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "sa", Namespace: ns}
	kc.CurrentContext = "sa"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Namespace != ns {
		t.Fatalf("service account client in namespace %q, want %q", c.Namespace, ns)
	}
	return c
}

// untaint removes the taint key from node name.
func untaint(t *testing.T, client *Client, name, key string) {
	ctx := context.Background()
	for range 5 {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("untaint %s: %v", name, err)
			return
		}
		var keep []corev1.Taint
		for _, tn := range n.Spec.Taints {
			if tn.Key != key {
				keep = append(keep, tn)
			}
		}
		n.Spec.Taints = keep
		if _, err = client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err == nil || !apierrors.IsConflict(err) {
			if err != nil {
				t.Errorf("untaint %s: %v", name, err)
			}
			return
		}
	}
}

// karpenterPools is an on-demand pool of onDemand nodes and a spot pool of
// spot nodes (each left out when 0), selecting scripts/kube.sh's KWOK nodes
// by Karpenter's capacity-type label.
func karpenterPools(t *testing.T, node virga.Resources, onDemand, spot int) []Pool {
	t.Helper()
	var pools []Pool
	for _, p := range []struct {
		name  string
		nodes int
		spot  bool
	}{{"on-demand", onDemand, false}, {"spot", spot, true}} {
		if p.nodes == 0 {
			continue
		}
		sel, err := OnDemandSelector(Karpenter)
		if p.spot {
			sel, err = SpotSelector(Karpenter)
		}
		if err != nil {
			t.Fatal(err)
		}
		pool := Pool{Name: p.name, Node: node, Nodes: p.nodes, Spot: p.spot}
		sel.Apply(&pool)
		pools = append(pools, pool)
	}
	return pools
}
