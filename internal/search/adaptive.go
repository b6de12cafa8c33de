package search

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/spec"
)

// adaptive is a searcher made of a sampler, which chooses new trials'
// hyperparameters (random, grid or tpe), and an optional stopper, which ends
// or pauses weak trials early (asha, hyperband, median, curve). It keeps one
// record per trial; the sampler learns from the records of trials that
// ended or paused, the stopper from the values reported.
type adaptive struct {
	name string
	sp   space
	pick func(i int, r *rand.Rand, hist []Observation) (map[string]any, error)
	// learns says pick learns from the history (TPE): only then is it
	// gathered at each proposal.
	learns  bool
	stop    stopper // nil: no trial is stopped early
	limit   int
	sign    float64 // 1 to minimise, -1 to maximise
	pcg     *rand.PCG
	rng     *rand.Rand
	records []*record
	byTrial map[int64]*record
	byID    map[string]*record
	// seen holds the key of every configuration proposed, when the space is
	// finite (no float parameter): see fresh.
	seen map[string]bool
	// redraw is whether a repeated configuration may be drawn again (not
	// for grid, whose proposals never repeat).
	redraw bool
	// In a space that is not finite, tol is the distance under which a
	// configuration is a near-duplicate of one proposed (nearTolerance),
	// and near holds each record's place (space.unit), in record order.
	tol  float64
	near *nearIndex
}

// unitPoint is a configuration's place, as space.unit returns it.
type unitPoint struct {
	x   []float64
	cat string
}

// Draws of a new configuration before one already tried is accepted: first
// from the sampler, then uniformly at random.
const (
	samplerRedraws = 8
	randomRedraws  = 32
)

var _ Searcher = (*adaptive)(nil)

// Status of a record.
const (
	running int8 = iota // proposed, created or running
	paused              // paused by the stopper, waiting for promotion
	ended               // ended for good
	pausing             // told to pause; paused once its process has exited (Paused)
)

// record is what an adaptive searcher knows of one proposal and its trial.
type record struct {
	Proposal string         `json:"p"`
	Trial    int64          `json:"t,omitempty"`
	HParams  map[string]any `json:"h"`
	Step     int64          `json:"s,omitempty"` // furthest step reported
	Value    float64        `json:"v,omitempty"` // objective at Step, minimising form
	Reported bool           `json:"r,omitempty"`
	Status   int8           `json:"st,omitempty"`
	Complete bool           `json:"c,omitempty"` // ended by running to its end

	// enc caches the record's JSON for Snapshot; nil after any change
	// (touch). Most records belong to trials that ended and never change,
	// so a snapshot re-encodes only the few that did.
	enc []byte
}

// touch marks the record changed since its last encoding.
func (r *record) touch() { r.enc = nil }

// stopper decides, from the values trials report, which trials go on. It
// draws no randomness; its state is saved with the searcher's.
type stopper interface {
	// report is told of value v (minimising form) of trial r at step and
	// returns whether the trial goes on, stops or pauses.
	report(r *record, step int64, v float64) Decision
	// ended is told that a trial ended.
	ended(r *record)
	// promote returns a paused trial to resume now, or nil.
	promote() *record
	// save returns the stopper's state; load replaces it.
	save() (json.RawMessage, error)
	load(b json.RawMessage, byTrial map[int64]*record) error
}

// adaptiveState is the JSON snapshot of an adaptive searcher.
type adaptiveState struct {
	Searcher string          `json:"searcher"`
	Limit    int             `json:"limit"`
	Records  []*record       `json:"records"`
	RNG      []byte          `json:"rng"`
	Stopper  json.RawMessage `json:"stopper,omitempty"`
}

// newAdaptive makes the searcher of e.Searcher's sampler and stopper.
func newAdaptive(e *spec.Experiment, seed uint64) (Searcher, error) {
	sp, err := newSpace(e)
	if err != nil {
		return nil, err
	}
	if e.MaxTrials < 0 {
		return nil, fmt.Errorf("max_trials must not be negative, got %d", e.MaxTrials)
	}
	a := &adaptive{
		seen:    map[string]bool{},
		name:    e.Searcher.Name,
		sp:      sp,
		limit:   e.MaxTrials,
		sign:    1,
		byTrial: map[int64]*record{},
		byID:    map[string]*record{},
	}
	if e.Objective.Direction == spec.Maximize {
		a.sign = -1
	}
	if a.limit == 0 {
		a.limit = defaultRandomTrials
	}
	a.pcg = rand.NewPCG(seed, pcgStream)
	a.rng = rand.New(a.pcg)
	a.redraw = true
	if !sp.finite() {
		a.tol = nearTolerance(a.limit, sp.numeric())
	}
	switch sampler := e.Searcher.Sampler; sampler {
	case RandomName, "":
		a.pick = func(_ int, r *rand.Rand, _ []Observation) (map[string]any, error) {
			return sp.sample(r), nil
		}
	case GridName:
		g, err := NewGrid(e, seed)
		if err != nil {
			return nil, err
		}
		gen := g.(*listSearcher)
		a.limit, a.redraw = gen.limit, false
		a.pick = func(i int, _ *rand.Rand, _ []Observation) (map[string]any, error) {
			return gen.gen(i), nil
		}
	case TPEName:
		st, err := tpeSettingsFrom(e.Searcher.Settings)
		if err != nil {
			return nil, err
		}
		t, err := newTPE(sp, st)
		if err != nil {
			return nil, err
		}
		a.pick = func(_ int, r *rand.Rand, hist []Observation) (map[string]any, error) {
			return t.next(r, hist)
		}
		a.learns = true
	default:
		return nil, fmt.Errorf("unknown sampler %q: want random, grid or tpe", sampler)
	}
	s := e.Searcher
	switch s.Stopper {
	case "":
	case ASHAName, HyperbandName:
		maxR, eta := s.Int("max_resource", 0), s.Int("reduction_factor", 3)
		var st *rungs
		st, err = newRungs(s.Text("mode", "stop"), s.Int("min_resource", spec.DefaultMinResource(maxR, eta)), maxR, eta, s.Stopper == HyperbandName)
		if err == nil && s.Text("grace", "fixed") == "adaptive" {
			err = st.adaptGrace()
		}
		a.stop = st
	case MedianName:
		a.stop = newMedian(s.Int("min_trials", 5), s.Int("warmup_steps", autoWarmup))
	case CurveName:
		a.stop, err = newCurveStopper(s.Int("max_resource", 0), s.Float("threshold", 0.05), s.Int("min_steps", 5), s.Int("min_trials", 3), a.sign)
	default:
		return nil, fmt.Errorf("unknown stopper %q: want asha, hyperband, median or curve", s.Stopper)
	}
	if err != nil {
		return nil, err
	}
	return a, nil
}

// Propose resumes a trial the stopper promotes, or proposes a new trial while
// fewer than the limit were proposed. Once the limit is reached it waits while
// trials run (they may yet earn promotions) and is exhausted after.
func (a *adaptive) Propose() (Proposal, error) {
	if a.stop != nil {
		if r := a.stop.promote(); r != nil {
			r.Status = running
			r.touch()
			return Proposal{ID: r.Proposal, Resume: r.Trial}, nil
		}
	}
	if len(a.records) < a.limit {
		hp, err := a.fresh()
		if err != nil {
			return Proposal{}, err
		}
		r := &record{Proposal: proposalID(len(a.records) + 1), HParams: hp}
		a.records = append(a.records, r)
		a.byID[r.Proposal] = r
		a.remember(hp)
		return Proposal{ID: r.Proposal, HParams: cloneHParams(hp)}, nil
	}
	for _, r := range a.records {
		if r.Status == running || r.Status == pausing {
			return Proposal{}, ErrWait
		}
	}
	// No trial runs and none can start: if none reached the end, the best
	// trial of the highest rung finishes, so that the search has at least
	// one fully trained result.
	if f, ok := a.stop.(finisher); ok && !a.anyComplete() {
		if r := f.finish(); r != nil {
			r.Status = running
			r.touch()
			return Proposal{ID: r.Proposal, Resume: r.Trial}, nil
		}
	}
	return Proposal{}, ErrExhausted
}

// finisher is a stopper that can pick a paused trial to run to its end.
type finisher interface {
	finish() *record
}

func (a *adaptive) anyComplete() bool {
	for _, r := range a.records {
		if r.Complete {
			return true
		}
	}
	return false
}

// fresh returns the sampler's next configuration. A configuration already
// proposed brings nothing new, as its trial would train the same model
// again: in a finite space (ints, categoricals and constants only) one
// equal to a configuration proposed before, in another space one within
// tol of one in every numeric parameter (scaled to [0, 1]) and equal in the
// others. It is drawn anew from the sampler, then uniformly at random,
// before it is accepted. (Optuna's TPE proposes such repeats; in a tabular
// benchmark they were 80% of its trials.)
func (a *adaptive) fresh() (map[string]any, error) {
	var hist []Observation
	if a.learns {
		hist = a.history()
	}
	hp, err := a.pick(len(a.records), a.rng, hist)
	if err != nil || !a.redraw {
		return hp, err
	}
	for range samplerRedraws {
		if !a.tried(hp) {
			return hp, nil
		}
		if hp, err = a.pick(len(a.records), a.rng, hist); err != nil {
			return nil, err
		}
	}
	for range randomRedraws {
		if !a.tried(hp) {
			return hp, nil
		}
		hp = a.sp.sample(a.rng)
	}
	return hp, nil
}

// tried reports whether hp repeats, or nearly repeats, a configuration
// already proposed (see fresh).
func (a *adaptive) tried(hp map[string]any) bool {
	if a.tol == 0 {
		return a.seen[a.sp.key(hp)]
	}
	x, cat := a.sp.unit(hp)
	return a.nearIndex().near(x, cat)
}

// nearIndex returns the places of the configurations proposed, made empty
// at first use.
func (a *adaptive) nearIndex() *nearIndex {
	if a.near == nil {
		a.near = newNearIndex(a.tol)
	}
	return a.near
}

// remember records a configuration proposed, for tried.
func (a *adaptive) remember(hp map[string]any) {
	if !a.redraw {
		return
	}
	if a.tol == 0 {
		a.seen[a.sp.key(hp)] = true
		return
	}
	x, cat := a.sp.unit(hp)
	a.nearIndex().add(unitPoint{x: x, cat: cat})
}

// history returns the observations of trials that reported and no longer
// run, in proposal order.
func (a *adaptive) history() []Observation {
	hist := make([]Observation, 0, len(a.records))
	for _, r := range a.records {
		if r.Status == running || !r.Reported {
			continue
		}
		hist = append(hist, Observation{HParams: r.HParams, Value: r.Value, Step: r.Step, Complete: r.Complete})
	}
	return hist
}

// Created records that proposal id became trial trialID.
func (a *adaptive) Created(id string, trialID int64) {
	r, ok := a.byID[id]
	if !ok {
		return
	}
	if r.Trial != 0 {
		delete(a.byTrial, r.Trial)
	}
	r.Trial = trialID
	r.touch()
	a.byTrial[trialID] = r
}

// Observe records a value and asks the stopper whether the trial goes on.
func (a *adaptive) Observe(trialID int64, step int64, value float64) Decision {
	r, ok := a.byTrial[trialID]
	if !ok || r.Status == ended || math.IsNaN(value) {
		return Continue
	}
	v := a.sign * value
	if !r.Reported || step >= r.Step {
		r.Step, r.Value, r.Reported = step, v, true
		r.touch()
	}
	if r.Status == pausing || r.Status == paused {
		// It reports, so it runs: its pause did not happen (the user
		// resumed it first, say).
		r.Status = running
		r.touch()
	}
	if a.stop == nil {
		return Continue
	}
	d := a.stop.report(r, step, v)
	if d == Pause {
		r.Status = pausing
		r.touch()
	}
	return d
}

// Paused records that a trial the stopper paused has exited: it may be
// promoted from now on. Until then it still holds its slot.
func (a *adaptive) Paused(trialID int64) {
	if r, ok := a.byTrial[trialID]; ok && r.Status == pausing {
		r.Status = paused
		r.touch()
	}
}

// Ended records that a trial ended.
func (a *adaptive) Ended(trialID int64, outcome Outcome) {
	r, ok := a.byTrial[trialID]
	if !ok || r.Status == ended {
		return
	}
	r.Status, r.Complete = ended, outcome == Completed
	r.touch()
	if a.stop != nil {
		a.stop.ended(r)
	}
}

// Prediction returns the curve stopper's latest forecast for a trial.
func (a *adaptive) Prediction(trialID int64) *virga.Prediction {
	if p, ok := a.stop.(Predictor); ok {
		return p.Prediction(trialID)
	}
	return nil
}

// Snapshot returns the searcher's state as JSON (adaptiveState), random
// source included. Records are encoded once and again only after a change.
func (a *adaptive) Snapshot() ([]byte, error) {
	fail := func(err error) ([]byte, error) {
		return nil, fmt.Errorf("snapshotting %s searcher: %w", a.name, err)
	}
	rng, err := a.pcg.MarshalBinary()
	if err != nil {
		return fail(err)
	}
	head, err := json.Marshal(adaptiveState{Searcher: a.name, Limit: a.limit, RNG: rng})
	if err != nil {
		return fail(err)
	}
	var stop json.RawMessage
	if a.stop != nil {
		if stop, err = a.stop.save(); err != nil {
			return fail(err)
		}
	}
	size := len(head) + len(stop) + 32
	for _, r := range a.records {
		if r.enc == nil {
			if r.enc, err = json.Marshal(r); err != nil {
				return fail(err)
			}
		}
		size += len(r.enc) + 1
	}
	// head is {"searcher":...,"limit":...,"records":null,"rng":"..."}:
	// replace its records and add the stopper.
	const nullRecords = `"records":null`
	i := bytes.Index(head, []byte(nullRecords))
	if i < 0 {
		return fail(fmt.Errorf("unexpected encoding %s", head))
	}
	b := make([]byte, 0, size)
	b = append(b, head[:i]...)
	b = append(b, `"records":[`...)
	for j, r := range a.records {
		if j > 0 {
			b = append(b, ',')
		}
		b = append(b, r.enc...)
	}
	b = append(b, ']')
	b = append(b, head[i+len(nullRecords):len(head)-1]...)
	if stop != nil {
		b = append(b, `,"stopper":`...)
		b = append(b, stop...)
	}
	return append(b, '}'), nil
}

// Restore replaces the state with a snapshot taken from a searcher of the
// same kind and space. On error the state is unchanged.
func (a *adaptive) Restore(snapshot []byte) error {
	var st adaptiveState
	if err := json.Unmarshal(snapshot, &st); err != nil {
		return fmt.Errorf("restoring %s searcher: %w", a.name, err)
	}
	if st.Searcher != a.name {
		return fmt.Errorf("restoring %s searcher: snapshot is of a %q searcher", a.name, st.Searcher)
	}
	// The limit comes from the experiment file as this version reads it
	// (max_trials or its default); a snapshot written under another default
	// goes on with this one, as long as it has not proposed more already.
	if len(st.Records) > a.limit {
		return fmt.Errorf("restoring %s searcher: snapshot has %d trials but this search plans %d (did the experiment change?)", a.name, len(st.Records), a.limit)
	}
	pcg := new(rand.PCG)
	if err := pcg.UnmarshalBinary(st.RNG); err != nil {
		return fmt.Errorf("restoring %s searcher: random state: %w", a.name, err)
	}
	byTrial := make(map[int64]*record, len(st.Records))
	byID := make(map[string]*record, len(st.Records))
	seen := map[string]bool{}
	var near *nearIndex
	if a.redraw && a.tol != 0 {
		near = newNearIndex(a.tol)
	}
	for i, r := range st.Records {
		if r == nil || r.Proposal != proposalID(i+1) {
			return fmt.Errorf("restoring %s searcher: trial %d of the snapshot is malformed", a.name, i+1)
		}
		hp, err := a.sp.normalizePoint(r.HParams)
		if err != nil {
			return fmt.Errorf("restoring %s searcher: proposal %s: %w", a.name, r.Proposal, err)
		}
		r.HParams = hp
		byID[r.Proposal] = r
		switch {
		case !a.redraw:
		case a.tol == 0:
			seen[a.sp.key(hp)] = true
		default:
			x, cat := a.sp.unit(hp)
			near.add(unitPoint{x: x, cat: cat})
		}
		if r.Trial != 0 {
			byTrial[r.Trial] = r
		}
	}
	if a.stop != nil {
		if err := a.stop.load(st.Stopper, byTrial); err != nil {
			return fmt.Errorf("restoring %s searcher: %w", a.name, err)
		}
	}
	*a.pcg = *pcg
	a.records, a.byTrial, a.byID, a.seen, a.near = st.Records, byTrial, byID, seen, near
	return nil
}
