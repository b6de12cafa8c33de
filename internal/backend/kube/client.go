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
}

// Requests returns the number of HTTP requests sent so far.
func (c *Client) Requests() int64 { return c.requests.Load() }

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
