//go:build !kubernetes

package main

import (
	"fmt"
	"log/slog"

	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/server"
	"github.com/virga-ml/virga/internal/spec"
)

// kubernetesTag is empty: this build has no Kubernetes backend.
const kubernetesTag = ""

// kubeBackend refuses pools of backend kubernetes, at the first one's line,
// saying how to build a virga that runs them.
func kubeBackend(_ *server.Config, c *spec.Capacity, _ *slog.Logger) (backend.Backend, error) {
	p := &c.Pools[0]
	return nil, fmt.Errorf("%s:%d:%d: %s: pool %q is for backend kubernetes: %w", c.File, p.Pos.Line, p.Pos.Col,
		p.Path("backend"), p.Name, notBuiltIn("Kubernetes", "kubernetes"))
}
