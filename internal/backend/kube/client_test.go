package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
)

// apiServer is the least of a Kubernetes API server that the backend's
// informer and starts need, over real HTTP: list and watch pods (the watch
// streams the events pushed to it; with sendInitialEvents, client-go's
// streaming list, it first sends the bookmark that ends the initial
// objects), create pods.
type apiServer struct {
	t      *testing.T
	mu     sync.Mutex
	events chan string // JSON watch events
	paths  []string
}

func (s *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.paths = append(s.paths, r.Method+" "+r.URL.Path)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/namespaces/ml/pods" && r.URL.Query().Get("watch") == "true":
		if !strings.Contains(r.URL.Query().Get("labelSelector"), "virga.dev/instance=virga") {
			s.t.Errorf("watch without the label selector: %s", r.URL.RawQuery)
		}
		w.WriteHeader(http.StatusOK)
		if r.URL.Query().Get("sendInitialEvents") == "true" {
			// A streaming list (client-go's WatchList): the initial
			// objects (none) end with a bookmark.
			_, _ = io.WriteString(w, `{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"1","annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n")
		}
		w.(http.Flusher).Flush()
		for {
			select {
			case ev := <-s.events:
				_, _ = io.WriteString(w, ev+"\n")
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/namespaces/ml/pods":
		_, _ = io.WriteString(w, `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`)
	case r.Method == http.MethodPost && r.URL.Path == "/api/v1/namespaces/ml/pods":
		body, _ := io.ReadAll(r.Body)
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil) // protobuf, as client-go sends it
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		pod := obj.(*corev1.Pod)
		pod.Kind, pod.APIVersion = "Pod", "v1"
		pod.UID, pod.ResourceVersion = "u1", "2"
		b, _ := json.Marshal(pod)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(b)
		s.events <- `{"type":"ADDED","object":` + string(b) + `}`
	default:
		s.t.Errorf("unexpected %s %s", r.Method, r.URL)
		http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":404}`, http.StatusNotFound)
	}
}

// TestClientOverHTTP builds a client from a kubeconfig file (NewClient),
// runs the backend's informer over real HTTP and watch streams, and counts
// the requests.
func TestClientOverHTTP(t *testing.T) {
	api := &apiServer{t: t, events: make(chan string, 16)}
	srv := httptest.NewServer(api)
	defer srv.Close()
	kc := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(kc, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: t0k}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: ml}}]
current-context: x
`, srv.URL), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	client, err := NewClient(kc)
	if err != nil {
		t.Fatal(err)
	}
	if client.Namespace != "ml" {
		t.Errorf("namespace %q", client.Namespace)
	}
	b, err := New(client, Config{Namespace: client.Namespace, Image: "img", SyncTimeout: 10 * time.Second, Capacity: virga.Resources{CPU: 8, MemoryMB: 8192, GPU: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Start(context.Background(), startSpec(1)); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: "virga-1-0", Namespace: "ml",
		ResourceVersion: "3", Labels: map[string]string{LabelManagedBy: "virga", LabelInstance: "virga", LabelAttempt: "1", LabelRank: "0"}},
		Spec: corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: ContainerName,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}}}
	js, _ := json.Marshal(pod)
	api.events <- `{"type":"MODIFIED","object":` + string(js) + `}`
	if ev := next(t, b); ev.Kind != backend.Started || ev.AttemptID != 1 {
		t.Fatalf("got %+v", ev)
	}
	// client-go's streaming list: one watch request lists and watches.
	if n := client.Requests(); n != 2 {
		t.Errorf("%d requests counted, want 2 (the informer's watch, the create): %v", n, api.paths)
	}
	t.Logf("requests: %d %v", client.Requests(), api.paths)
}

func TestVerbOf(t *testing.T) {
	for _, c := range []struct{ method, url, want string }{
		{"GET", "/api/v1/namespaces/ns/pods?labelSelector=a%3Db&limit=500", "list"},
		{"GET", "/api/v1/namespaces/ns/pods?watch=true&resourceVersion=7", "watch"},
		{"GET", "/api/v1/namespaces/ns/pods/p-0", "get"},
		{"GET", "/api/v1/nodes", "list"},
		{"GET", "/api/v1/namespaces", "list"},
		{"GET", "/api/v1/namespaces/ns", "get"},
		{"GET", "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/roles?watch=1", "watch"},
		{"POST", "/api/v1/namespaces/ns/pods", "create"},
		{"POST", "/api/v1/namespaces/ns/serviceaccounts/virga/token", "other"},
		{"PUT", "/api/v1/nodes/n", "update"},
		{"PUT", "/api/v1/namespaces/ns/pods/p-0/status", "other"},
		{"PATCH", "/api/v1/namespaces/ns/pods/p-0", "patch"},
		{"DELETE", "/api/v1/namespaces/ns/pods/p-0", "delete"},
		{"DELETE", "/api/v1/namespaces/ns/pods?labelSelector=a", "deletecollection"},
		{"GET", "/version", "other"},
		{"GET", "/apis", "other"},
	} {
		r := httptest.NewRequest(c.method, c.url, nil)
		if got := verbs[verbOf(r)]; got != c.want {
			t.Errorf("%s %s: %s, want %s", c.method, c.url, got, c.want)
		}
	}
}
