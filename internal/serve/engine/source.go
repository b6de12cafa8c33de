package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/virga-ml/virga/internal/serve"
)

// Source is where the engine finds models: the registry (with its files
// fetched to a local directory), or a directory laid out as a model
// repository.
type Source interface {
	// Resolve finds a model's version (version "" for the one its name
	// serves now) and the local directory holding its virga-model.json and
	// files. An unknown name or version is an error wrapping
	// serve.ErrModelNotFound.
	Resolve(ctx context.Context, name, version string) (Resolved, error)
	// Models lists the model names the source holds, sorted.
	Models(ctx context.Context) ([]string, error)
}

// Resolved is a model version found by a Source.
type Resolved struct {
	Name    string
	Version string
	Dir     string
	// Versions lists every version of the name the source holds, oldest first.
	Versions []string
}

// DirSource is a model repository in Triton's layout:
// <Root>/<model>/<version>/virga-model.json. A model's versions are its
// subdirectories holding a manifest, ordered as numbers when they all are
// (Triton's versions are positive integers), else as strings; the last is
// the one its name serves.
type DirSource struct {
	Root string
}

var _ Source = DirSource{}

// Resolve implements Source.
func (s DirSource) Resolve(ctx context.Context, name, version string) (Resolved, error) {
	if !validName(name) {
		return Resolved{}, fmt.Errorf("%w: %q is not a model name (a directory name of %s)", serve.ErrModelNotFound, name, s.Root)
	}
	if version != "" && !validName(version) {
		return Resolved{}, fmt.Errorf("%w: %q is not a version of %s", serve.ErrModelNotFound, version, name)
	}
	versions, err := s.versions(name)
	if err != nil {
		return Resolved{}, err
	}
	if len(versions) == 0 {
		return Resolved{}, fmt.Errorf("%w: %s: no version directory holding %s in %s", serve.ErrModelNotFound, name, serve.ManifestFile, filepath.Join(s.Root, name))
	}
	if version == "" {
		version = versions[len(versions)-1]
	} else if !slices.Contains(versions, version) {
		return Resolved{}, fmt.Errorf("%w: %s has no version %s (it has %s)", serve.ErrModelNotFound, name, version, strings.Join(versions, ", "))
	}
	return Resolved{Name: name, Version: version, Dir: filepath.Join(s.Root, name, version), Versions: versions}, nil
}

// Models implements Source.
func (s DirSource) Models(ctx context.Context) ([]string, error) {
	ents, err := os.ReadDir(s.Root)
	if err != nil {
		return nil, fmt.Errorf("model repository: %w", err)
	}
	var names []string
	for _, e := range ents {
		if !e.IsDir() || !validName(e.Name()) {
			continue
		}
		if vs, err := s.versions(e.Name()); err == nil && len(vs) > 0 {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

func (s DirSource) versions(name string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(s.Root, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s (no directory %s)", serve.ErrModelNotFound, name, filepath.Join(s.Root, name))
	}
	if err != nil {
		return nil, fmt.Errorf("model repository: %w", err)
	}
	var vs []string
	numeric := true
	for _, e := range ents {
		if !e.IsDir() || !validName(e.Name()) {
			continue
		}
		if _, err := os.Stat(filepath.Join(s.Root, name, e.Name(), serve.ManifestFile)); err != nil {
			continue
		}
		if _, err := strconv.ParseUint(e.Name(), 10, 63); err != nil {
			numeric = false
		}
		vs = append(vs, e.Name())
	}
	slices.SortFunc(vs, func(a, b string) int {
		if numeric {
			x, _ := strconv.ParseUint(a, 10, 63)
			y, _ := strconv.ParseUint(b, 10, 63)
			if x != y {
				if x < y {
					return -1
				}
				return 1
			}
		}
		return strings.Compare(a, b)
	})
	return vs, nil
}

// validName: one path element, not hidden.
func validName(s string) bool {
	return s != "" && !strings.ContainsAny(s, `/\`) && !strings.HasPrefix(s, ".") && s == filepath.Clean(s)
}

// ReadManifest reads dir's virga-model.json, naming the file and field at
// fault.
func ReadManifest(dir string) (serve.Manifest, error) {
	path := filepath.Join(dir, serve.ManifestFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return serve.Manifest{}, err
	}
	m, err := DecodeManifest(data)
	if err != nil {
		return serve.Manifest{}, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}
