// Package regsource serves models from Virga's model registry: it resolves
// the references `virga serve` was given (digits, digits@prod, digits:3) to
// versions, fetches each version's files once into a local cache keyed by
// their content ID, and watches aliases so that a move swaps what the
// engine serves.
package regsource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/client"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/checkpoint"
	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/engine"
)

// Registry is the part of the registry's API a Source reads
// (*client.Client is one).
type Registry interface {
	ModelVersion(ctx context.Context, ref virga.ModelRef) (*wire.ModelVersionView, error)
	Model(ctx context.Context, name string) (*wire.ModelView, error)
	DownloadModel(ctx context.Context, ref virga.ModelRef, w io.Writer) error
}

// Source is an engine.Source over the registry.
type Source struct {
	reg   Registry
	cache string
	// refs maps each served name to the reference it serves; with none
	// given, every registered model is served by name (its latest version).
	refs map[string]virga.ModelRef

	fetchMu sync.Mutex
	mu      sync.Mutex
	current map[string]int64 // the version each name was last resolved to
	failed  map[string]int64 // the version a swap to failed, not tried again
}

var _ engine.Source = (*Source)(nil)

// New returns a Source that serves refs (each under its model's name; one
// reference a name) from reg, with files fetched into the directory cache.
func New(reg Registry, cache string, refs []virga.ModelRef) (*Source, error) {
	s := &Source{reg: reg, cache: cache, refs: map[string]virga.ModelRef{}, current: map[string]int64{}, failed: map[string]int64{}}
	for _, r := range refs {
		if prev, dup := s.refs[r.Name]; dup {
			return nil, fmt.Errorf("--models: %s and %s both name model %s: serve one reference a name", prev, r, r.Name)
		}
		s.refs[r.Name] = r
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, fmt.Errorf("model cache: %w", err)
	}
	return s, nil
}

// Names lists the names given to New, sorted.
func (s *Source) Names() []string {
	names := make([]string, 0, len(s.refs))
	for n := range s.refs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Models implements engine.Source: the names served.
func (s *Source) Models(ctx context.Context) ([]string, error) {
	return s.Names(), nil
}

// ref is the reference a name and an engine version ("" for what the name
// serves now) stand for. Only the names given to New are served when some
// were (any version of each, by number); with none, every registered model.
func (s *Source) ref(name, version string) (virga.ModelRef, error) {
	r, listed := s.refs[name]
	if !listed && len(s.refs) > 0 {
		return virga.ModelRef{}, fmt.Errorf("%w: %s is not served here (serving %v)", serve.ErrModelNotFound, name, s.Names())
	}
	if !listed {
		if err := virga.CheckModelName(name); err != nil {
			return virga.ModelRef{}, fmt.Errorf("%w: %v", serve.ErrModelNotFound, err)
		}
		r = virga.ModelRef{Name: name}
	}
	if version != "" {
		n, err := strconv.ParseInt(version, 10, 64)
		if err != nil || n < 1 {
			return virga.ModelRef{}, fmt.Errorf("%w: %s has no version %q (versions are numbers from 1)", serve.ErrModelNotFound, name, version)
		}
		return virga.ModelRef{Name: name, Version: n}, nil
	}
	return r, nil
}

// lookup asks the registry for ref's version; an unknown one wraps
// serve.ErrModelNotFound.
func (s *Source) lookup(ctx context.Context, ref virga.ModelRef) (*virga.ModelVersion, error) {
	v, err := s.reg.ModelVersion(ctx, ref)
	if err != nil {
		if ce, ok := errors.AsType[*client.Error](err); ok && ce.Status == http.StatusNotFound {
			// The registry's message names the model and the version or
			// alias; its HTTP status is not the client's business.
			return nil, fmt.Errorf("%w: %s", serve.ErrModelNotFound, ce.Body.Error)
		}
		if errors.Is(err, virga.ErrNotFound) {
			return nil, fmt.Errorf("%w: %v", serve.ErrModelNotFound, err)
		}
		return nil, fmt.Errorf("registry: %s: %w", ref, err)
	}
	return v.ModelVersion, nil
}

// Resolve implements engine.Source.
func (s *Source) Resolve(ctx context.Context, name, version string) (engine.Resolved, error) {
	ref, err := s.ref(name, version)
	if err != nil {
		return engine.Resolved{}, err
	}
	v, err := s.lookup(ctx, ref)
	if err != nil {
		return engine.Resolved{}, err
	}
	dir, err := s.fetch(ctx, v)
	if err != nil {
		return engine.Resolved{}, err
	}
	if version == "" {
		s.mu.Lock()
		s.current[name] = v.Version
		s.mu.Unlock()
	}
	r := engine.Resolved{Name: name, Version: strconv.FormatInt(v.Version, 10), Dir: dir}
	if m, err := s.reg.Model(ctx, name); err == nil {
		for _, mv := range m.Versions {
			r.Versions = append(r.Versions, strconv.FormatInt(mv.Version, 10))
		}
	}
	return r, nil
}

// fetch returns the local directory of v's files, downloading them the
// first time; the directory is named by their content ID, so a restart or
// another version with the same files reuses it.
func (s *Source) fetch(ctx context.Context, v *virga.ModelVersion) (string, error) {
	if !checkpoint.ValidID(v.FilesID) {
		return "", fmt.Errorf("registry: %s:%d has files ID %q, not a content ID", v.Name, v.Version, v.FilesID)
	}
	dir := filepath.Join(s.cache, v.FilesID)
	s.fetchMu.Lock()
	defer s.fetchMu.Unlock()
	if _, err := os.Stat(filepath.Join(dir, serve.ManifestFile)); err == nil {
		return dir, nil
	}
	pr, pw := io.Pipe()
	pinned := virga.ModelRef{Name: v.Name, Version: v.Version}
	go func() { pw.CloseWithError(s.reg.DownloadModel(ctx, pinned, pw)) }()
	_, err := checkpoint.ExtractArchive(pr, dir, -1)
	pr.CloseWithError(errors.New("download ended"))
	if err != nil {
		return "", fmt.Errorf("fetching %s: %w", pinned, err)
	}
	return dir, nil
}

// Swapper is what Watch moves: the engine's Swap.
type Swapper func(ctx context.Context, name, version string) error

// Watch checks every interval, until ctx ends, what each served reference
// names now, and swaps a name to its new version when an alias moved (or a
// bare name got a new latest version). A version that fails to load leaves
// the old one serving; it is logged once and not tried again until the
// reference moves on. Names never resolved yet are left to load on demand.
func (s *Source) Watch(ctx context.Context, interval time.Duration, swap Swapper, logf func(format string, args ...any)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.Check(ctx, swap, logf)
	}
}

// Check is one pass of Watch.
func (s *Source) Check(ctx context.Context, swap Swapper, logf func(format string, args ...any)) {
	for _, name := range s.Names() {
		ref := s.refs[name]
		if ref.Version > 0 {
			continue // a pinned version never moves
		}
		s.mu.Lock()
		cur, resolved := s.current[name]
		failed := s.failed[name]
		s.mu.Unlock()
		if !resolved {
			continue
		}
		v, err := s.lookup(ctx, ref)
		if err != nil {
			if ctx.Err() == nil {
				logf("serve: %s: %v (still serving version %d)", ref, err, cur)
			}
			continue
		}
		if v.Version == cur || v.Version == failed {
			continue
		}
		if err := swap(ctx, name, strconv.FormatInt(v.Version, 10)); err != nil {
			logf("serve: %s moved to version %d, which failed to load (still serving version %d): %v", ref, v.Version, cur, err)
			s.mu.Lock()
			s.failed[name] = v.Version
			s.mu.Unlock()
			continue
		}
		logf("serve: %s now serves version %d (was %d)", ref, v.Version, cur)
		s.mu.Lock()
		s.current[name] = v.Version
		delete(s.failed, name)
		s.mu.Unlock()
	}
}
