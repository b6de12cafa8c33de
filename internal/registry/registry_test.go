package registry_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/checkpoint"
	"github.com/virga-ml/virga/internal/checkpoint/blobstore"
	"github.com/virga-ml/virga/internal/registry"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/sqlite"
)

const manifest = `{"format":"virga.mlp/v1","file":"mlp.json","signature":{
 "inputs":[{"name":"pixels","datatype":"FP32","shape":[-1,64]}],
 "outputs":[{"name":"probabilities","datatype":"FP32","shape":[-1,10]},{"name":"label","datatype":"INT64","shape":[-1]}]},
 "max_batch":64}`

// writeTree writes files (slash paths to contents) under dir.
func writeTree(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// readTree reads every regular file under dir (slash paths to contents).
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

type fixture struct {
	st    store.Store
	files checkpoint.Storage
	reg   *registry.Registry
	trial *virga.Trial
}

var now = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

// newFixture makes a registry over a real SQLite store and checkpoint
// storage (local, or an object store for blob), and a trial whose
// checkpoints at steps 1, 2 and 3 hold a model at steps 1 and 2 only.
func newFixture(t *testing.T, blob bool) *fixture {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "virga.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	loc := filepath.Join(t.TempDir(), "checkpoints")
	if blob {
		loc = "mem://"
	}
	files, err := checkpoint.OpenURL(ctx, loc, blobstore.Schemes())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { files.Close() })
	f := &fixture{st: st, files: files, reg: registry.New(st, files, func() time.Time { return now })}
	e := &virga.Experiment{Name: "digits", State: virga.ExperimentCompleted, SpecFile: "e.yaml", CreatedAt: now}
	if err := st.Apply(ctx, &store.Batch{Experiments: []*virga.Experiment{e}}); err != nil {
		t.Fatal(err)
	}
	f.trial = &virga.Trial{ExperimentID: e.ID, Seq: 1, State: virga.TrialCompleted, HParams: map[string]any{"lr": 0.1}, CreatedAt: now}
	if err := st.Apply(ctx, &store.Batch{Trials: []*virga.Trial{f.trial}}); err != nil {
		t.Fatal(err)
	}
	var b store.Batch
	for step := int64(1); step <= 3; step++ {
		dir := t.TempDir()
		tree := map[string]string{"model.ckpt": fmt.Sprint("weights at ", step)}
		if step < 3 {
			tree["model/virga-model.json"] = manifest
			tree["model/mlp.json"] = fmt.Sprint(`{"step":`, step, `}`)
		}
		writeTree(t, dir, tree)
		info, err := files.SaveFor(fmt.Sprint(f.trial.ID), dir)
		if err != nil {
			t.Fatal(err)
		}
		b.Checkpoints = append(b.Checkpoints, virga.Checkpoint{ID: info.ID, TrialID: f.trial.ID, Step: step, Size: info.Size, Files: info.Files, Time: now})
		b.Metrics = append(b.Metrics, virga.Metric{TrialID: f.trial.ID, Step: step, Values: map[string]float64{"val_accuracy": 0.5 + float64(step)/10}, Time: now})
	}
	if err := st.Apply(ctx, &b); err != nil {
		t.Fatal(err)
	}
	return f
}

// download extracts version v's archive into a new directory and reads it.
func (f *fixture) download(t *testing.T, v *virga.ModelVersion) map[string]string {
	t.Helper()
	var buf bytes.Buffer
	if err := f.reg.WriteArchive(v, &buf); err != nil {
		t.Fatalf("WriteArchive: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "out")
	if _, err := checkpoint.ExtractArchive(&buf, dir, -1); err != nil {
		t.Fatal(err)
	}
	return readTree(t, dir)
}

func TestRegisterTrial(t *testing.T) {
	for _, blob := range []bool{false, true} {
		t.Run(fmt.Sprintf("blob=%v", blob), func(t *testing.T) {
			ctx := context.Background()
			f := newFixture(t, blob)
			v, err := f.reg.RegisterTrial(ctx, "digits", f.trial, "first")
			if err != nil {
				t.Fatalf("RegisterTrial: %v", err)
			}
			cks, _ := f.st.Checkpoints(ctx, f.trial.ID)
			// The latest checkpoint with a model is step 2's.
			if v.Version != 1 || v.Step != 2 || v.CheckpointID != cks[1].ID || v.TrialID != f.trial.ID ||
				v.ExperimentID != f.trial.ExperimentID || v.Format != "virga.mlp/v1" || v.Files != 2 ||
				v.Metrics["val_accuracy"] != 0.7 || v.HParams["lr"] != 0.1 || v.Description != "first" || !v.CreatedAt.Equal(now) {
				t.Errorf("registered %+v; want version 1 of step 2's checkpoint with its lineage", v)
			}
			if len(v.Signature.Inputs) != 1 || v.Signature.Inputs[0].Name != "pixels" || len(v.Signature.Outputs) != 2 {
				t.Errorf("signature %+v; want the manifest's", v.Signature)
			}
			if strings.Contains(strings.Join([]string{cks[0].ID, cks[1].ID, cks[2].ID}, " "), v.FilesID) {
				t.Errorf("files ID %s is a trial checkpoint's", v.FilesID)
			}
			// The model's files outlive the trial's checkpoints (retention).
			for _, ck := range cks {
				if err := f.files.Delete(ck.ID); err != nil {
					t.Fatal(err)
				}
			}
			want := map[string]string{"virga-model.json": manifest, "mlp.json": `{"step":2}`}
			if got := f.download(t, v); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("downloaded %v, want %v", got, want)
			}
		})
	}
}

func TestRegisterTrialWithoutModel(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, false)
	other := &virga.Trial{ExperimentID: f.trial.ExperimentID, Seq: 2, State: virga.TrialCompleted, CreatedAt: now}
	if err := f.st.Apply(ctx, &store.Batch{Trials: []*virga.Trial{other}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"model.ckpt": "no model here"})
	info, _ := f.files.SaveFor("2", dir)
	if err := f.st.Apply(ctx, &store.Batch{Checkpoints: []virga.Checkpoint{{ID: info.ID, TrialID: other.ID, Step: 1, Time: now}}}); err != nil {
		t.Fatal(err)
	}
	_, err := f.reg.RegisterTrial(ctx, "digits", other, "")
	if !errors.Is(err, registry.ErrNoModel) || !errors.Is(err, virga.ErrConflict) || !strings.Contains(err.Error(), "none of its 1 checkpoints has a model/ folder") {
		t.Errorf("RegisterTrial(no model) = %v; want ErrNoModel saying so", err)
	}
	if ms, _ := f.st.Models(ctx); len(ms) != 0 {
		t.Errorf("models after a failed registration: %v", ms)
	}
}

func TestDeleteVersionKeepsSharedFiles(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, false)
	v1, err := f.reg.RegisterTrial(ctx, "digits", f.trial, "")
	if err != nil {
		t.Fatal(err)
	}
	v2, err := f.reg.RegisterTrial(ctx, "copy", f.trial, "")
	if err != nil {
		t.Fatal(err)
	}
	if v1.FilesID != v2.FilesID {
		t.Fatalf("equal models got files %s and %s; want one copy", v1.FilesID, v2.FilesID)
	}
	path := f.files.(*checkpoint.Store).Path(v1.FilesID)
	if _, err := f.reg.SetAlias(ctx, "digits", "prod", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := f.reg.DeleteVersion(ctx, "digits", 1); !errors.Is(err, virga.ErrConflict) || !strings.Contains(err.Error(), "digits@prod") {
		t.Errorf("DeleteVersion(aliased) = %v; want a conflict naming digits@prod", err)
	}
	if err := f.st.DeleteModelAlias(ctx, "digits", "prod"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.reg.DeleteVersion(ctx, "digits", 1); err != nil {
		t.Fatalf("DeleteVersion: %v", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("files shared with copy:1 were deleted: %v", err)
	}
	if _, err := f.reg.DeleteVersion(ctx, "copy", 1); err != nil {
		t.Fatalf("DeleteVersion: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("files of the last version using them still there: %v", err)
	}
}

func TestRegisterArchiveAndResolve(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, false)
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"virga-model.json": manifest, "mlp.json": "{}"})
	var buf bytes.Buffer
	if _, err := checkpoint.WriteArchive(&buf, dir); err != nil {
		t.Fatal(err)
	}
	v, err := f.reg.RegisterArchive(ctx, "digits", &buf, "by hand")
	if err != nil {
		t.Fatalf("RegisterArchive: %v", err)
	}
	if v.Version != 1 || v.TrialID != 0 || v.Description != "by hand" {
		t.Errorf("registered %+v", v)
	}
	if _, err := f.reg.RegisterTrial(ctx, "digits", f.trial, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := f.reg.SetAlias(ctx, "digits", "prod", 1); err != nil {
		t.Fatal(err)
	}
	for ref, want := range map[string]int64{"digits": 2, "digits:1": 1, "digits@prod": 1} {
		r, _ := virga.ParseModelRef(ref)
		got, err := f.reg.Resolve(ctx, r)
		if err != nil || got.Version != want {
			t.Errorf("Resolve(%s) = %v, %v; want version %d", ref, got, err, want)
		}
	}
	for ref, msg := range map[string]string{"nothing": "no model named nothing", "digits:9": "model digits version 9",
		"digits@dev": `no alias "dev"`} {
		r, _ := virga.ParseModelRef(ref)
		if _, err := f.reg.Resolve(ctx, r); !errors.Is(err, virga.ErrNotFound) || !strings.Contains(err.Error(), msg) {
			t.Errorf("Resolve(%s) = %v; want not found saying %q", ref, err, msg)
		}
	}
}

func TestReadManifest(t *testing.T) {
	tests := []struct {
		name, manifest string
		wantErr        string // "" for none
	}{
		{"ok", manifest, ""},
		{"missing", "", "model/virga-model.json: missing"},
		{"not json", "{", "not a JSON object"},
		{"no format", `{"file":"mlp.json"}`, "format: missing"},
		{"no file", `{"format":"onnx"}`, `file: "": want`},
		{"outside", `{"format":"onnx","file":"../x"}`, `file: "../x"`},
		{"not plain", `{"format":"onnx","file":"./mlp.json"}`, `file: "./mlp.json": want the path in its plain form, "mlp.json"`},
		{"absent file", `{"format":"onnx","file":"model.onnx"}`, `no such regular file in model/`},
		{"no inputs", `{"format":"onnx","file":"mlp.json","signature":{"outputs":[{"name":"y","datatype":"FP32","shape":[-1]}]}}`, "signature.inputs: empty"},
		{"bad datatype", `{"format":"onnx","file":"mlp.json","signature":{"inputs":[{"name":"x","datatype":"FLOAT","shape":[-1]}],"outputs":[{"name":"y","datatype":"FP32","shape":[-1]}]}}`, `signature.inputs[0].datatype: "FLOAT"`},
		{"bad dim", `{"format":"onnx","file":"mlp.json","signature":{"inputs":[{"name":"x","datatype":"FP32","shape":[-2]}],"outputs":[{"name":"y","datatype":"FP32","shape":[-1]}]}}`, `signature.inputs[0].shape[0]: -2`},
		{"twice", `{"format":"onnx","file":"mlp.json","signature":{"inputs":[{"name":"x","datatype":"FP32","shape":[1]}],"outputs":[{"name":"y","datatype":"FP32","shape":[-1]},{"name":"y","datatype":"INT64","shape":[-1]}]}}`, `signature.outputs[1].name: "y" named twice`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tree := map[string]string{"mlp.json": "{}"}
			if tc.manifest != "" {
				tree["virga-model.json"] = tc.manifest
			}
			writeTree(t, dir, tree)
			_, err := registry.ReadManifest(dir, "model/")
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("ReadManifest: %v", err)
				}
				return
			}
			var me *registry.ManifestError
			if !errors.As(err, &me) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ReadManifest = %v; want a ManifestError containing %q", err, tc.wantErr)
			}
		})
	}
}

// FuzzReadManifest feeds ReadManifest arbitrary manifests: it never panics,
// an error is a ManifestError, and what it accepts is well formed.
func FuzzReadManifest(f *testing.F) {
	f.Add(manifest)
	f.Add(`{"format":"onnx","file":"mlp.json","signature":{"inputs":[{"name":"x","datatype":"FP32","shape":[-1]}],"outputs":[{"name":"y","datatype":"INT64","shape":[]}]}}`)
	f.Add(`{"format":"onnx","file":"./sub/../mlp.json"}`)
	f.Add(`[]`)
	dir := f.TempDir()
	writeTree(f, dir, map[string]string{"mlp.json": "{}"})
	f.Fuzz(func(t *testing.T, data string) {
		if err := os.WriteFile(filepath.Join(dir, "virga-model.json"), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := registry.ReadManifest(dir, "model/")
		if err != nil {
			var me *registry.ManifestError
			if !errors.As(err, &me) {
				t.Fatalf("ReadManifest(%q) = %v; want a ManifestError", data, err)
			}
			return
		}
		if m.Format == "" || len(m.Signature.Inputs) == 0 || len(m.Signature.Outputs) == 0 || m.MaxBatch < 0 {
			t.Fatalf("ReadManifest(%q) accepted %+v", data, m)
		}
		if fi, err := os.Stat(filepath.Join(dir, m.File)); err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("ReadManifest(%q) accepted file %q, not a regular file in the directory", data, m.File)
		}
	})
}
