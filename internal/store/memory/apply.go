package memory

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/column"
)

// Apply commits b whole or not at all (see store.Batch). On failure nothing
// is stored and the IDs of rows it would have inserted are left at 0.
//
// It changes the store as it goes, recording how to undo each change, and
// on the first error undoes them newest first, so a failed batch leaves the
// store (its ID counters included) as it found it.
func (s *Store) Apply(ctx context.Context, b *store.Batch) error {
	if b == nil || b.Empty() {
		return nil
	}
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("applying batch: %w", err)
	}
	defer s.mu.Unlock()
	w := writer{s: s}
	if err := w.apply(b); err != nil {
		for i := len(w.undo) - 1; i >= 0; i-- {
			w.undo[i]()
		}
		for _, p := range w.ids {
			*p = 0
		}
		return fmt.Errorf("applying batch: %w", err)
	}
	return nil
}

// writer applies one batch under the store's exclusive lock.
type writer struct {
	s    *Store
	undo []func() // how to undo each change made so far, oldest first
	ids  []*int64 // ID fields set by inserts, reset if the batch fails
}

// apply makes b's changes in the order store.Batch gives.
func (w *writer) apply(b *store.Batch) error {
	for _, e := range b.Experiments {
		if err := w.experiment(e); err != nil {
			return err
		}
	}
	for _, ne := range b.NewExperimentEvents {
		if ne.Event.ID == 0 && ne.Event.ExperimentID == 0 {
			ne.Event.ExperimentID = ne.Experiment.ID
			w.ids = append(w.ids, &ne.Event.ExperimentID)
		}
		if err := w.event(ne.Event); err != nil {
			return err
		}
	}
	for _, t := range b.Trials {
		if err := w.trial(t); err != nil {
			return err
		}
	}
	for _, na := range b.NewAttempts {
		if na.Attempt.ID == 0 && na.Attempt.TrialID == 0 {
			na.Attempt.TrialID = na.Trial.ID
			w.ids = append(w.ids, &na.Attempt.TrialID)
		}
		if err := w.attempt(na.Attempt); err != nil {
			return err
		}
	}
	for _, a := range b.Attempts {
		if err := w.attempt(a); err != nil {
			return err
		}
	}
	for _, c := range b.Checkpoints {
		if err := w.checkpoint(c); err != nil {
			return err
		}
	}
	for _, r := range b.DeleteCheckpoints {
		w.deleteCheckpoint(r)
	}
	for _, m := range b.Metrics {
		if err := w.metric(m); err != nil {
			return err
		}
	}
	for _, e := range b.Events {
		if err := w.event(e); err != nil {
			return err
		}
	}
	return nil
}

// setID sets an inserted row's ID field, to be reset if the batch fails.
func (w *writer) setID(p *int64, id int64) {
	*p = id
	w.ids = append(w.ids, p)
}

// missingParent is the error of inserting a row whose parent row is missing
// (a foreign key, to the SQL stores).
func missingParent(format string, args ...any) error {
	return fmt.Errorf("%s: a referenced row is missing: %w", fmt.Sprintf(format, args...), virga.ErrNotFound)
}

// duplicate is the error of inserting a row whose key is taken.
func duplicate(format string, args ...any) error {
	return fmt.Errorf("%s: duplicate: %w", fmt.Sprintf(format, args...), virga.ErrConflict)
}

func (w *writer) experiment(e *virga.Experiment) error {
	s := w.s
	var enc column.Encoder
	updated, ended := storedTime(&enc, "updated_at", e.UpdatedAt), storedTime(&enc, "ended_at", e.EndedAt)
	if e.ID == 0 {
		created := storedTime(&enc, "created_at", e.CreatedAt)
		if enc.Err != nil {
			return fmt.Errorf("experiment %q: %w", e.Name, enc.Err)
		}
		prev := s.lastExperiment
		s.lastExperiment++
		row := &experimentRow{e: virga.Experiment{ID: s.lastExperiment, Name: e.Name, State: e.State,
			Spec: cloneBytes(e.Spec), SpecFile: e.SpecFile, SearcherState: cloneBytes(e.SearcherState),
			Reason: e.Reason, Message: e.Message, CreatedAt: created, UpdatedAt: updated, EndedAt: ended}}
		s.experiments[row.e.ID] = row
		s.expOrder = append(s.expOrder, row)
		w.undo = append(w.undo, func() {
			delete(s.experiments, row.e.ID)
			s.expOrder = s.expOrder[:len(s.expOrder)-1]
			s.lastExperiment = prev
		})
		w.setID(&e.ID, row.e.ID)
		return nil
	}
	if enc.Err != nil {
		return fmt.Errorf("experiment %q: %w", e.Name, enc.Err)
	}
	row := s.experiments[e.ID]
	if row == nil {
		return fmt.Errorf("updating experiment %d: %w", e.ID, virga.ErrNotFound)
	}
	old := row.e
	row.e.State, row.e.SearcherState, row.e.Message = e.State, cloneBytes(e.SearcherState), e.Message
	row.e.UpdatedAt, row.e.EndedAt, row.e.Reason = updated, ended, e.Reason
	w.undo = append(w.undo, func() { row.e = old })
	return nil
}

func (w *writer) trial(t *virga.Trial) error {
	s := w.s
	var enc column.Encoder
	updated, ended := storedTime(&enc, "updated_at", t.UpdatedAt), storedTime(&enc, "ended_at", t.EndedAt)
	if t.ID == 0 {
		created := storedTime(&enc, "created_at", t.CreatedAt)
		// Hyperparameters go through JSON as in the SQL stores, so that
		// every number comes back a float64 there and here alike.
		hp, err := column.DecHParams(enc.HParams(t.HParams))
		if enc.Err == nil && err != nil {
			enc.Err = err
		}
		if enc.Err != nil {
			return fmt.Errorf("trial %d of experiment %d: %w", t.Seq, t.ExperimentID, enc.Err)
		}
		er := s.experiments[t.ExperimentID]
		if er == nil {
			return missingParent("inserting trial (experiment %d, seq %d)", t.ExperimentID, t.Seq)
		}
		i, found := slices.BinarySearchFunc(er.trials, t.Seq, func(r *trialRow, seq int) int { return cmp.Compare(r.t.Seq, seq) })
		if found {
			return duplicate("inserting trial (experiment %d, seq %d)", t.ExperimentID, t.Seq)
		}
		prev := s.lastTrial
		s.lastTrial++
		row := &trialRow{t: virga.Trial{ID: s.lastTrial, ExperimentID: t.ExperimentID, Seq: t.Seq, Request: t.Request,
			State: t.State, HParams: hp, Attempts: t.Attempts, Restarts: t.Restarts, Step: t.Step,
			Latest: storedFloat(t.Latest), Best: storedFloat(t.Best), BestStep: t.BestStep, Checkpoint: t.Checkpoint,
			Parent: t.Parent, ParentCheckpoint: t.ParentCheckpoint, ParentStep: t.ParentStep,
			Prediction: clonePrediction(t.Prediction), Reason: t.Reason, Message: t.Message,
			CreatedAt: created, UpdatedAt: updated, EndedAt: ended}}
		s.trials[row.t.ID] = row
		er.trials = slices.Insert(er.trials, i, row)
		w.undo = append(w.undo, func() {
			delete(s.trials, row.t.ID)
			er.trials = slices.Delete(er.trials, i, i+1)
			s.lastTrial = prev
		})
		w.setID(&t.ID, row.t.ID)
		return nil
	}
	if enc.Err != nil {
		return fmt.Errorf("trial %d of experiment %d: %w", t.Seq, t.ExperimentID, enc.Err)
	}
	row := s.trials[t.ID]
	if row == nil {
		return fmt.Errorf("updating trial (experiment %d, seq %d) %d: %w", t.ExperimentID, t.Seq, t.ID, virga.ErrNotFound)
	}
	old := row.t
	r := &row.t
	r.State, r.Attempts, r.Restarts, r.Step = t.State, t.Attempts, t.Restarts, t.Step
	r.Latest, r.Best, r.BestStep, r.Checkpoint = storedFloat(t.Latest), storedFloat(t.Best), t.BestStep, t.Checkpoint
	r.Message, r.UpdatedAt, r.EndedAt = t.Message, updated, ended
	r.Prediction, r.Reason = clonePrediction(t.Prediction), t.Reason
	w.undo = append(w.undo, func() { row.t = old })
	return nil
}

func (w *writer) attempt(a *virga.Attempt) error {
	s := w.s
	var enc column.Encoder
	started, ended := storedTime(&enc, "started_at", a.StartedAt), storedTime(&enc, "ended_at", a.EndedAt)
	cost, lost := enc.Dollars("cost", a.Cost), enc.Dollars("lost_cost", a.LostCost)
	if a.ID == 0 {
		created := storedTime(&enc, "created_at", a.CreatedAt)
		if enc.Err != nil {
			return fmt.Errorf("attempt %d of trial %d: %w", a.Number, a.TrialID, enc.Err)
		}
		tr := s.trials[a.TrialID]
		if tr == nil {
			return missingParent("inserting attempt (trial %d, number %d)", a.TrialID, a.Number)
		}
		i, found := slices.BinarySearchFunc(tr.attempts, a.Number, func(r *virga.Attempt, n int) int { return cmp.Compare(r.Number, n) })
		if found {
			return duplicate("inserting attempt (trial %d, number %d)", a.TrialID, a.Number)
		}
		prev := s.lastAttempt
		s.lastAttempt++
		row := &virga.Attempt{ID: s.lastAttempt, TrialID: a.TrialID, Number: a.Number, State: a.State,
			Outcome: a.Outcome, Backend: a.Backend, Pool: a.Pool, Cost: cost, LostCost: lost, PID: a.PID,
			ExitCode: cloneInt(a.ExitCode), Signal: a.Signal, Restored: a.Restored, Dir: a.Dir, Message: a.Message,
			CreatedAt: created, StartedAt: started, EndedAt: ended}
		s.attempts[row.ID] = row
		tr.attempts = slices.Insert(tr.attempts, i, row)
		if row.State != virga.AttemptExited {
			s.live[row.ID] = row
		}
		w.undo = append(w.undo, func() {
			delete(s.attempts, row.ID)
			delete(s.live, row.ID)
			tr.attempts = slices.Delete(tr.attempts, i, i+1)
			s.lastAttempt = prev
		})
		w.setID(&a.ID, row.ID)
		return nil
	}
	if enc.Err != nil {
		return fmt.Errorf("attempt %d of trial %d: %w", a.Number, a.TrialID, enc.Err)
	}
	row := s.attempts[a.ID]
	if row == nil {
		return fmt.Errorf("updating attempt (trial %d, number %d) %d: %w", a.TrialID, a.Number, a.ID, virga.ErrNotFound)
	}
	old := *row
	row.State, row.Outcome, row.PID, row.ExitCode = a.State, a.Outcome, a.PID, cloneInt(a.ExitCode)
	row.Signal, row.Restored, row.Dir, row.Message = a.Signal, a.Restored, a.Dir, a.Message
	row.StartedAt, row.EndedAt, row.Pool, row.Cost, row.LostCost = started, ended, a.Pool, cost, lost
	w.setLive(row, old.State != virga.AttemptExited)
	w.undo = append(w.undo, func() {
		wasLive := row.State != virga.AttemptExited
		*row = old
		w.setLive(row, wasLive)
	})
	return nil
}

// setLive puts a in the live set or takes it out, by its state; wasLive says
// whether it was in.
func (w *writer) setLive(a *virga.Attempt, wasLive bool) {
	switch live := a.State != virga.AttemptExited; {
	case live && !wasLive:
		w.s.live[a.ID] = a
	case !live && wasLive:
		delete(w.s.live, a.ID)
	}
}

// checkpoint inserts c once per (TrialID, ID): a repeat is ignored. Rows are
// kept ordered by Time, a new row after those of the same time.
func (w *writer) checkpoint(c virga.Checkpoint) error {
	var enc column.Encoder
	c.Time = storedTime(&enc, "time", c.Time)
	if enc.Err != nil {
		return fmt.Errorf("checkpoint %s of trial %d: %w", c.ID, c.TrialID, enc.Err)
	}
	tr := w.s.trials[c.TrialID]
	if tr == nil {
		return missingParent("inserting checkpoint %s of trial %d", c.ID, c.TrialID)
	}
	if slices.ContainsFunc(tr.ckpts, func(k virga.Checkpoint) bool { return k.ID == c.ID }) {
		return nil
	}
	i := len(tr.ckpts)
	for i > 0 && tr.ckpts[i-1].Time.After(c.Time) {
		i--
	}
	tr.ckpts = slices.Insert(tr.ckpts, i, c)
	w.undo = append(w.undo, func() { tr.ckpts = slices.Delete(tr.ckpts, i, i+1) })
	return nil
}

// deleteCheckpoint removes a checkpoint record; a missing one is no error.
func (w *writer) deleteCheckpoint(r store.CheckpointRef) {
	tr := w.s.trials[r.TrialID]
	if tr == nil {
		return
	}
	i := slices.IndexFunc(tr.ckpts, func(k virga.Checkpoint) bool { return k.ID == r.ID })
	if i < 0 {
		return
	}
	old := tr.ckpts[i]
	tr.ckpts = slices.Delete(tr.ckpts, i, i+1)
	w.undo = append(w.undo, func() { tr.ckpts = slices.Insert(tr.ckpts, i, old) })
}

// metric upserts m on (TrialID, Step). The next step of a trial, the usual
// case, is an append.
func (w *writer) metric(m virga.Metric) error {
	var enc column.Encoder
	m.Time = storedTime(&enc, "time", m.Time)
	if enc.Err != nil {
		return fmt.Errorf("metric of trial %d step %d: %w", m.TrialID, m.Step, enc.Err)
	}
	tr := w.s.trials[m.TrialID]
	if tr == nil {
		return missingParent("storing metric of trial %d step %d", m.TrialID, m.Step)
	}
	m.Values = maps.Clone(m.Values)
	n := len(tr.metrics)
	if n == 0 || tr.metrics[n-1].Step < m.Step {
		tr.metrics = append(tr.metrics, m)
		w.undo = append(w.undo, func() { tr.metrics = tr.metrics[:n] })
		return nil
	}
	i, found := slices.BinarySearchFunc(tr.metrics, m.Step, func(r virga.Metric, step int64) int { return cmp.Compare(r.Step, step) })
	if found {
		old := tr.metrics[i]
		tr.metrics[i] = m
		w.undo = append(w.undo, func() { tr.metrics[i] = old })
		return nil
	}
	tr.metrics = slices.Insert(tr.metrics, i, m)
	w.undo = append(w.undo, func() { tr.metrics = slices.Delete(tr.metrics, i, i+1) })
	return nil
}

// event inserts e, or replaces the stored event of e.ID whole.
func (w *writer) event(e *virga.Event) error {
	s := w.s
	var enc column.Encoder
	row := *e
	row.Time = storedTime(&enc, "time", e.Time)
	if enc.Err != nil {
		return fmt.Errorf("event %s: %w", e.Kind, enc.Err)
	}
	if e.ID == 0 {
		prev := s.lastEvent
		s.lastEvent++
		row.ID = s.lastEvent
		i := len(s.events)
		s.events = append(s.events, row)
		s.eventsByExp[row.ExperimentID] = append(s.eventsByExp[row.ExperimentID], i)
		s.eventsByTrial[row.TrialID] = append(s.eventsByTrial[row.TrialID], i)
		w.undo = append(w.undo, func() {
			s.events = s.events[:i]
			dropLast(s.eventsByExp, row.ExperimentID)
			dropLast(s.eventsByTrial, row.TrialID)
			s.lastEvent = prev
		})
		w.setID(&e.ID, row.ID)
		return nil
	}
	i, found := slices.BinarySearchFunc(s.events, e.ID, func(r virga.Event, id int64) int { return cmp.Compare(r.ID, id) })
	if !found {
		return fmt.Errorf("updating event %s %d: %w", e.Kind, e.ID, virga.ErrNotFound)
	}
	old := s.events[i]
	s.events[i] = row
	reindex(s.eventsByExp, i, old.ExperimentID, row.ExperimentID)
	reindex(s.eventsByTrial, i, old.TrialID, row.TrialID)
	w.undo = append(w.undo, func() {
		s.events[i] = old
		reindex(s.eventsByExp, i, row.ExperimentID, old.ExperimentID)
		reindex(s.eventsByTrial, i, row.TrialID, old.TrialID)
	})
	return nil
}

// dropLast removes the last index of key's list.
func dropLast(idx map[int64][]int, key int64) {
	l := idx[key][:len(idx[key])-1]
	if len(l) == 0 {
		delete(idx, key)
		return
	}
	idx[key] = l
}

// reindex moves event index i from key from's list to key to's, keeping
// both ordered.
func reindex(idx map[int64][]int, i int, from, to int64) {
	if from == to {
		return
	}
	if l := idx[from]; len(l) > 0 {
		if j, ok := slices.BinarySearch(l, i); ok {
			if l = slices.Delete(l, j, j+1); len(l) == 0 {
				delete(idx, from)
			} else {
				idx[from] = l
			}
		}
	}
	l := idx[to]
	j, _ := slices.BinarySearch(l, i)
	idx[to] = slices.Insert(l, j, i)
}

// storedTime is t as a SQL store reads it back: zero stays zero, others
// come back in UTC to the nanosecond, and a time outside what int64 Unix
// nanoseconds hold is refused (recorded in enc).
func storedTime(enc *column.Encoder, what string, t time.Time) time.Time {
	if t.IsZero() || enc.Time(what, t) == nil {
		return time.Time{}
	}
	return time.Unix(0, t.UnixNano()).UTC()
}

// storedFloat is *p as the SQL stores read it back: NaN comes back nil.
func storedFloat(p *float64) *float64 {
	if p == nil || *p != *p {
		return nil
	}
	v := *p
	return &v
}

func cloneInt(p *int) *int {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func clonePrediction(p *virga.Prediction) *virga.Prediction {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// cloneBytes copies b; empty comes back nil, as from the SQL stores.
func cloneBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return bytes.Clone(b)
}

// cloneJSON deep-copies a value decoded from JSON (maps, slices, scalars).
func cloneJSON(v any) any {
	switch v := v.(type) {
	case map[string]any:
		return cloneHParams(v)
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = cloneJSON(x)
		}
		return out
	}
	return v
}

// cloneHParams deep-copies hyperparameters as decoded from JSON.
func cloneHParams(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = cloneJSON(v)
	}
	return out
}
