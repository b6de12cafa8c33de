package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDriversOfThisBuild: a server of this binary opens the checkpoint
// storage and runs the pools of the drivers it was built with; for one it
// was built without, `virga run` fails (exit 1) at once, before any trial,
// with the build command that links it. Run it with and without the build
// tags kubernetes and cloud (scripts/test.sh does).
func TestDriversOfThisBuild(t *testing.T) {
	exp, err := filepath.Abs("../../examples/digits-go/experiment-quick.yaml")
	if err != nil {
		t.Fatal(err)
	}
	runVirga := func(t *testing.T, args ...string) (string, int) {
		t.Helper()
		var out, errOut bytes.Buffer
		args = append(args, "--data-dir", filepath.Join(t.TempDir(), "state"), exp)
		code := run(context.Background(), append([]string{"run"}, args...), strings.NewReader(""), &out, &errOut)
		return errOut.String(), code
	}
	t.Run("cloud", func(t *testing.T) {
		for _, u := range []string{"s3://", "gs://", "azblob://"} {
			errOut, code := runVirga(t, "--checkpoints", u)
			want := u + `": no bucket named; want ` + u + "bucket-name"
			if cloudTag == "" {
				want = u + "\": this virga was built without the cloud object stores (s3://, gs://, azblob://); build it with `go build -tags cloud ./cmd/virga`"
			}
			if code != exitFailure || !strings.Contains(errOut, want) {
				t.Errorf("--checkpoints %s: exit %d, %q; want exit 1 and %q", u, code, errOut, want)
			}
		}
	})
	t.Run("kubernetes", func(t *testing.T) {
		capFile := filepath.Join(t.TempDir(), "cap.yaml")
		if err := os.WriteFile(capFile, []byte("pools:\n  - {name: k, backend: kubernetes, node: {cpu: 1}, price: 0}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		errOut, code := runVirga(t, "--capacity", capFile)
		want := capFile + ": pools of backend kubernetes need the trials' container image (--kube-image"
		if kubernetesTag == "" {
			want = capFile + ":2:5: pools[k].backend: pool \"k\" is for backend kubernetes: this virga was built without Kubernetes; build it with `go build -tags kubernetes ./cmd/virga`"
		}
		if code != exitFailure || !strings.Contains(errOut, want) {
			t.Errorf("exit %d, %q; want exit 1 and %q", code, errOut, want)
		}
	})
}
