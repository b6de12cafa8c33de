package memory

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/column"
)

// Experiment returns a copy of one experiment with its spec and searcher state.
func (s *Store) Experiment(ctx context.Context, id int64) (*virga.Experiment, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, fmt.Errorf("reading experiment %d: %w", id, err)
	}
	defer s.mu.RUnlock()
	row := s.experiments[id]
	if row == nil {
		return nil, fmt.Errorf("experiment %d: %w", id, virga.ErrNotFound)
	}
	return copyExperiment(row), nil
}

// Experiments lists experiments, newest (highest ID) first.
func (s *Store) Experiments(ctx context.Context, f store.ExperimentFilter) ([]*virga.Experiment, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, fmt.Errorf("listing experiments: %w", err)
	}
	defer s.mu.RUnlock()
	var out []*virga.Experiment
	for i := len(s.expOrder) - 1; i >= 0 && (f.Limit <= 0 || len(out) < f.Limit); i-- {
		row := s.expOrder[i]
		if len(f.States) == 0 || slices.Contains(f.States, row.e.State) {
			out = append(out, copyExperiment(row))
		}
	}
	return out, nil
}

func copyExperiment(row *experimentRow) *virga.Experiment {
	e := row.e
	e.Spec, e.SearcherState = bytes.Clone(e.Spec), bytes.Clone(e.SearcherState)
	return &e
}

// Trial returns a copy of one trial.
func (s *Store) Trial(ctx context.Context, id int64) (*virga.Trial, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, fmt.Errorf("reading trial %d: %w", id, err)
	}
	defer s.mu.RUnlock()
	row := s.trials[id]
	if row == nil {
		return nil, fmt.Errorf("trial %d: %w", id, virga.ErrNotFound)
	}
	return copyTrial(row), nil
}

// Trials lists an experiment's trials ordered by Seq.
func (s *Store) Trials(ctx context.Context, experimentID int64) ([]*virga.Trial, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, fmt.Errorf("listing trials of experiment %d: %w", experimentID, err)
	}
	defer s.mu.RUnlock()
	er := s.experiments[experimentID]
	if er == nil || len(er.trials) == 0 {
		return nil, nil
	}
	// One allocation for all the structs: a long list is one block, not
	// one per trial.
	ts := make([]virga.Trial, len(er.trials))
	out := make([]*virga.Trial, len(er.trials))
	for i, row := range er.trials {
		ts[i] = row.t
		fillTrial(&ts[i])
		out[i] = &ts[i]
	}
	return out, nil
}

func copyTrial(row *trialRow) *virga.Trial {
	t := row.t
	fillTrial(&t)
	return &t
}

// fillTrial replaces the maps and pointers of a copied row by copies of
// their own.
func fillTrial(t *virga.Trial) {
	t.HParams = cloneHParams(t.HParams)
	t.Latest, t.Best = storedFloat(t.Latest), storedFloat(t.Best)
	t.Prediction = clonePrediction(t.Prediction)
}

// Attempt returns a copy of one attempt.
func (s *Store) Attempt(ctx context.Context, id int64) (*virga.Attempt, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, fmt.Errorf("reading attempt %d: %w", id, err)
	}
	defer s.mu.RUnlock()
	a := s.attempts[id]
	if a == nil {
		return nil, fmt.Errorf("attempt %d: %w", id, virga.ErrNotFound)
	}
	return copyAttempts([]*virga.Attempt{a}, nil)[0], nil
}

// Attempts lists a trial's attempts ordered by Number.
func (s *Store) Attempts(ctx context.Context, trialID int64) ([]*virga.Attempt, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, fmt.Errorf("listing attempts of trial %d: %w", trialID, err)
	}
	defer s.mu.RUnlock()
	tr := s.trials[trialID]
	if tr == nil {
		return nil, nil
	}
	return copyAttempts(tr.attempts, nil), nil
}

// ExperimentAttempts lists the attempts of an experiment's trials, ordered
// by trial ID and Number.
func (s *Store) ExperimentAttempts(ctx context.Context, experimentID int64) ([]*virga.Attempt, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, fmt.Errorf("listing attempts of experiment %d: %w", experimentID, err)
	}
	defer s.mu.RUnlock()
	er := s.experiments[experimentID]
	if er == nil {
		return nil, nil
	}
	trials := er.trials // ordered by Seq, which is ID order unless seqs were inserted out of order
	if !slices.IsSortedFunc(trials, byTrialID) {
		trials = slices.SortedFunc(slices.Values(trials), byTrialID)
	}
	var out []*virga.Attempt
	for _, tr := range trials {
		out = copyAttempts(tr.attempts, out)
	}
	return out, nil
}

func byTrialID(a, b *trialRow) int { return cmp.Compare(a.t.ID, b.t.ID) }

// LiveAttempts lists every attempt not in state EXITED, ordered by ID.
func (s *Store) LiveAttempts(ctx context.Context) ([]*virga.Attempt, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, fmt.Errorf("listing live attempts: %w", err)
	}
	defer s.mu.RUnlock()
	live := make([]*virga.Attempt, 0, len(s.live))
	for _, a := range s.live {
		live = append(live, a)
	}
	slices.SortFunc(live, func(a, b *virga.Attempt) int { return cmp.Compare(a.ID, b.ID) })
	return copyAttempts(live, nil), nil
}

// copyAttempts appends copies of as to out, in one allocation of structs.
func copyAttempts(as []*virga.Attempt, out []*virga.Attempt) []*virga.Attempt {
	if len(as) == 0 {
		return out
	}
	cs := make([]virga.Attempt, len(as))
	for i, a := range as {
		cs[i] = *a
		cs[i].ExitCode = cloneInt(a.ExitCode)
		out = append(out, &cs[i])
	}
	return out
}

// Metrics lists a trial's metrics ordered by step. It finds AfterStep by
// binary search and copies only the rows it returns.
func (s *Store) Metrics(ctx context.Context, f store.MetricFilter) ([]virga.Metric, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, fmt.Errorf("listing metrics of trial %d: %w", f.TrialID, err)
	}
	defer s.mu.RUnlock()
	tr := s.trials[f.TrialID]
	if tr == nil {
		return nil, nil
	}
	ms := tr.metrics
	i, found := slices.BinarySearchFunc(ms, f.AfterStep, func(m virga.Metric, step int64) int { return cmp.Compare(m.Step, step) })
	if found {
		i++
	}
	ms = ms[i:]
	if f.Limit > 0 && len(ms) > f.Limit {
		ms = ms[:f.Limit]
	}
	if len(ms) == 0 {
		return nil, nil
	}
	out := slices.Clone(ms)
	for i := range out {
		out[i].Values = maps.Clone(out[i].Values)
	}
	return out, nil
}

// Checkpoints lists a trial's checkpoints, oldest first (by Time, then by
// the order they were inserted).
func (s *Store) Checkpoints(ctx context.Context, trialID int64) ([]virga.Checkpoint, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, fmt.Errorf("listing checkpoints of trial %d: %w", trialID, err)
	}
	defer s.mu.RUnlock()
	tr := s.trials[trialID]
	if tr == nil || len(tr.ckpts) == 0 {
		return nil, nil
	}
	return slices.Clone(tr.ckpts), nil
}

// Events lists events ordered by ID. With an experiment or a trial it walks
// that one's index (the shorter of the two when both are given).
func (s *Store) Events(ctx context.Context, f store.EventFilter) ([]virga.Event, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, fmt.Errorf("listing events: %w", err)
	}
	defer s.mu.RUnlock()
	after := func(e virga.Event, id int64) int { return cmp.Compare(e.ID, id) }
	full := len(s.events) > 0 && f.ExperimentID == 0 && f.TrialID == 0
	if full {
		i, found := slices.BinarySearchFunc(s.events, f.AfterID, after)
		if found {
			i++
		}
		evs := s.events[i:]
		if f.Limit > 0 && len(evs) > f.Limit {
			evs = evs[:f.Limit]
		}
		if len(evs) == 0 {
			return nil, nil
		}
		return slices.Clone(evs), nil
	}
	var idx []int
	switch {
	case f.ExperimentID != 0 && f.TrialID != 0:
		idx = s.eventsByExp[f.ExperimentID]
		if byTrial := s.eventsByTrial[f.TrialID]; len(byTrial) < len(idx) {
			idx = byTrial
		}
	case f.ExperimentID != 0:
		idx = s.eventsByExp[f.ExperimentID]
	case f.TrialID != 0:
		idx = s.eventsByTrial[f.TrialID]
	}
	j, _ := slices.BinarySearchFunc(idx, f.AfterID, func(i int, id int64) int {
		if s.events[i].ID <= id {
			return -1
		}
		return 1
	})
	var out []virga.Event
	for _, i := range idx[j:] {
		if f.Limit > 0 && len(out) >= f.Limit {
			break
		}
		e := s.events[i]
		if (f.ExperimentID == 0 || e.ExperimentID == f.ExperimentID) && (f.TrialID == 0 || e.TrialID == f.TrialID) {
			out = append(out, e)
		}
	}
	return out, nil
}

// PutToken stores a token: it inserts it and sets its ID when ID is 0, and
// otherwise replaces the token of that ID (virga.ErrNotFound if none). A hash
// that another token already has is virga.ErrConflict.
func (s *Store) PutToken(ctx context.Context, t *store.Token) error {
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("storing token %q: %w", t.Name, err)
	}
	defer s.mu.Unlock()
	var enc column.Encoder
	created := storedTime(&enc, "created_at", t.CreatedAt)
	if enc.Err != nil {
		return fmt.Errorf("storing token %q: %w", t.Name, enc.Err)
	}
	row := &store.Token{ID: t.ID, Name: t.Name, Hash: bytes.Clone(t.Hash), CreatedAt: created}
	if t.ID == 0 {
		if _, taken := s.tokenByHash[string(t.Hash)]; taken {
			return duplicate("storing token %q", t.Name)
		}
		s.lastToken++
		row.ID = s.lastToken
		s.tokens[row.ID], s.tokenByHash[string(row.Hash)] = row, row.ID
		t.ID = row.ID
		return nil
	}
	old := s.tokens[t.ID]
	if old == nil {
		return fmt.Errorf("storing token %d: %w", t.ID, virga.ErrNotFound)
	}
	if id, taken := s.tokenByHash[string(t.Hash)]; taken && id != t.ID {
		return duplicate("storing token %d", t.ID)
	}
	delete(s.tokenByHash, string(old.Hash))
	s.tokens[row.ID], s.tokenByHash[string(row.Hash)] = row, row.ID
	return nil
}

// TokenByHash finds a token by the hash of its secret.
func (s *Store) TokenByHash(ctx context.Context, hash []byte) (*store.Token, error) {
	if err := s.rlock(ctx); err != nil {
		return nil, fmt.Errorf("reading token: %w", err)
	}
	defer s.mu.RUnlock()
	id, ok := s.tokenByHash[string(hash)]
	if !ok {
		return nil, fmt.Errorf("token: %w", virga.ErrNotFound)
	}
	t := *s.tokens[id]
	t.Hash = bytes.Clone(t.Hash)
	return &t, nil
}
