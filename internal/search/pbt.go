package search

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/virga-ml/virga/internal/spec"
)

// pbt is population based training (Jaderberg et al., 2017), asynchronous:
// population trials train at once; every interval steps a trial compares its
// latest value with the other running members'. One in the bottom quantile
// is stopped and replaced by a new trial that continues from the latest
// checkpoint of a member of the top quantile (exploit) with that member's
// hyperparameters perturbed (explore): numbers multiplied by 1-perturb or
// 1+perturb, any parameter drawn anew with resample_probability. The new
// trial records its parent (Proposal.Parent). Trials end at max_resource;
// max_trials bounds the trials created, first members and replacements
// together.
type pbt struct {
	sp         space
	population int
	interval   int64
	maxR       int64
	quantile   float64
	perturb    float64
	resample   float64
	limit      int
	sign       float64
	pcg        *rand.PCG
	rng        *rand.Rand
	st         pbtState
	byTrial    map[int64]*member
	byID       map[string]*member
}

type pbtState struct {
	Members []*member `json:"members"`
	// Due counts replacements decided but not yet proposed. Each one's
	// parent is chosen when it is proposed, from the members running then,
	// so that it continues from a checkpoint that is current.
	Due int `json:"due"`
}

// member is one trial of the population.
type member struct {
	Proposal string         `json:"p"`
	Trial    int64          `json:"t,omitempty"`
	HParams  map[string]any `json:"h"`
	Parent   int64          `json:"parent,omitempty"`
	Step     int64          `json:"s,omitempty"`
	Value    float64        `json:"v,omitempty"`
	Reported bool           `json:"r,omitempty"`
	Ended    bool           `json:"e,omitempty"`
	// Judged is the step of the member's last comparison.
	Judged int64 `json:"j,omitempty"`
	// Replaced is set when the member was told to stop for a replacement:
	// it no longer counts among the running members.
	Replaced bool `json:"x,omitempty"`
}

type pbtSnapshot struct {
	Searcher string   `json:"searcher"`
	Limit    int      `json:"limit"`
	RNG      []byte   `json:"rng"`
	State    pbtState `json:"state"`
}

func newPBT(e *spec.Experiment, seed uint64) (Searcher, error) {
	sp, err := newSpace(e)
	if err != nil {
		return nil, err
	}
	s := e.Searcher
	p := &pbt{
		sp: sp, population: int(s.Int("population", 8)), interval: s.Int("interval", 4), maxR: s.Int("max_resource", 0),
		quantile: s.Float("quantile", 0.25), perturb: s.Float("perturb", 0.2), resample: s.Float("resample_probability", 0.25),
		limit: e.MaxTrials, sign: 1, byTrial: map[int64]*member{}, byID: map[string]*member{},
	}
	switch {
	case p.population < 2:
		return nil, fmt.Errorf("population must be >= 2, got %d", p.population)
	case p.interval < 1:
		return nil, fmt.Errorf("interval must be >= 1, got %d", p.interval)
	case p.maxR < 1:
		return nil, fmt.Errorf("pbt needs max_resource, the step at which a trial ends")
	case !(p.quantile > 0 && p.quantile <= 0.5):
		return nil, fmt.Errorf("quantile must be in (0, 0.5], got %g", p.quantile)
	case !(p.perturb > 0 && p.perturb <= 1):
		return nil, fmt.Errorf("perturb must be in (0, 1], got %g", p.perturb)
	case !(p.resample >= 0 && p.resample <= 1):
		return nil, fmt.Errorf("resample_probability must be in [0, 1], got %g", p.resample)
	}
	if p.limit <= 0 {
		p.limit = 5 * p.population
	}
	if e.Objective.Direction == spec.Maximize {
		p.sign = -1
	}
	p.pcg = rand.NewPCG(seed, pcgStream)
	p.rng = rand.New(p.pcg)
	return p, nil
}

func (p *pbt) live() int {
	n := p.st.Due
	for _, m := range p.st.Members {
		if !m.Ended {
			n++
		}
	}
	return n
}

// Propose returns a pending replacement first, then new members until the
// population is full; it waits while trials run and is exhausted after.
func (p *pbt) Propose() (Proposal, error) {
	var m *member
	switch {
	case p.st.Due > 0:
		p.st.Due--
		m = &member{HParams: p.sp.sample(p.rng)}
		if top := p.top(nil); len(top) > 0 {
			parent := top[p.rng.IntN(len(top))]
			m = &member{HParams: p.explore(parent.HParams), Parent: parent.Trial, Step: parent.Step, Judged: parent.Step}
		}
	case len(p.st.Members) < p.limit && p.live() < p.population:
		m = &member{HParams: p.sp.sample(p.rng)}
	case p.live() > 0:
		return Proposal{}, ErrWait
	default:
		return Proposal{}, ErrExhausted
	}
	m.Proposal = proposalID(len(p.st.Members) + 1)
	p.st.Members = append(p.st.Members, m)
	p.byID[m.Proposal] = m
	return Proposal{ID: m.Proposal, HParams: cloneHParams(m.HParams), Parent: m.Parent}, nil
}

func (p *pbt) Created(id string, trialID int64) {
	m, ok := p.byID[id]
	if !ok {
		return
	}
	if m.Trial != 0 {
		delete(p.byTrial, m.Trial)
	}
	m.Trial = trialID
	p.byTrial[trialID] = m
}

// Observe records the value and, every interval steps, replaces a member of
// the bottom quantile by a perturbed copy of one of the top quantile.
func (p *pbt) Observe(trialID int64, step int64, value float64) Decision {
	m, ok := p.byTrial[trialID]
	if !ok || m.Ended || m.Replaced || math.IsNaN(value) {
		return Continue
	}
	if !m.Reported || step >= m.Step {
		m.Step, m.Value, m.Reported = step, p.sign*value, true
	}
	if step >= p.maxR || step-m.Judged < p.interval {
		return Continue
	}
	m.Judged = step
	if len(p.st.Members)+p.st.Due >= p.limit {
		return Continue // no trial left to replace it with
	}
	peers := p.ranked()
	k := p.cut(len(peers))
	if len(peers) < 2 || slices.Index(peers, m) < len(peers)-k || len(p.top(m)) == 0 {
		return Continue
	}
	p.st.Due++
	m.Replaced = true
	return Stop
}

// ranked returns the running members that reported, best first.
func (p *pbt) ranked() []*member {
	var peers []*member
	for _, o := range p.st.Members {
		if !o.Ended && !o.Replaced && o.Reported && o.Trial != 0 {
			peers = append(peers, o)
		}
	}
	slices.SortStableFunc(peers, func(a, b *member) int { return cmpFloat(a.Value, b.Value) })
	return peers
}

// cut returns how many of n members form the top (and the bottom)
// quantile: at least one, and never so many that they overlap.
func (p *pbt) cut(n int) int {
	return max(1, min(int(p.quantile*float64(n)), n/2))
}

// top returns the running members of the top quantile that are not done
// and are not except: the parents a replacement may continue from.
func (p *pbt) top(except *member) []*member {
	peers := p.ranked()
	var out []*member
	for _, o := range peers[:min(len(peers), p.cut(len(peers)))] {
		if o != except && o.Step < p.maxR {
			out = append(out, o)
		}
	}
	return out
}

// explore perturbs a configuration.
func (p *pbt) explore(hp map[string]any) map[string]any {
	out := make(map[string]any, len(p.sp))
	for _, q := range p.sp {
		v := hp[q.name]
		if q.hp.Type == spec.HPConst {
			out[q.name] = q.hp.Value
			continue
		}
		if p.rng.Float64() < p.resample {
			out[q.name] = q.sample(p.rng)
			continue
		}
		f := 1 - p.perturb
		if p.rng.IntN(2) == 1 {
			f = 1 + p.perturb
		}
		switch x := v.(type) {
		case float64:
			out[q.name] = clampFloat(x*f, q.hp.Min, q.hp.Max)
		case int64:
			lo, hi, _ := q.intBounds()
			n := int64(math.Round(float64(x) * f))
			if n == x {
				n = x + int64(math.Copysign(1, f-1))
			}
			out[q.name] = clampInt(n, lo, hi)
		default:
			out[q.name] = v // a categorical keeps its value unless drawn anew
		}
	}
	return out
}

func (p *pbt) Ended(trialID int64, outcome Outcome) {
	if m, ok := p.byTrial[trialID]; ok {
		m.Ended = true
	}
}

func (p *pbt) Snapshot() ([]byte, error) {
	rng, err := p.pcg.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("snapshotting pbt searcher: %w", err)
	}
	st := p.st
	if st.Members == nil {
		st.Members = []*member{}
	}
	return json.Marshal(pbtSnapshot{Searcher: PBTName, Limit: p.limit, RNG: rng, State: st})
}

func (p *pbt) Restore(b []byte) error {
	var s pbtSnapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("restoring pbt searcher: %w", err)
	}
	if s.Searcher != PBTName {
		return fmt.Errorf("restoring pbt searcher: snapshot is of a %q searcher", s.Searcher)
	}
	pcg := new(rand.PCG)
	if err := pcg.UnmarshalBinary(s.RNG); err != nil {
		return fmt.Errorf("restoring pbt searcher: random state: %w", err)
	}
	if s.State.Due < 0 || len(s.State.Members)+s.State.Due > p.limit {
		return fmt.Errorf("restoring pbt searcher: %d members and %d replacements due exceed max_trials %d", len(s.State.Members), s.State.Due, p.limit)
	}
	byTrial, byID := map[int64]*member{}, map[string]*member{}
	for i, m := range s.State.Members {
		if m == nil || m.Proposal != proposalID(i+1) {
			return fmt.Errorf("restoring pbt searcher: member %d is malformed", i+1)
		}
		hp, err := p.sp.normalizePoint(m.HParams)
		if err != nil {
			return fmt.Errorf("restoring pbt searcher: %w", err)
		}
		m.HParams = hp
		byID[m.Proposal] = m
		if m.Trial != 0 {
			byTrial[m.Trial] = m
		}
	}
	*p.pcg = *pcg
	p.st, p.byTrial, p.byID = s.State, byTrial, byID
	return nil
}
