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
	TPEName    = "tpe"    // tree-structured Parzen estimator

	ASHAName      = "asha"      // asynchronous successive halving
	HyperbandName = "hyperband" // brackets of successive halving
	MedianName    = "median"    // the median stopping rule
	CurveName     = "curve"     // learning-curve prediction

	PBTName = "pbt" // population based training

	AutoName = "auto" // a sampler and stopper chosen for the user (spec.AutoSearcher)
)

// Builtin returns a new registry holding the built-in searchers: the
// samplers single, grid, random and tpe, the stoppers asha, hyperband,
// median and curve (each with any sampler but single), pbt, and auto. The caller
// owns the map and may add its own factories to it.
func Builtin() Registry {
	return Registry{
		SingleName:    NewSingle,
		GridName:      NewGrid,
		RandomName:    NewRandom,
		TPEName:       newAdaptive,
		ASHAName:      newAdaptive,
		HyperbandName: newAdaptive,
		MedianName:    newAdaptive,
		CurveName:     newAdaptive,
		PBTName:       newPBT,
		AutoName:      newAuto,
	}
}

// newAuto makes the searcher auto stands for. The parser resolves auto to a
// sampler and a stopper when it reads the file; an experiment built in code
// with the bare name is resolved here the same way.
func newAuto(e *spec.Experiment, seed uint64) (Searcher, error) {
	if e.Searcher.Sampler == "" {
		c := *e
		c.Searcher = spec.AutoSearcher(e.Searcher.Int("max_resource", 0))
		e = &c
	}
	return newAdaptive(e, seed)
}

// New makes the built-in searcher named by e.Searcher.Name, seeded with seed.
// It is Builtin().New(e, seed).
func New(e *spec.Experiment, seed uint64) (Searcher, error) {
	return Builtin().New(e, seed)
}

// New makes the searcher of e.Searcher from the registry, seeded with seed:
// the stopper's factory when there is a stopper, else the one of its name.
// An unknown name is an error that lists the known ones.
func (r Registry) New(e *spec.Experiment, seed uint64) (Searcher, error) {
	if e == nil {
		return nil, fmt.Errorf("making searcher: nil experiment")
	}
	key := e.Searcher.Name
	if e.Searcher.Stopper != "" {
		key = e.Searcher.Stopper
	}
	f, ok := r[key]
	if !ok || f == nil {
		return nil, fmt.Errorf("unknown searcher %q: want one of %s", key, strings.Join(r.Names(), ", "))
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
