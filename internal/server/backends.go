package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/backend/kube"
	"github.com/virga-ml/virga/internal/backend/slurm"
	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/spec"
)

// LoadCapacity reads the capacity file at path and builds its pools, after
// reading from the Slurm cluster (scontrol) what its Slurm pools leave out
// (slurm.Resolve). With check, the Slurm pools are checked against their
// partitions even when they give everything (a server, which submits to
// them); without, the cluster is read only when a pool needs it (virga sim
// and virga estimate may run where Slurm's commands do not).
func LoadCapacity(ctx context.Context, path string, check bool) (*spec.Capacity, *capacity.Set, error) {
	c, _, err := spec.LoadCapacity(path)
	if err != nil {
		return nil, nil, err
	}
	if err := resolveSlurm(ctx, c, check); err != nil {
		return nil, nil, err
	}
	set, err := capacity.Load(c, filepath.Dir(path))
	if err != nil {
		return nil, nil, err
	}
	return c, set, nil
}

// resolveSlurm completes c's Slurm pools from the cluster: always with
// check, else when one of them needs it.
func resolveSlurm(ctx context.Context, c *spec.Capacity, check bool) error {
	need := false
	for i := range c.Pools {
		p := &c.Pools[i]
		need = need || p.FromCluster() || check && p.Backend == spec.BackendSlurm
	}
	if !need {
		return nil
	}
	return slurm.ResolveCapacity(ctx, c, "")
}

// poolBackend returns the one backend a capacity file's pools name: local
// (the server's own backend, built by the caller), slurm or kubernetes. A
// server runs the pools of one backend.
func poolBackend(file string, c *spec.Capacity) (spec.PoolBackend, error) {
	kind := spec.PoolBackend("")
	for i := range c.Pools {
		p := &c.Pools[i]
		b := p.Backend
		if b == spec.BackendSim {
			return "", fmt.Errorf("%s:%d:%d: %s: pool %q is for backend sim, which only virga sim and virga estimate run; a server runs local, slurm or kubernetes pools",
				file, p.Pos.Line, p.Pos.Col, p.Path("backend"), p.Name)
		}
		if kind != "" && b != kind {
			return "", fmt.Errorf("%s:%d:%d: %s: pool %q is for backend %s but an earlier one is for %s; a server runs the pools of one backend (start one server per backend)",
				file, p.Pos.Line, p.Pos.Col, p.Path("backend"), p.Name, b, kind)
		}
		kind = b
	}
	return kind, nil
}

// slurmBackend builds the Slurm backend of a capacity file's pools.
func slurmBackend(cfg *Config, dataDir string, c *spec.Capacity, log *slog.Logger) (backend.Backend, error) {
	agentPath := cfg.Agent
	if agentPath == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding the virga executable for the Slurm nodes (give --agent): %w", err)
		}
		agentPath = exe
	}
	var pools []slurm.Pool
	for i := range c.Pools {
		pools = append(pools, slurm.PoolFromSpec(&c.Pools[i]))
	}
	// Job names tell this server's jobs from other servers' of the same user.
	be, err := slurm.New(slurm.Config{Pools: pools, AgentPath: agentPath, JobPrefix: slurm.PrefixFor(dataDir), Logger: log})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.File, err)
	}
	return be, nil
}

// kubeBackend builds the Kubernetes backend of a capacity file's pools.
func kubeBackend(cfg *Config, c *spec.Capacity, log *slog.Logger) (backend.Backend, error) {
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
