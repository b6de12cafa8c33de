//go:build kubernetes

package main

import (
	"fmt"
	"log/slog"

	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/backend/kube"
	"github.com/virga-ml/virga/internal/server"
	"github.com/virga-ml/virga/internal/spec"
)

// kubernetesTag is the build tag that links the Kubernetes backend.
const kubernetesTag = "kubernetes"

// kubeBackend builds the Kubernetes backend of a capacity file's pools.
func kubeBackend(cfg *server.Config, c *spec.Capacity, log *slog.Logger) (backend.Backend, error) {
	if cfg.KubeImage == "" {
		return nil, fmt.Errorf("%s: pools of backend kubernetes need the trials' container image (--kube-image, with virga and the trainer; see deploy/Dockerfile)", c.File)
	}
	client, err := kube.NewClient(cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	var pools []kube.Pool
	for i := range c.Pools {
		p, err := kube.PoolFromSpec(&c.Pools[i])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.File, err)
		}
		pools = append(pools, p)
	}
	ns := cfg.KubeNamespace
	if ns == "" {
		ns = client.Namespace
	}
	be, err := kube.New(client, kube.Config{Namespace: ns, Image: cfg.KubeImage, Pools: pools, Logger: log})
	if err != nil {
		return nil, err
	}
	return be, nil
}
