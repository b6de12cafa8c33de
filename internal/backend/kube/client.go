package kube

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Client is a clientset with the namespace its configuration names and a
// count of the HTTP requests it sent (every API call, the informer's list
// and watch included).
type Client struct {
	kubernetes.Interface
	// Namespace is the kubeconfig context's namespace, or the pod's own
	// when in the cluster ("default" when neither says).
	Namespace string
	requests  atomic.Int64
	byVerb    [len(verbs)]atomic.Int64
}

// verbs are the kinds of request Client counts apart: an API call's verb
// as RBAC names it (list and watch are GETs of a collection, the latter
// with watch=true), "other" for the rest (discovery, a subresource's POST).
var verbs = [...]string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "other"}

// Requests returns the number of HTTP requests sent so far.
func (c *Client) Requests() int64 { return c.requests.Load() }

// RequestsByVerb returns the number of requests sent so far of each verb
// (get, list, watch, create, update, patch, delete, deletecollection,
// other) that any were.
func (c *Client) RequestsByVerb() map[string]int64 {
	m := map[string]int64{}
	for i, v := range verbs {
		if n := c.byVerb[i].Load(); n > 0 {
			m[v] = n
		}
	}
	return m
}

// verbOf returns the index in verbs of r's verb: a request's path names a
// collection (/api/v1/pods, /api/v1/namespaces/NS/pods,
// /apis/GROUP/VERSION/namespaces/NS/RESOURCE) or an object in one (one
// segment more), or a subresource of that object (another).
func verbOf(r *http.Request) int {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var rest []string // from the resource on
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		rest = parts[3:]
	default:
		return len(verbs) - 1
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	collection := len(rest) == 1
	if len(rest) > 2 || len(rest) == 0 {
		return len(verbs) - 1 // a subresource, or the namespaces' own root
	}
	verb := "other"
	switch r.Method {
	case http.MethodGet:
		switch {
		case !collection:
			verb = "get"
		case r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1":
			verb = "watch"
		default:
			verb = "list"
		}
	case http.MethodPost:
		if collection {
			verb = "create"
		}
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
		if collection {
			verb = "deletecollection"
		}
	}
	for i, v := range verbs {
		if v == verb {
			return i
		}
	}
	return len(verbs) - 1
}

// NewClient builds a client from the kubeconfig file at path, or, when path
// is empty, from $KUBECONFIG (a list of files, as kubectl reads it) or
// ~/.kube/config, or, inside a pod without those, from the in-cluster
// service account.
func NewClient(path string) (*Client, error) {
	var (
		cfg *rest.Config
		ns  string
		err error
	)
	_, home := os.LookupEnv("HOME")
	inCluster := os.Getenv("KUBERNETES_SERVICE_HOST") != "" && os.Getenv("KUBECONFIG") == ""
	if path == "" && inCluster {
		if _, statErr := os.Stat(clientcmd.RecommendedHomeFile); !home || statErr != nil {
			cfg, err = rest.InClusterConfig()
			if err != nil {
				return nil, fmt.Errorf("kubernetes: in-cluster config: %w", err)
			}
			if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
				ns = strings.TrimSpace(string(b))
			}
		}
	}
	if cfg == nil {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		if path != "" {
			rules.ExplicitPath = path
		}
		cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
		cfg, err = cc.ClientConfig()
		if err != nil {
			if clientcmd.IsEmptyConfig(err) {
				return nil, errors.New("kubernetes: no kubeconfig (set KUBECONFIG, or run in a pod)")
			}
			return nil, fmt.Errorf("kubernetes: %w", err)
		}
		ns, _, _ = cc.Namespace()
	}
	if ns == "" {
		ns = "default"
	}
	// client-go's default of 5 requests per second would make a burst of
	// starts (a pod per node of each attempt) wait on the client side.
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 50, 100
	}
	c := &Client{Namespace: ns}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			c.requests.Add(1)
			c.byVerb[verbOf(r)].Add(1)
			return rt.RoundTrip(r)
		})
	})
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	c.Interface = cs
	return c, nil
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
