package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// TestCoreLinksNoDriverSDK: the control loop, the API, the agent, the
// checkpoints and the server never link a cloud SDK or client-go, whatever
// the build tags; a plain build of virga links neither, a tagged one links
// the drivers of its tags.
func TestCoreLinksNoDriverSDK(t *testing.T) {
	sdks := map[string][]string{
		"kubernetes": {"k8s.io/client-go/"},
		"cloud":      {"github.com/aws/aws-sdk-go-v2/", "cloud.google.com/go/storage", "github.com/Azure/azure-sdk-for-go/"},
	}
	deps := func(t *testing.T, tags string, pkgs ...string) string {
		t.Helper()
		out, err := exec.Command("go", append([]string{"list", "-deps", "-tags", tags}, pkgs...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, out)
		}
		return string(out)
	}
	core := deps(t, "kubernetes,cloud", "../../internal/control", "../../internal/api", "../../internal/agent",
		"../../internal/checkpoint", "../../internal/server")
	binary := deps(t, strings.Join(buildTags(), ","), ".")
	for tag, prefixes := range sdks {
		linked := slices.Contains(buildTags(), tag)
		for _, p := range prefixes {
			if strings.Contains(core, "\n"+p) {
				t.Errorf("the core links %s*", p)
			}
			if got := strings.Contains(binary, "\n"+p); got != linked {
				t.Errorf("virga built with tags %v links %s*: %v, want %v", buildTags(), p, got, linked)
			}
		}
	}
}
