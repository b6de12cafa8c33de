package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCapacityFileBackends: a server runs the pools of one backend; a file
// that mixes them, names sim, or asks for Kubernetes without an image is
// refused with the file and position.
func TestCapacityFileBackends(t *testing.T) {
	for _, c := range []struct{ name, pools, want string }{
		{"mixed", `
  - {name: here, node: {cpu: 1}, price: 0}
  - {name: hpc, backend: slurm, node: {cpu: 1}, price: 0}`, "cap.yaml:3:5: pools[hpc].backend: pool \"hpc\" is for backend slurm but an earlier one is for local"},
		{"sim", `
  - {name: s, backend: sim, node: {cpu: 1}, price: 0}`, "cap.yaml:2:5: pools[s].backend: pool \"s\" is for backend sim"},
		{"kubernetes without an image", `
  - {name: k, backend: kubernetes, node: {cpu: 1}, price: 0}`, "need the trials' container image (--kube-image"},
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
