// Package registry is Virga's model registry: named models whose immutable
// versions are model directories (a virga-model.json and the files it
// names) copied from a trial's checkpoint or uploaded, kept in the
// checkpoint storage as content-addressed entries of their own, with their
// lineage and aliases in the store. It reads trials and checkpoints but
// never changes them, and it runs no model: serving is internal/serve's.
package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/checkpoint"
	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/store"
)

// ModelDir is the folder of a checkpoint directory that holds the trial's
// model, in the layout of a model directory (see ReadManifest).
const ModelDir = "model"

// FilesOwner scopes the content IDs of model files in the checkpoint
// storage: equal content gets an ID no trial's checkpoint has, so that
// checkpoint retention (keep_last) never deletes a model's files.
const FilesOwner = "virga.model"

// DefaultMaxUpload bounds the content of an uploaded model archive.
const DefaultMaxUpload = 8 << 30

// Errors of the registry, besides virga.ErrNotFound (no such model, version,
// alias, trial or experiment) and virga.ErrConflict.
var (
	// ErrNoModel means a trial has no checkpoint holding a model directory:
	// its trainer does not write model/ (wraps virga.ErrConflict).
	ErrNoModel = fmt.Errorf("no model in the trial's checkpoints: %w", virga.ErrConflict)
	// ErrNoFiles means the registry was made without checkpoint storage (a
	// read-only view of a store): model files can be neither read nor written.
	ErrNoFiles = errors.New("no checkpoint storage for model files here: start `virga server` on the data directory or pass --server URL")
)

// ManifestError is a model directory's virga-model.json that is missing or
// wrong: File names it (relative to what was registered), Field the part at
// fault.
type ManifestError struct {
	File  string
	Field string
	Msg   string
}

func (e *ManifestError) Error() string {
	if e.Field == "" {
		return e.File + ": " + e.Msg
	}
	return e.File + ": " + e.Field + ": " + e.Msg
}

// Files is the checkpoint storage as the registry uses it
// (checkpoint.Storage is one).
type Files interface {
	SaveFor(owner, src string) (checkpoint.Info, error)
	Restore(id, dst string) error
	Delete(id string) error
}

// pather is the optional capability of storage on the local file system
// (checkpoint.Store): a stored entry's directory, read in place.
type pather interface{ Path(id string) string }

// Registry registers, resolves and deletes model versions.
type Registry struct {
	st    store.Store
	files Files
	now   func() time.Time
	// MaxUpload bounds the content of an uploaded archive (DefaultMaxUpload).
	MaxUpload int64
	// mu serialises the saves and deletes of model files with the store
	// changes they go with, so that a version registered with files equal
	// to those of a version being deleted never loses them.
	mu sync.Mutex
}

// New returns a registry over st and the checkpoint storage files (nil:
// none, every use of files fails with ErrNoFiles); now is the clock (nil:
// time.Now).
func New(st store.Store, files Files, now func() time.Time) *Registry {
	if now == nil {
		now = time.Now
	}
	if files == nil {
		files = noFiles{}
	}
	return &Registry{st: st, files: files, now: now, MaxUpload: DefaultMaxUpload}
}

// Lineage is where a version comes from, and its description.
type Lineage struct {
	ExperimentID int64
	TrialID      int64
	Step         int64
	CheckpointID string
	HParams      map[string]any
	Metrics      map[string]float64
	Description  string
}

// datatypes are the datatypes a signature may name.
var datatypes = []serve.Datatype{serve.Bool, serve.Uint8, serve.Uint16, serve.Uint32, serve.Uint64, serve.Int8,
	serve.Int16, serve.Int32, serve.Int64, serve.FP16, serve.FP32, serve.FP64, serve.Bytes}

// ReadManifest reads and checks dir's virga-model.json: a format, a file
// that exists in dir (a relative path, inside it), and a signature of at
// least one input and one output, each named once, with a datatype of the
// Open Inference Protocol and dimensions >= -1. shown is how dir is named in
// errors (e.g. "model/"). Unknown fields are allowed, for later formats.
func ReadManifest(dir, shown string) (*serve.Manifest, error) {
	file := path.Join(shown, serve.ManifestFile)
	data, err := os.ReadFile(filepath.Join(dir, serve.ManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &ManifestError{File: file, Msg: "missing: a model directory holds a virga-model.json naming its format, file and signature (docs/models.md)"}
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", file, err)
	}
	var m serve.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, &ManifestError{File: file, Msg: "not a JSON object of the manifest: " + err.Error()}
	}
	bad := func(field, format string, args ...any) error {
		return &ManifestError{File: file, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if m.Format == "" {
		return nil, bad("format", `missing; want e.g. "onnx" or "virga.mlp/v1"`)
	}
	clean := path.Clean(m.File)
	if m.File == "" || path.IsAbs(m.File) || clean == ".." || strings.HasPrefix(clean, "../") || clean == "." {
		return nil, bad("file", "%q: want the model file's path relative to the directory, inside it", m.File)
	}
	if clean != m.File {
		return nil, bad("file", "%q: want the path in its plain form, %q", m.File, clean)
	}
	if fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(clean))); err != nil || !fi.Mode().IsRegular() {
		return nil, bad("file", "%q: no such regular file in %s", m.File, shown)
	}
	if m.MaxBatch < 0 {
		return nil, bad("max_batch", "%d: want 0 (no batching) or more", m.MaxBatch)
	}
	for _, side := range []struct {
		name  string
		specs []serve.TensorSpec
	}{{"signature.inputs", m.Signature.Inputs}, {"signature.outputs", m.Signature.Outputs}} {
		if len(side.specs) == 0 {
			return nil, bad(side.name, "empty: a model takes at least one input and gives at least one output")
		}
		seen := map[string]bool{}
		for i, ts := range side.specs {
			at := fmt.Sprintf("%s[%d]", side.name, i)
			switch {
			case ts.Name == "":
				return nil, bad(at+".name", "missing")
			case seen[ts.Name]:
				return nil, bad(at+".name", "%q named twice", ts.Name)
			case !slices.Contains(datatypes, ts.Datatype):
				return nil, bad(at+".datatype", "%q: want one of BOOL, UINT8..UINT64, INT8..INT64, FP16, FP32, FP64, BYTES", ts.Datatype)
			}
			seen[ts.Name] = true
			for j, d := range ts.Shape {
				if d < -1 {
					return nil, bad(fmt.Sprintf("%s.shape[%d]", at, j), "%d: want a size >= 0, or -1 for a variable dimension", d)
				}
			}
		}
	}
	return &m, nil
}

// signature converts a manifest's signature to the root package's type.
func signature(s serve.Signature) virga.ModelSignature {
	conv := func(specs []serve.TensorSpec) []virga.ModelTensor {
		out := make([]virga.ModelTensor, len(specs))
		for i, ts := range specs {
			out[i] = virga.ModelTensor{Name: ts.Name, Datatype: string(ts.Datatype), Shape: slices.Clone(ts.Shape)}
		}
		return out
	}
	return virga.ModelSignature{Inputs: conv(s.Inputs), Outputs: conv(s.Outputs)}
}

// RegisterDir registers the model directory dir as the next version of name.
// shown names dir in errors.
func (r *Registry) RegisterDir(ctx context.Context, name, dir, shown string, lin Lineage) (*virga.ModelVersion, error) {
	if err := virga.CheckModelName(name); err != nil {
		return nil, err
	}
	m, err := ReadManifest(dir, shown)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	info, err := r.files.SaveFor(FilesOwner, dir)
	if err != nil {
		return nil, fmt.Errorf("registering model %s: storing its files: %w", name, err)
	}
	v := &virga.ModelVersion{
		Name: name, FilesID: info.ID, Size: info.Size, Files: info.Files, Format: m.Format,
		Signature: signature(m.Signature), ExperimentID: lin.ExperimentID, TrialID: lin.TrialID, Step: lin.Step,
		CheckpointID: lin.CheckpointID, HParams: lin.HParams, Metrics: lin.Metrics, Description: lin.Description,
		CreatedAt: r.now().UTC(),
	}
	if err := r.st.RegisterModelVersion(ctx, v); err != nil {
		if shared, serr := r.filesUsed(ctx, info.ID); serr == nil && !shared {
			_ = r.files.Delete(info.ID)
		}
		return nil, err
	}
	return v, nil
}

// filesUsed reports whether any version has files id. Only the versions of
// the models listed are looked at, which is every version.
func (r *Registry) filesUsed(ctx context.Context, id string) (bool, error) {
	ms, err := r.st.Models(ctx)
	if err != nil {
		return false, err
	}
	for _, m := range ms {
		vs, err := r.st.ModelVersions(ctx, m.Name)
		if err != nil {
			return false, err
		}
		for _, v := range vs {
			if v.FilesID == id {
				return true, nil
			}
		}
	}
	return false, nil
}

// RegisterArchive registers the model directory in the tar archive read from
// src as the next version of name.
func (r *Registry) RegisterArchive(ctx context.Context, name string, src io.Reader, description string) (*virga.ModelVersion, error) {
	if err := virga.CheckModelName(name); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "virga-model-upload-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "model")
	if _, err := checkpoint.ExtractArchive(src, dir, r.MaxUpload); err != nil {
		return nil, err
	}
	return r.RegisterDir(ctx, name, dir, "the archive", Lineage{Description: description})
}

// RegisterTrial registers the model of trial t's latest checkpoint that has
// one (a model/ folder with a virga-model.json) as the next version of name,
// with the trial's lineage: its experiment, hyperparameters, the
// checkpoint's step and the metrics reported at that step. ErrNoModel if no
// checkpoint of the trial has one.
func (r *Registry) RegisterTrial(ctx context.Context, name string, t *virga.Trial, description string) (*virga.ModelVersion, error) {
	if err := virga.CheckModelName(name); err != nil {
		return nil, err
	}
	cks, err := r.st.Checkpoints(ctx, t.ID)
	if err != nil {
		return nil, err
	}
	for i := len(cks) - 1; i >= 0; i-- {
		ck := cks[i]
		dir, done, err := r.checkpointDir(ck.ID)
		if errors.Is(err, virga.ErrNotFound) {
			continue // deleted by retention since it was listed
		}
		if err != nil {
			return nil, err
		}
		modelDir := filepath.Join(dir, ModelDir)
		if fi, err := os.Stat(filepath.Join(modelDir, serve.ManifestFile)); err != nil || !fi.Mode().IsRegular() {
			done()
			continue
		}
		lin := Lineage{ExperimentID: t.ExperimentID, TrialID: t.ID, Step: ck.Step, CheckpointID: ck.ID,
			HParams: t.HParams, Description: description}
		ms, err := r.st.Metrics(ctx, store.MetricFilter{TrialID: t.ID, AfterStep: ck.Step - 1, Limit: 1})
		if err == nil && len(ms) == 1 && ms[0].Step == ck.Step {
			lin.Metrics = ms[0].Values
		}
		v, err := r.RegisterDir(ctx, name, modelDir, fmt.Sprintf("checkpoint %.12s of trial %d: model/", ck.ID, t.ID), lin)
		done()
		return v, err
	}
	return nil, fmt.Errorf("trial %d: none of its %d checkpoints has a %s/ folder holding %s: %w (the trainer writes its model there with each checkpoint; see docs/models.md)",
		t.ID, len(cks), ModelDir, serve.ManifestFile, ErrNoModel)
}

// checkpointDir returns a directory holding checkpoint id's files, read in
// place on local storage or restored into a temporary directory, and a
// function to call when done with it.
func (r *Registry) checkpointDir(id string) (string, func(), error) {
	if p, ok := r.files.(pather); ok {
		dir := p.Path(id)
		if fi, err := os.Stat(dir); dir == "" || err != nil || !fi.IsDir() {
			return "", nil, fmt.Errorf("checkpoint %s: %w", id, virga.ErrNotFound)
		}
		return dir, func() {}, nil
	}
	tmp, err := os.MkdirTemp("", "virga-model-*")
	if err != nil {
		return "", nil, err
	}
	done := func() { os.RemoveAll(tmp) }
	if err := r.files.Restore(id, tmp); err != nil {
		done()
		return "", nil, err
	}
	return tmp, done, nil
}

// Resolve returns the version ref names.
func (r *Registry) Resolve(ctx context.Context, ref virga.ModelRef) (*virga.ModelVersion, error) {
	version := ref.Version
	if ref.Alias != "" {
		as, err := r.st.ModelAliases(ctx, ref.Name)
		if err != nil {
			return nil, err
		}
		i := slices.IndexFunc(as, func(a virga.ModelAlias) bool { return a.Alias == ref.Alias })
		if i < 0 {
			return nil, fmt.Errorf("model %s has no alias %q: %w", ref.Name, ref.Alias, virga.ErrNotFound)
		}
		version = as[i].Version
	}
	v, err := r.st.ModelVersion(ctx, ref.Name, version)
	if err != nil && ref.Latest() && errors.Is(err, virga.ErrNotFound) {
		return nil, fmt.Errorf("no model named %s: %w", ref.Name, virga.ErrNotFound)
	}
	return v, err
}

// SetAlias points alias of model name at version.
func (r *Registry) SetAlias(ctx context.Context, name, alias string, version int64) (*virga.ModelAlias, error) {
	if err := virga.CheckModelName(name); err != nil {
		return nil, err
	}
	if err := virga.CheckAliasName(alias); err != nil {
		return nil, err
	}
	a := virga.ModelAlias{Name: name, Alias: alias, Version: version, UpdatedAt: r.now().UTC()}
	if err := r.st.SetModelAlias(ctx, a); err != nil {
		return nil, err
	}
	return &a, nil
}

// DeleteVersion deletes a version that no alias points at, and its files
// unless another version has the same.
func (r *Registry) DeleteVersion(ctx context.Context, name string, version int64) (*virga.ModelVersion, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, err := r.st.ModelVersion(ctx, name, version)
	if err != nil {
		return nil, err
	}
	files, shared, err := r.st.DeleteModelVersion(ctx, name, version)
	if err != nil {
		return nil, err
	}
	if !shared {
		if err := r.files.Delete(files); err != nil {
			return v, fmt.Errorf("model %s version %d is deleted, but not its files %s: %w", name, version, files, err)
		}
	}
	return v, nil
}

// WriteArchive writes version v's files to w as a tar archive of the model
// directory.
func (r *Registry) WriteArchive(v *virga.ModelVersion, w io.Writer) error {
	dir, done, err := r.checkpointDir(v.FilesID)
	if err != nil {
		return fmt.Errorf("model %s version %d: its files %s: %w", v.Name, v.Version, v.FilesID, err)
	}
	defer done()
	_, err = checkpoint.WriteArchive(w, dir)
	return err
}

// noFiles is the Files of a registry without checkpoint storage.
type noFiles struct{}

func (noFiles) SaveFor(string, string) (checkpoint.Info, error) { return checkpoint.Info{}, ErrNoFiles }
func (noFiles) Restore(string, string) error                    { return ErrNoFiles }
func (noFiles) Delete(string) error                             { return ErrNoFiles }
