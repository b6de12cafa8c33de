package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
)

// TestModelsEndToEnd trains the digits-go example, registers its best
// trial's model with a server running, aliases it, shows it three ways and
// downloads it: the files are the best trial's checkpoint's model/ folder.
func TestModelsEndToEnd(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	cmd := exec.Command(virgaBin, "run", "examples/digits-go/experiment-quick.yaml", "--data-dir", state)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("virga run: %v\n%s", err, out)
	}
	var best wire.BestView
	cli(t, state, &best, "best", "1", "--json")

	srv := startServer(t, state, freePort(t), "")
	defer srv.stop()

	var v virga.ModelVersion
	cli(t, state, &v, "models", "register", "digits", "--from-experiment", "1", "--best", "--description", "quick", "--json")
	if v.Name != "digits" || v.Version != 1 || v.TrialID != best.Trial.ID || v.ExperimentID != 1 ||
		v.CheckpointID != best.Trial.Checkpoint || v.Format != "virga.mlp/v1" || v.Metrics["val_loss"] == 0 {
		t.Fatalf("registered %+v; want version 1 from the best trial %d's checkpoint %s", v, best.Trial.ID, best.Trial.Checkpoint)
	}
	var a virga.ModelAlias
	cli(t, state, &a, "models", "alias", "digits", "prod", "1", "--json")
	if a.Version != 1 {
		t.Errorf("alias %+v", a)
	}
	for _, ref := range []string{"digits", "digits@prod", "digits:1"} {
		var show ModelShow
		cli(t, state, &show, "models", "show", ref, "--json")
		if show.Version.Version != 1 || !slices.Equal(show.Version.Aliases, []string{"prod"}) || len(show.Versions) != 1 {
			t.Errorf("show %s: %+v", ref, show)
		}
	}
	out, errOut, code := runCLI(t, state, "models", "show", "digits@prod", "--data-dir", state)
	if code != 0 || !strings.Contains(out, "model digits version 1 (prod)") || !strings.Contains(out, "pixels FP32[-1,64]") {
		t.Errorf("show: exit %d\n%s%s", code, out, errOut)
	}
	var ls []wire.ModelSummary
	cli(t, state, &ls, "models", "ls", "--json")
	if len(ls) != 1 || ls[0].Aliases["prod"] != 1 {
		t.Errorf("ls: %+v", ls)
	}

	// The files are the checkpoint's model/ folder.
	dl := filepath.Join(t.TempDir(), "digits")
	if out, errOut, code := runCLI(t, state, "models", "download", "digits@prod", dl, "--data-dir", state); code != 0 {
		t.Fatalf("download: exit %d\n%s%s", code, out, errOut)
	}
	want := treeOf(t, filepath.Join(state, "checkpoints", v.CheckpointID, "model"))
	if got := treeOf(t, dl); len(want) != 2 || !sameFiles(got, want) {
		t.Errorf("downloaded %d files %v, want the checkpoint's model/ %v", len(got), fileNames(got), fileNames(want))
	}

	// A version an alias points at is not deleted (exit 1, saying why); a
	// bad reference is a usage error (exit 2).
	if _, errOut, code := runCLI(t, state, "models", "rm", "digits:1", "--data-dir", state); code != 1 || !strings.Contains(errOut, "digits@prod still points at it") {
		t.Errorf("rm of an aliased version: exit %d: %s", code, errOut)
	}
	if _, errOut, code := runCLI(t, state, "models", "show", "digits:x", "--data-dir", state); code != 2 || !strings.Contains(errOut, "want a positive integer") {
		t.Errorf("show digits:x: exit %d: %s", code, errOut)
	}

	// Without a server, the data directory's registry is still readable.
	srv.stop()
	dl2 := filepath.Join(t.TempDir(), "again")
	if out, errOut, code := runCLI(t, state, "models", "download", "digits", dl2, "--data-dir", state); code != 0 {
		t.Fatalf("download without a server: exit %d\n%s%s", code, out, errOut)
	}
	if got := treeOf(t, dl2); !sameFiles(got, want) {
		t.Errorf("downloaded without a server: %v", fileNames(got))
	}
	if _, errOut, code := runCLI(t, state, "models", "alias", "digits", "dev", "1", "--data-dir", state); code != 1 || !strings.Contains(errOut, "no Virga server is running") {
		t.Errorf("alias without a server: exit %d: %s", code, errOut)
	}
}

// cli runs virga with --data-dir state, wants exit 0, and decodes its JSON into out.
func cli(t *testing.T, state string, out any, args ...string) {
	t.Helper()
	stdout, stderr, code := runCLI(t, state, append(args, "--data-dir", state)...)
	if code != 0 {
		t.Fatalf("virga %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
	}
	if err := json.Unmarshal([]byte(stdout), out); err != nil {
		t.Fatalf("virga %s: %v\n%s", strings.Join(args, " "), err, stdout)
	}
}

// treeOf reads every regular file under dir.
func treeOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameFiles(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func fileNames(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// TestModelsRegisterFromDirUsageErrors: a --from-dir that does not exist or
// is a file is a usage error (exit 2) saying which, not "not a directory"
// for both; the local check comes before any request to a server.
func TestModelsRegisterFromDirUsageErrors(t *testing.T) {
	state := t.TempDir()
	file := filepath.Join(state, "model.json")
	if err := os.WriteFile(file, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir  string
		want string // in the error
	}{
		{filepath.Join(state, "my-model"), "--from-dir " + filepath.Join(state, "my-model") + ": no such directory"},
		{file, "--from-dir " + file + ": a file, not a directory"},
	} {
		_, errOut, code := runCLI(t, state, "models", "register", "digits", "--from-dir", c.dir, "--data-dir", state)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("register --from-dir %s: exit %d, %q; want exit 2 saying %q", c.dir, code, errOut, c.want)
		}
	}
}
