package search

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// rungs is asynchronous successive halving (ASHA; Li et al., MLSys 2020),
// and, with several brackets, asynchronous Hyperband. The resource is the
// step trials report (epochs, say). Bracket b's rungs are at steps
// min_b*eta^k below max_resource; a trial is judged at each rung against the
// others that reached it there:
//   - mode stop: a trial goes on while it is among the best 1/eta of its
//     rung (the first trials at a rung go on while they are the best, as
//     Optuna's successive halving does), and is stopped otherwise;
//   - mode promote: a trial pauses at each rung (it checkpoints and exits)
//     and is resumed when it is among the best floor(n/eta) of the n trials
//     of its rung, higher rungs first; a trial that is promotable at once,
//     with no other trial waiting, goes on without pausing.
//
// Each new trial joins a bracket in a fixed weighted round robin; Hyperband
// weighs bracket s (s halvings) by the number of trials it starts with,
// ceil((s_max+1)/(s+1)) * eta^s. ASHA is the single bracket at min_resource.
//
// With an adaptive grace period (ASHA only, grace: adaptive) the ladder
// goes on below min_resource, down to min_resource/eta^j >= 1, but trials
// are first judged at min_resource: the rungs below only record values.
// The first judged rung comes down one rung when the rung below would have
// promoted every one of the best completed trials (survivesBelow).
type rungs struct {
	promoteMode bool
	eta         int64
	max         int64     // 0: rungs without end (stop mode only)
	mins        []int64   // each bracket's first rung
	weights     []float64 // each bracket's share of new trials
	adaptive    bool      // grace period adaptive: see survivesBelow
	st          rungsState
}

// rungsState is what changes as trials report.
type rungsState struct {
	// Rungs holds, per bracket and rung, the trials that reached it.
	Rungs [][][]rungEntry `json:"rungs"`
	// Trials maps a trial to its bracket and the next rung it will reach.
	Trials trialRungs `json:"trials"`
	// Credit is the smooth weighted round robin's state: a counter per bracket.
	Credit []float64 `json:"credit"`
	// Finishing is the trial finish chose to run to the end, 0 if none.
	Finishing int64 `json:"finishing,omitempty"`
	// First is the first rung trials are judged at, with an adaptive grace
	// period; below it rungs only record values. 0 otherwise.
	First int `json:"first,omitempty"`
	// Final holds each completed trial's value at max_resource, with an
	// adaptive grace period.
	Final []rungEntry `json:"final,omitempty"`
	// byTrial is the searcher's records, for promotion; not saved.
	byTrial map[int64]*record
	// order holds, per bracket and rung, the indices of the rung's entries
	// by value, ties by arrival (what a stable sort gives), kept up to date
	// as trials arrive so that a promotion does not sort the rung again; not
	// saved (rebuilt when it is behind the rung). A rung holding a NaN has
	// no order (nil): it is sorted at each use, as before.
	order [][][]int
}

type rungEntry struct {
	Trial    int64   `json:"t"`
	Value    float64 `json:"v"`
	Promoted bool    `json:"p,omitempty"`
}

type rungTrial struct {
	Bracket int `json:"b"`
	Next    int `json:"n"`
}

// trialRungs maps trials to their place; it is saved as a list of
// [trial, bracket, next] sorted by trial, which encodes several times
// faster than a JSON object with a key per trial.
type trialRungs map[int64]*rungTrial

func (m trialRungs) MarshalJSON() ([]byte, error) {
	ids := make([]int64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	b := make([]byte, 0, 16*len(ids)+2)
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		t := m[id]
		b = append(b, '[')
		b = strconv.AppendInt(b, id, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(t.Bracket), 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(t.Next), 10)
		b = append(b, ']')
	}
	return append(b, ']'), nil
}

func (m *trialRungs) UnmarshalJSON(b []byte) error {
	var list [][3]int64
	if err := json.Unmarshal(b, &list); err != nil {
		return err
	}
	out := make(trialRungs, len(list))
	for _, e := range list {
		if _, dup := out[e[0]]; dup {
			return fmt.Errorf("trial %d appears twice", e[0])
		}
		if e[1] < 0 || e[1] > math.MaxInt32 || e[2] < 0 || e[2] > math.MaxInt32 {
			return fmt.Errorf("trial %d: bracket %d, rung %d out of range", e[0], e[1], e[2])
		}
		out[e[0]] = &rungTrial{Bracket: int(e[1]), Next: int(e[2])}
	}
	*m = out
	return nil
}

func newRungs(mode string, minR, maxR, eta int64, hyperband bool) (*rungs, error) {
	if eta < 2 {
		return nil, fmt.Errorf("reduction_factor must be >= 2, got %d", eta)
	}
	if minR < 1 {
		return nil, fmt.Errorf("min_resource must be >= 1, got %d", minR)
	}
	if maxR != 0 && maxR < minR {
		return nil, fmt.Errorf("min_resource %d is above max_resource %d", minR, maxR)
	}
	s := &rungs{eta: eta, max: maxR}
	switch mode {
	case "stop":
	case "promote":
		s.promoteMode = true
		if maxR == 0 {
			return nil, fmt.Errorf("mode promote needs max_resource, the step at which a trial ends")
		}
	default:
		return nil, fmt.Errorf("mode must be stop or promote, got %q", mode)
	}
	s.mins, s.weights = []int64{minR}, []float64{1}
	if hyperband {
		if maxR == 0 {
			return nil, fmt.Errorf("hyperband needs max_resource, the step at which a trial ends")
		}
		// s_max halvings fit between min_resource and max_resource.
		smax := 0
		for r := minR; r <= maxR/eta; r *= eta {
			smax++
		}
		s.mins, s.weights = nil, nil
		for k := smax; k >= 0; k-- {
			s.mins = append(s.mins, minR*ipow(eta, smax-k))
			s.weights = append(s.weights, math.Ceil(float64(smax+1)/float64(k+1)*math.Pow(float64(eta), float64(k))))
		}
	}
	s.st = s.fresh()
	return s, nil
}

// adaptGrace makes the grace period of ASHA with max_resource adaptive: the
// ladder extends below the first rung, min_resource, down to
// min_resource/eta^j >= 1, and trials are judged from min_resource up
// until the completed trials show a lower rung would have kept the best.
func (s *rungs) adaptGrace() error {
	if len(s.mins) != 1 || s.max == 0 {
		return fmt.Errorf("grace adaptive needs asha with max_resource")
	}
	s.adaptive = true
	for s.mins[0]%s.eta == 0 && s.mins[0]/s.eta >= 1 {
		s.mins[0] /= s.eta
		s.st.First++
	}
	return nil
}

func (s *rungs) fresh() rungsState {
	return rungsState{Rungs: make([][][]rungEntry, len(s.mins)), Trials: trialRungs{}, Credit: make([]float64, len(s.mins)), byTrial: map[int64]*record{}}
}

// resource returns the step of bracket b's k-th rung, or 0 when there is
// no such rung (it would be at or past max_resource).
func (s *rungs) resource(b, k int) int64 {
	r := s.mins[b]
	for range k {
		if r > math.MaxInt64/s.eta {
			return 0
		}
		r *= s.eta
	}
	if s.max > 0 && r >= s.max {
		return 0
	}
	return r
}

// join places a new trial in a bracket by smooth weighted round robin.
func (s *rungs) join(r *record) *rungTrial {
	total, best := 0.0, 0
	for b, w := range s.weights {
		s.st.Credit[b] += w
		total += w
		if s.st.Credit[b] > s.st.Credit[best] {
			best = b
		}
	}
	s.st.Credit[best] -= total
	t := &rungTrial{Bracket: best}
	s.st.Trials[r.Trial] = t
	s.st.byTrial[r.Trial] = r
	return t
}

func (s *rungs) report(r *record, step int64, v float64) Decision {
	t, ok := s.st.Trials[r.Trial]
	if !ok {
		t = s.join(r)
	}
	if s.adaptive && step >= s.max {
		s.completed(r.Trial, v)
	}
	for {
		res := s.resource(t.Bracket, t.Next)
		if res == 0 || step < res {
			return Continue
		}
		k := t.Next
		t.Next++
		for len(s.st.Rungs[t.Bracket]) <= k {
			s.st.Rungs[t.Bracket] = append(s.st.Rungs[t.Bracket], nil)
		}
		rung := append(s.st.Rungs[t.Bracket][k], rungEntry{Trial: r.Trial, Value: v})
		s.st.Rungs[t.Bracket][k] = rung
		i := len(rung) - 1
		place := s.arrived(t.Bracket, k)
		if k < s.st.First {
			// Within the grace period: recorded, not judged (marked
			// promoted, so that no promotion starts from here).
			rung[i].Promoted = true
			continue
		}
		if !s.promoteMode {
			if place >= max(1, len(rung)/int(s.eta)) {
				return Stop
			}
			continue
		}
		// Promote mode: go on at once when promotable and no one waits, or
		// when this is the trial finish chose.
		if r.Trial == s.st.Finishing {
			rung[i].Promoted = true
			continue
		}
		if w, _, _ := s.waiting(); w == nil && place < len(rung)/int(s.eta) {
			rung[i].Promoted = true
			continue
		}
		return Pause
	}
}

// rank returns the place of rung[i] among the rung's values (0 = best); ties
// go to the trial that got there first.
func rank(rung []rungEntry, i int) int {
	n := 0
	for j, e := range rung {
		if e.Value < rung[i].Value || (e.Value == rung[i].Value && j < i) {
			n++
		}
	}
	return n
}

// arrived returns the place (0 = best) of the entry just appended to rung
// (b, k), as rank does, and keeps the rung's order up to date.
func (s *rungs) arrived(b, k int) int {
	rung := s.st.Rungs[b][k]
	i := len(rung) - 1
	for len(s.st.order) <= b {
		s.st.order = append(s.st.order, nil)
	}
	for len(s.st.order[b]) <= k {
		s.st.order[b] = append(s.st.order[b], nil)
	}
	order := s.st.order[b][k]
	v := rung[i].Value
	if math.IsNaN(v) || len(order) != i {
		// A NaN has no place in an order; an order behind the rung (after
		// a restore) is rebuilt at its next use.
		s.st.order[b][k] = nil
		return rank(rung, i)
	}
	// The new entry goes after every entry not worse than it: it arrived last.
	at, _ := slices.BinarySearchFunc(order, v, func(j int, v float64) int {
		if rung[j].Value <= v {
			return -1
		}
		return 1
	})
	s.st.order[b][k] = slices.Insert(order, at, i)
	return at
}

// sorted returns the indices of rung (b, k)'s entries by value, ties by
// arrival.
func (s *rungs) sorted(b, k int) []int {
	rung := s.st.Rungs[b][k]
	if b < len(s.st.order) && k < len(s.st.order[b]) && len(s.st.order[b][k]) == len(rung) {
		return s.st.order[b][k]
	}
	order := make([]int, len(rung))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return cmpFloat(rung[x].Value, rung[y].Value) })
	for _, e := range rung {
		if math.IsNaN(e.Value) {
			return order
		}
	}
	for len(s.st.order) <= b {
		s.st.order = append(s.st.order, nil)
	}
	for len(s.st.order[b]) <= k {
		s.st.order[b] = append(s.st.order[b], nil)
	}
	s.st.order[b][k] = order
	return order
}

// waiting returns the paused trial to promote next, or nil: in each bracket,
// from the highest rung down, the best not yet promoted trial among the top
// floor(n/eta) of the rung, if it is paused. Brackets are taken in order.
func (s *rungs) waiting() (*record, int, int) {
	for b := range s.st.Rungs {
		for k := len(s.st.Rungs[b]) - 1; k >= 0; k-- {
			rung := s.st.Rungs[b][k]
			top := len(rung) / int(s.eta)
			if top == 0 {
				continue
			}
			for _, i := range s.sorted(b, k)[:top] {
				e := rung[i]
				if e.Promoted {
					continue
				}
				if r := s.st.byTrial[e.Trial]; r != nil && r.Status == paused {
					return r, b, k
				}
			}
		}
	}
	return nil, 0, 0
}

func (s *rungs) promote() *record {
	r, b, k := s.waiting()
	if r == nil {
		return nil
	}
	for i := range s.st.Rungs[b][k] {
		if s.st.Rungs[b][k][i].Trial == r.Trial {
			s.st.Rungs[b][k][i].Promoted = true
		}
	}
	return r
}

// finish returns the best paused trial of the highest rung reached, marked
// promoted: the search's last word when no trial can be promoted by the
// rule and none has reached the end.
func (s *rungs) finish() *record {
	var best *record
	var bestRes int64
	var at *rungEntry
	for b := range s.st.Rungs {
		for k := range s.st.Rungs[b] {
			res := s.resource(b, k)
			for i := range s.st.Rungs[b][k] {
				e := &s.st.Rungs[b][k][i]
				r := s.st.byTrial[e.Trial]
				if e.Promoted || r == nil || r.Status != paused {
					continue
				}
				if best == nil || res > bestRes || (res == bestRes && e.Value < at.Value) {
					best, bestRes, at = r, res, e
				}
			}
		}
	}
	if at != nil {
		at.Promoted = true
		s.st.Finishing = best.Trial // it goes on through every higher rung
	}
	return best
}

func (s *rungs) ended(r *record) {}

// graceLevel is the chance, were the values at a rung no guide to the final
// ones, that the rung would promote every one of the best completed trials
// checked (1/eta each): below it, the rung is taken to rank them. A search
// checks once per completed trial, a few dozen to a hundred times.
const graceLevel = 0.01

// completed records trial id's value at max_resource (once) and lowers the
// first judged rung while the rung below would have kept the best completed
// trials.
func (s *rungs) completed(id int64, v float64) {
	for _, e := range s.st.Final {
		if e.Trial == id {
			return
		}
	}
	s.st.Final = append(s.st.Final, rungEntry{Trial: id, Value: v})
	for s.st.First > 0 && s.survivesBelow() {
		s.st.First--
	}
}

// survivesBelow reports whether the rung below the first judged one would
// have promoted each of the best ceil(n/eta) of the n completed trials: each
// is among the best floor(m/eta) of the m values recorded there. It asks
// for at least log(graceLevel)/log(1/eta) of them (5 with eta 3), so that a
// rung whose values say nothing of the final ones passes by chance with
// probability under graceLevel.
func (s *rungs) survivesBelow() bool {
	below := s.st.First - 1
	if below >= len(s.st.Rungs[0]) {
		return false
	}
	need := int(math.Ceil(math.Log(graceLevel) / math.Log(1/float64(s.eta))))
	best := int(math.Ceil(float64(len(s.st.Final)) / float64(s.eta)))
	rung := s.st.Rungs[0][below]
	top := len(rung) / int(s.eta)
	if best < need || top == 0 {
		return false
	}
	at := make(map[int64]float64, len(rung))
	vals := make([]float64, 0, len(rung))
	for _, e := range rung {
		at[e.Trial] = e.Value
		vals = append(vals, e.Value)
	}
	slices.SortFunc(vals, cmpFloat)
	cut := vals[top-1]
	final := slices.Clone(s.st.Final)
	slices.SortStableFunc(final, func(a, b rungEntry) int { return cmpFloat(a.Value, b.Value) })
	for _, e := range final[:best] {
		x, ok := at[e.Trial]
		if !ok || !(x <= cut) {
			return false
		}
	}
	return true
}

func (s *rungs) save() (json.RawMessage, error) {
	return json.Marshal(s.st)
}

func (s *rungs) load(b json.RawMessage, byTrial map[int64]*record) error {
	st := s.fresh()
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("rungs: %w", err)
	}
	if len(st.Rungs) != len(s.mins) || len(st.Credit) != len(s.mins) {
		return fmt.Errorf("rungs: snapshot has %d brackets, this search %d (did the experiment change?)", len(st.Rungs), len(s.mins))
	}
	if st.Trials == nil {
		st.Trials = trialRungs{}
	}
	st.byTrial = map[int64]*record{}
	for id, t := range st.Trials {
		if t == nil || t.Bracket < 0 || t.Bracket >= len(s.mins) {
			return fmt.Errorf("rungs: trial %d has no valid bracket", id)
		}
		if r := byTrial[id]; r != nil {
			st.byTrial[id] = r
		}
	}
	s.st = st
	return nil
}

// cmpFloat orders floats ascending.
func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func ipow(b int64, e int) int64 {
	r := int64(1)
	for range e {
		r *= b
	}
	return r
}
