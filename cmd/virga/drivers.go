package main

import (
	"fmt"
	"strings"

	"github.com/virga-ml/virga/internal/checkpoint"
	"github.com/virga-ml/virga/internal/checkpoint/blobstore"
	"github.com/virga-ml/virga/internal/server"
	"github.com/virga-ml/virga/internal/spec"
)

// The drivers a server of this binary can use. Directories, file:// and
// mem:// checkpoint storage, and the local and Slurm backends are always
// linked; the cloud object stores (build tag cloud: the AWS, GCP and Azure
// SDKs) and the Kubernetes backend (build tag kubernetes: client-go) only
// when asked for, since they are most of what a full build compiles and
// links. Without them, asking for one says how to build it in.

// withDrivers returns cfg with the drivers this binary linked.
func withDrivers(cfg server.Config) server.Config {
	cfg.CheckpointSchemes = checkpoint.Schemes{}
	for _, schemes := range []checkpoint.Schemes{blobstore.Schemes(), cloudSchemes()} {
		for name, open := range schemes {
			cfg.CheckpointSchemes[name] = open
		}
	}
	cfg.Backends = map[spec.PoolBackend]server.BackendFactory{spec.BackendKubernetes: kubeBackend}
	return cfg
}

// buildTags returns the driver tags this binary was built with.
func buildTags() []string {
	var tags []string
	for _, t := range []string{kubernetesTag, cloudTag} {
		if t != "" {
			tags = append(tags, t)
		}
	}
	return tags
}

// versionString is the version `virga --version` prints, with the drivers
// this binary was built with or without.
func versionString() string {
	var without []string
	if kubernetesTag == "" {
		without = append(without, "kubernetes")
	}
	if cloudTag == "" {
		without = append(without, "cloud")
	}
	if len(without) == 0 {
		return fmt.Sprintf("%s (with kubernetes and the cloud object stores)", version)
	}
	return fmt.Sprintf("%s (built without %s: go build -tags %s ./cmd/virga)", version,
		strings.Join(without, ", "), strings.Join(without, ","))
}

// notBuiltIn is the error of a driver this binary was built without.
func notBuiltIn(what, tag string) error {
	return fmt.Errorf("this virga was built without %s; build it with `go build -tags %s ./cmd/virga` (or -tags kubernetes,cloud for every driver)", what, tag)
}
