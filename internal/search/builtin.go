package search

import (
	"fmt"
	"sort"
	"strings"

	"github.com/virga-ml/virga/internal/spec"
)

// Names of the built-in searchers.
const (
	SingleName = "single" // one trial at the default point of the space
	GridName   = "grid"   // the cartesian product of every parameter's grid values
	RandomName = "random" // independent random samples of the space
)

// Builtin returns a new registry holding the built-in searchers: single, grid
// and random. The caller owns the map and may add its own factories to it.
func Builtin() Registry {
	return Registry{
		SingleName: NewSingle,
		GridName:   NewGrid,
		RandomName: NewRandom,
	}
}

// New makes the built-in searcher named by e.Searcher.Name, seeded with seed.
// It is Builtin().New(e, seed).
func New(e *spec.Experiment, seed uint64) (Searcher, error) {
	return Builtin().New(e, seed)
}

// New makes the searcher named by e.Searcher.Name from the registry, seeded
// with seed. An unknown name is an error that lists the known ones.
func (r Registry) New(e *spec.Experiment, seed uint64) (Searcher, error) {
	if e == nil {
		return nil, fmt.Errorf("making searcher: nil experiment")
	}
	f, ok := r[e.Searcher.Name]
	if !ok || f == nil {
		return nil, fmt.Errorf("unknown searcher %q: want one of %s", e.Searcher.Name, strings.Join(r.Names(), ", "))
	}
	s, err := f(e, seed)
	if err != nil {
		return nil, fmt.Errorf("making %s searcher: %w", e.Searcher.Name, err)
	}
	return s, nil
}

// Names returns the registered searcher names, sorted.
func (r Registry) Names() []string {
	names := make([]string, 0, len(r))
	for name := range r {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
