package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/virga-ml/virga/internal/backend"
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

// A BackendFactory builds the backend that runs the pools of capacity file c,
// all of one backend, for the server configured by cfg (Start passes its
// Logger as log). The server closes the backend.
type BackendFactory func(cfg *Config, c *spec.Capacity, log *slog.Logger) (backend.Backend, error)

// driverBackend builds the backend of c's pools, all of backend kind, with
// the factory the binary linked for it (cfg.Backends).
func driverBackend(cfg *Config, c *spec.Capacity, kind spec.PoolBackend) (backend.Backend, error) {
	build := cfg.Backends[kind]
	if build == nil {
		p := &c.Pools[0]
		return nil, fmt.Errorf("%s:%d:%d: %s: pool %q is for backend %s, which this server was built without",
			c.File, p.Pos.Line, p.Pos.Col, p.Path("backend"), p.Name, kind)
	}
	return build(cfg, c, cfg.Logger)
}
