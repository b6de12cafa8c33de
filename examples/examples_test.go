// Package examples holds Virga's example trainers and experiments; this file
// only checks that every example experiment file still parses.
package examples

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/virga-ml/virga/internal/spec"
)

// TestExperimentFilesParse loads every examples/*/experiment*.yaml with the
// real parser and checks that each one runs from the repository root.
func TestExperimentFilesParse(t *testing.T) {
	files, err := filepath.Glob("*/experiment*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("found %d experiment files, want the digits-go ones at least", len(files))
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			exp, _, err := spec.Load(f)
			if err != nil {
				t.Fatalf("%v", err)
			}
			if exp.Entrypoint.Workdir != root {
				t.Errorf("workdir = %s, want the repository root %s", exp.Entrypoint.Workdir, root)
			}
			// A relative program or script in the command must exist from the repository root.
			for _, arg := range exp.Entrypoint.Argv {
				if p := filepath.Join(root, arg); filepath.Ext(arg) == ".py" {
					if _, err := os.Stat(p); err != nil {
						t.Errorf("command names %s: %v", arg, err)
					}
				}
			}
		})
	}
}
