package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store/column"
)

// modelRow is a model's versions and aliases. It stays once its name has
// been registered, so that version numbers are never reused.
type modelRow struct {
	last     int64         // the highest version ever given
	versions []*versionRow // by Version
	aliases  map[string]virga.ModelAlias
}

// versionRow is a stored version. Its signature, hyperparameters and metrics
// are kept encoded as the SQL stores keep them and decoded on each read: the
// registry is small and rarely read, and so they round-trip exactly alike.
type versionRow struct {
	v                virga.ModelVersion // Signature, HParams and Metrics unset
	sig, hp, metrics string
}

func (r *versionRow) decode() (*virga.ModelVersion, error) {
	v := r.v
	var err error
	if v.Signature, err = column.DecSignature(r.sig); err != nil {
		return nil, fmt.Errorf("model %s version %d: %w", v.Name, v.Version, err)
	}
	if v.HParams, err = column.DecHParams(r.hp); err != nil {
		return nil, fmt.Errorf("model %s version %d: %w", v.Name, v.Version, err)
	}
	if v.Metrics, err = column.DecValues(r.metrics); err != nil {
		return nil, fmt.Errorf("model %s version %d: %w", v.Name, v.Version, err)
	}
	return &v, nil
}

// RegisterModelVersion stores v as the next version of its model and sets v.Version.
func (s *Store) RegisterModelVersion(ctx context.Context, v *virga.ModelVersion) error {
	var enc column.Encoder
	created := storedTime(&enc, "created_at", v.CreatedAt)
	sig, hp, metrics := enc.Signature(v.Signature), enc.HParams(v.HParams), enc.Values(v.Metrics)
	if enc.Err != nil {
		return fmt.Errorf("registering model %s: %w", v.Name, enc.Err)
	}
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("registering model %s: %w", v.Name, err)
	}
	defer s.mu.Unlock()
	m := s.models[v.Name]
	if m == nil {
		m = &modelRow{aliases: map[string]virga.ModelAlias{}}
		s.models[v.Name] = m
	}
	m.last++
	row := &versionRow{v: *v, sig: sig, hp: hp, metrics: metrics}
	row.v.Version, row.v.CreatedAt = m.last, created
	row.v.Signature, row.v.HParams, row.v.Metrics = virga.ModelSignature{}, nil, nil
	m.versions = append(m.versions, row) // m.last is above every stored version
	s.filesRefs[v.FilesID]++
	v.Version = m.last
	return nil
}

// Models lists the models that have at least one version, by name.
func (s *Store) Models(ctx context.Context) ([]virga.Model, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, fmt.Errorf("listing models: %w", err)
	}
	defer s.mu.RUnlock()
	var out []virga.Model
	for name, m := range s.models {
		if len(m.versions) == 0 {
			continue
		}
		o := virga.Model{Name: name, Versions: len(m.versions), Latest: m.versions[len(m.versions)-1].v.Version}
		for _, r := range m.versions {
			if r.v.CreatedAt.After(o.UpdatedAt) {
				o.UpdatedAt = r.v.CreatedAt
			}
		}
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b virga.Model) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// ModelVersions lists a model's versions, oldest first.
func (s *Store) ModelVersions(ctx context.Context, name string) ([]*virga.ModelVersion, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, fmt.Errorf("listing model versions: %w", err)
	}
	defer s.mu.RUnlock()
	m := s.models[name]
	if m == nil {
		return nil, nil
	}
	var out []*virga.ModelVersion
	for _, r := range m.versions {
		v, err := r.decode()
		if err != nil {
			return nil, fmt.Errorf("listing model versions: %w", err)
		}
		out = append(out, v)
	}
	return out, nil
}

// ModelVersion returns one version of a model; 0 means its newest.
func (s *Store) ModelVersion(ctx context.Context, name string, version int64) (*virga.ModelVersion, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, fmt.Errorf("reading model %s version %d: %w", name, version, err)
	}
	defer s.mu.RUnlock()
	m := s.models[name]
	if version == 0 {
		if m == nil || len(m.versions) == 0 {
			return nil, fmt.Errorf("model %s: no version: %w", name, virga.ErrNotFound)
		}
		return m.versions[len(m.versions)-1].decode()
	}
	r := m.version(version)
	if r == nil {
		return nil, fmt.Errorf("model %s version %d: %w", name, version, virga.ErrNotFound)
	}
	return r.decode()
}

// version returns the stored version, or nil (m may be nil).
func (m *modelRow) version(version int64) *versionRow {
	if m == nil {
		return nil
	}
	i, found := slices.BinarySearchFunc(m.versions, version, func(r *versionRow, v int64) int { return cmp.Compare(r.v.Version, v) })
	if !found {
		return nil
	}
	return m.versions[i]
}

// ModelAliases lists a model's aliases, or every model's for name "".
func (s *Store) ModelAliases(ctx context.Context, name string) ([]virga.ModelAlias, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, fmt.Errorf("listing model aliases: %w", err)
	}
	defer s.mu.RUnlock()
	var out []virga.ModelAlias
	for n, m := range s.models {
		if name == "" || n == name {
			for _, a := range m.aliases {
				out = append(out, a)
			}
		}
	}
	slices.SortFunc(out, func(a, b virga.ModelAlias) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Alias, b.Alias))
	})
	return out, nil
}

// SetModelAlias creates or moves an alias.
func (s *Store) SetModelAlias(ctx context.Context, a virga.ModelAlias) error {
	var enc column.Encoder
	a.UpdatedAt = storedTime(&enc, "updated_at", a.UpdatedAt)
	if enc.Err != nil {
		return fmt.Errorf("setting alias %s@%s: %w", a.Name, a.Alias, enc.Err)
	}
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("setting alias %s@%s: %w", a.Name, a.Alias, err)
	}
	defer s.mu.Unlock()
	m := s.models[a.Name]
	if m.version(a.Version) == nil {
		return fmt.Errorf("setting alias %s@%s: model %s has no version %d: %w", a.Name, a.Alias, a.Name, a.Version, virga.ErrNotFound)
	}
	m.aliases[a.Alias] = a
	return nil
}

// DeleteModelAlias removes an alias.
func (s *Store) DeleteModelAlias(ctx context.Context, name, alias string) error {
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("deleting alias %s@%s: %w", name, alias, err)
	}
	defer s.mu.Unlock()
	m := s.models[name]
	if m == nil {
		return fmt.Errorf("deleting alias %s@%s: no such alias: %w", name, alias, virga.ErrNotFound)
	}
	if _, ok := m.aliases[alias]; !ok {
		return fmt.Errorf("deleting alias %s@%s: no such alias: %w", name, alias, virga.ErrNotFound)
	}
	delete(m.aliases, alias)
	return nil
}

// DeleteModelVersion removes a version that no alias points at.
func (s *Store) DeleteModelVersion(ctx context.Context, name string, version int64) (filesID string, shared bool, err error) {
	if err := s.lock(ctx); err != nil {
		return "", false, fmt.Errorf("deleting model %s version %d: %w", name, version, err)
	}
	defer s.mu.Unlock()
	m := s.models[name]
	r := m.version(version)
	if r == nil {
		return "", false, fmt.Errorf("deleting model %s version %d: no such version: %w", name, version, virga.ErrNotFound)
	}
	var aliases []string
	for _, a := range m.aliases {
		if a.Version == version {
			aliases = append(aliases, name+"@"+a.Alias)
		}
	}
	if len(aliases) > 0 {
		slices.Sort(aliases)
		return "", false, fmt.Errorf("deleting model %s version %d: %w", name, version, aliasesConflict(aliases))
	}
	m.versions = slices.DeleteFunc(m.versions, func(x *versionRow) bool { return x == r })
	filesID = r.v.FilesID
	if s.filesRefs[filesID]--; s.filesRefs[filesID] == 0 {
		delete(s.filesRefs, filesID)
	}
	return filesID, s.filesRefs[filesID] > 0, nil
}

// aliasesConflict is the error of deleting a version that aliases point at.
func aliasesConflict(aliases []string) error {
	it, s := "them", ""
	if len(aliases) == 1 {
		it, s = "it", "s"
	}
	return fmt.Errorf("%s still point%s at it (move or delete %s first): %w", strings.Join(aliases, ", "), s, it, virga.ErrConflict)
}
