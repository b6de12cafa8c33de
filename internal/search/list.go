package search

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/virga-ml/virga/internal/spec"
)

// defaultRandomTrials is the number of trials of the random searcher when the
// experiment sets no max_trials.
const defaultRandomTrials = 10

// pcgStream is the second PCG seed word; the experiment's seed is the first.
const pcgStream = 0x5669726761536561 // "VirgaSea"

// listSearcher is a searcher that proposes a fixed sequence of configurations
// without looking at results: single, grid and random are all of this kind.
// The i-th proposal (0-based) is gen(i); random generators draw from rng, whose
// state is saved in the snapshot.
type listSearcher struct {
	name  string
	limit int
	gen   func(i int) map[string]any
	pcg   *rand.PCG // nil when gen draws nothing
	rng   *rand.Rand

	proposed int
	trials   []trialRecord
	byTrial  map[int64]int // trial ID -> index in trials
	byID     map[string]int
}

var _ Searcher = (*listSearcher)(nil)

// trialRecord is what a searcher knows of one trial created from a proposal.
// Results are not kept: these searchers' proposals do not depend on them, and
// a state that metrics do not change needs no new snapshot per report.
type trialRecord struct {
	Proposal string `json:"proposal"`
	Trial    int64  `json:"trial"`
}

// listState is the JSON snapshot of a listSearcher.
type listState struct {
	Searcher string        `json:"searcher"`
	Limit    int           `json:"limit"`
	Proposed int           `json:"proposed"`
	Trials   []trialRecord `json:"trials"`
	RNG      []byte        `json:"rng,omitempty"` // PCG state (MarshalBinary), random searchers only
}

// NewSingle makes the single searcher: one trial in which every
// hyperparameter takes its default point. That is a const's value, else the
// parameter's Default (Parse requires one under this searcher); a spec built
// without defaults gets a categorical's first value and the midpoint of an
// int or float range (the geometric midpoint when the parameter is on a log
// scale; ints rounded to the nearest integer). MaxTrials is ignored; the seed
// is unused.
func NewSingle(e *spec.Experiment, seed uint64) (Searcher, error) {
	sp, err := newSpace(e)
	if err != nil {
		return nil, err
	}
	point := make(map[string]any, len(sp))
	for _, p := range sp {
		point[p.name] = p.center()
	}
	return newList(SingleName, 1, func(int) map[string]any { return cloneHParams(point) }, false, seed), nil
}

// NewGrid makes the grid searcher: the cartesian product of every
// hyperparameter's grid values (spec.Hyperparameter.GridValues), in the order
// of e.Order with the last name varying fastest. Ints take every integer of
// their range when Count is 0 and the range holds at most 100 integers (a
// wider range without Count is an error), or when the range holds at most
// Count integers; else Count evenly spaced points (log spaced when Log),
// rounded and deduplicated. Floats take Count points (default 5), both ends
// included; categoricals take their values; consts their value. It proposes
// min(grid size, MaxTrials) trials (the grid size when MaxTrials is 0). The
// seed is unused.
func NewGrid(e *spec.Experiment, seed uint64) (Searcher, error) {
	sp, err := newSpace(e)
	if err != nil {
		return nil, err
	}
	axes := make([][]any, len(sp))
	size := 1
	for i, p := range sp {
		vals, err := p.gridValues()
		if err != nil {
			return nil, err
		}
		axes[i] = vals
		size = satMul(size, len(vals))
	}
	limit := size
	if e.MaxTrials < 0 {
		return nil, fmt.Errorf("max_trials must not be negative, got %d", e.MaxTrials)
	}
	if e.MaxTrials > 0 {
		limit = min(limit, e.MaxTrials)
	}
	gen := func(i int) map[string]any {
		point := make(map[string]any, len(sp))
		for j := len(sp) - 1; j >= 0; j-- {
			n := len(axes[j])
			point[sp[j].name] = axes[j][i%n]
			i /= n
		}
		return point
	}
	return newList(GridName, limit, gen, false, seed), nil
}

// NewRandom makes the random searcher: MaxTrials trials (10 when MaxTrials is
// 0), each hyperparameter drawn independently. Ints are uniform integers
// (log-uniform when Log), floats uniform or log-uniform, categoricals a
// uniform choice, consts fixed. The draws come from a PCG generator seeded
// with seed, so equal seeds give equal searches.
func NewRandom(e *spec.Experiment, seed uint64) (Searcher, error) {
	sp, err := newSpace(e)
	if err != nil {
		return nil, err
	}
	limit := e.MaxTrials
	if limit < 0 {
		return nil, fmt.Errorf("max_trials must not be negative, got %d", e.MaxTrials)
	}
	if limit == 0 {
		limit = defaultRandomTrials
	}
	s := newList(RandomName, limit, nil, true, seed)
	s.gen = func(int) map[string]any {
		point := make(map[string]any, len(sp))
		for _, p := range sp { // file order, so that draws are reproducible
			point[p.name] = p.sample(s.rng)
		}
		return point
	}
	return s, nil
}

func newList(name string, limit int, gen func(int) map[string]any, random bool, seed uint64) *listSearcher {
	s := &listSearcher{
		name:    name,
		limit:   limit,
		gen:     gen,
		byTrial: map[int64]int{},
		byID:    map[string]int{},
	}
	if random {
		s.pcg = rand.NewPCG(seed, pcgStream)
		s.rng = rand.New(s.pcg)
	}
	return s
}

// Propose returns the next configuration, or ErrExhausted after the last.
func (s *listSearcher) Propose() (Proposal, error) {
	if s.proposed >= s.limit {
		return Proposal{}, ErrExhausted
	}
	hp := s.gen(s.proposed)
	s.proposed++
	return Proposal{ID: proposalID(s.proposed), HParams: hp}, nil
}

// Created records that proposal id became trial trialID. A repeated call for
// the same proposal replaces the trial ID.
func (s *listSearcher) Created(id string, trialID int64) {
	if i, ok := s.byID[id]; ok {
		delete(s.byTrial, s.trials[i].Trial)
		s.trials[i].Trial = trialID
		s.byTrial[trialID] = i
		return
	}
	s.trials = append(s.trials, trialRecord{Proposal: id, Trial: trialID})
	s.byID[id] = len(s.trials) - 1
	s.byTrial[trialID] = len(s.trials) - 1
}

// Observe changes nothing: these searchers never stop a trial.
func (s *listSearcher) Observe(trialID int64, step int64, value float64) Decision {
	return Continue
}

// Ended forgets the trial: these searchers' future proposals do not depend on
// results, so a snapshot holds only the trials still running and stays small
// however long the search.
func (s *listSearcher) Ended(trialID int64, outcome Outcome) {
	i, ok := s.byTrial[trialID]
	if !ok {
		return
	}
	s.trials = append(s.trials[:i], s.trials[i+1:]...)
	s.byTrial = make(map[int64]int, len(s.trials))
	s.byID = make(map[string]int, len(s.trials))
	for j, t := range s.trials {
		s.byTrial[t.Trial] = j
		s.byID[t.Proposal] = j
	}
}

// Snapshot returns the searcher's state as JSON, random source included.
func (s *listSearcher) Snapshot() ([]byte, error) {
	st := listState{
		Searcher: s.name,
		Limit:    s.limit,
		Proposed: s.proposed,
		Trials:   s.trials,
	}
	if st.Trials == nil {
		st.Trials = []trialRecord{}
	}
	if s.pcg != nil {
		b, err := s.pcg.MarshalBinary()
		if err != nil {
			return nil, fmt.Errorf("snapshotting %s searcher: saving random state: %w", s.name, err)
		}
		st.RNG = b
	}
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("snapshotting %s searcher: %w", s.name, err)
	}
	return b, nil
}

// Restore replaces the state with a snapshot taken from a searcher of the same
// kind and space. On error the state is unchanged.
func (s *listSearcher) Restore(snapshot []byte) error {
	var st listState
	if err := json.Unmarshal(snapshot, &st); err != nil {
		return fmt.Errorf("restoring %s searcher: %w", s.name, err)
	}
	if st.Searcher != s.name {
		return fmt.Errorf("restoring %s searcher: snapshot is of a %q searcher", s.name, st.Searcher)
	}
	if st.Limit != s.limit {
		return fmt.Errorf("restoring %s searcher: snapshot plans %d trials but this search plans %d (did the experiment change?)", s.name, st.Limit, s.limit)
	}
	if st.Proposed < 0 || st.Proposed > st.Limit {
		return fmt.Errorf("restoring %s searcher: snapshot says %d of %d trials were proposed", s.name, st.Proposed, st.Limit)
	}
	var pcg *rand.PCG
	if s.pcg != nil {
		if len(st.RNG) == 0 {
			return fmt.Errorf("restoring %s searcher: snapshot has no random state", s.name)
		}
		pcg = new(rand.PCG)
		if err := pcg.UnmarshalBinary(st.RNG); err != nil {
			return fmt.Errorf("restoring %s searcher: random state: %w", s.name, err)
		}
	}
	byTrial := make(map[int64]int, len(st.Trials))
	byID := make(map[string]int, len(st.Trials))
	for i, t := range st.Trials {
		if _, dup := byID[t.Proposal]; dup {
			return fmt.Errorf("restoring %s searcher: proposal %q appears twice", s.name, t.Proposal)
		}
		byID[t.Proposal] = i
		byTrial[t.Trial] = i
	}
	if pcg != nil {
		*s.pcg = *pcg // s.rng reads from s.pcg
	}
	s.proposed = st.Proposed
	s.trials = st.Trials
	s.byTrial = byTrial
	s.byID = byID
	return nil
}

// proposalID returns the ID of the n-th proposal (1-based): "r1", "r2", ...
func proposalID(n int) string {
	return "r" + strconv.Itoa(n)
}

func cloneHParams(m map[string]any) map[string]any {
	c := make(map[string]any, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// satMul returns a*b for non-negative a and b, or math.MaxInt on overflow.
func satMul(a, b int) int {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt/b {
		return math.MaxInt
	}
	return a * b
}
