package server

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/spec"
)

// TestCapacityFileBackends: a server runs the pools of one backend; a file
// that mixes them, names sim, or names a backend the binary did not link
// (Config.Backends) is refused with the file and position.
func TestCapacityFileBackends(t *testing.T) {
	for _, c := range []struct{ name, pools, want string }{
		{"mixed", `
  - {name: here, node: {cpu: 1}, price: 0}
  - {name: hpc, backend: slurm, node: {cpu: 1}, price: 0}`, "cap.yaml:3:5: pools[hpc].backend: pool \"hpc\" is for backend slurm but an earlier one is for local"},
		{"sim", `
  - {name: s, backend: sim, node: {cpu: 1}, price: 0}`, "cap.yaml:2:5: pools[s].backend: pool \"s\" is for backend sim"},
		{"kubernetes not linked", `
  - {name: k, backend: kubernetes, node: {cpu: 1}, price: 0}`, `cap.yaml:2:5: pools[k].backend: pool "k" is for backend kubernetes, which this server was built without`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			capFile := filepath.Join(dir, "cap.yaml")
			if err := os.WriteFile(capFile, []byte("pools:"+c.pools+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			s, err := Start(context.Background(), Config{DataDir: filepath.Join(dir, "state"), CapacityFile: capFile})
			if err == nil {
				s.Close()
				t.Fatal("the server started; want it to refuse the capacity file")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q; want it to contain %q", err, c.want)
			}
		})
	}
}

// TestBackendFactory: the pools of a backend the binary linked are run by
// the backend its factory builds, given the server's configuration.
func TestBackendFactory(t *testing.T) {
	dir := t.TempDir()
	capFile := filepath.Join(dir, "cap.yaml")
	if err := os.WriteFile(capFile, []byte("pools:\n  - {name: k, backend: kubernetes, node: {cpu: 1}, price: 0}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	errBuilt := errors.New("factory called")
	var got []string
	factory := func(cfg *Config, c *spec.Capacity, log *slog.Logger) (backend.Backend, error) {
		got = append(got, cfg.KubeImage, c.Pools[0].Name)
		return nil, errBuilt
	}
	_, err := Start(context.Background(), Config{DataDir: filepath.Join(dir, "state"), CapacityFile: capFile, KubeImage: "img",
		Backends: map[spec.PoolBackend]BackendFactory{spec.BackendKubernetes: factory}})
	if !errors.Is(err, errBuilt) {
		t.Fatalf("Start: %v, want the factory's error", err)
	}
	if want := []string{"img", "k"}; !slices.Equal(got, want) {
		t.Errorf("the factory was given %v, want %v", got, want)
	}
}

// TestLoadCapacitySlurm: virga sim and virga estimate load a Slurm pool
// that gives everything without reading the cluster; one that leaves its
// shape to the partition needs scontrol, and says so when it is missing.
func TestLoadCapacitySlurm(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PATH", dir) // no scontrol
	full := filepath.Join(dir, "full.yaml")
	if err := os.WriteFile(full, []byte("pools:\n  - {name: spot, backend: slurm, node: {cpu: 2}, nodes: 2, market: spot, warning: 15s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, set, err := LoadCapacity(context.Background(), full, false)
	if err != nil {
		t.Fatal(err)
	}
	if p := set.Pools[0]; !p.Spot() || p.Warning != 15*time.Second || p.Billing.Billed(12*time.Second) != 12*time.Second || c.Pools[0].Resolved {
		t.Errorf("pool %+v", p)
	}
	if _, _, err := LoadCapacity(context.Background(), full, true); err == nil || !strings.Contains(err.Error(), "reading the Slurm partitions spot of its pools") {
		t.Errorf("checking against a cluster that cannot be read: %v", err)
	}
	short := filepath.Join(dir, "short.yaml")
	if err := os.WriteFile(short, []byte("pools:\n  - {name: spot, backend: slurm}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = LoadCapacity(context.Background(), short, false)
	if want := short + ": reading the Slurm partitions spot of its pools: scontrol show config: "; err == nil || !strings.HasPrefix(err.Error(), want) ||
		!strings.Contains(err.Error(), "a Slurm pool reads what it leaves out") {
		t.Errorf("error %v; want it to start with %q and say what is read", err, want)
	}
}
