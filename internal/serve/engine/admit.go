package engine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/virga-ml/virga/internal/serve"
)

// Admission. Evicting a model to load another pays off only if the newcomer
// is asked for more than the model it displaces: on a request mix that
// switches model at nearly every request (a real many-model trace does, on
// three requests in four), plain LRU evicts popular models for rare ones and
// then reloads them, and answers fewer requests in time than keeping the
// most popular models loaded and refusing the rest. So, as TinyLFU admits
// to a cache, a load that needs an eviction goes ahead only if the model's
// recent request count is higher than its victim's; otherwise the request
// is refused at once (RefusedError NotAdmitted) and the loaded models stay.
// Counts are per model name, over a window of recent requests: every
// admitWindow requests (at least ten per name counted), all counts halve,
// so a model that stops being asked for loses its place. Options.Admission
// turns it on; `virga serve` does by default.

// admitWindow is the fewest requests between two halvings of the counts.
const admitWindow = 1024

// countLocked counts a request for name.
func (e *Engine) countLocked(name string) {
	if e.freq == nil {
		e.freq = map[string]float64{}
	}
	e.freq[name]++
	e.freqTotal++
	if e.freqTotal >= max(admitWindow, 10*len(e.freq)) {
		for n, c := range e.freq {
			if c < 1 {
				delete(e.freq, n)
			} else {
				e.freq[n] = c / 2
			}
		}
		e.freqTotal /= 2
	}
}

// admitLocked says whether ent may evict victim to make room: a pinned
// model always may, and so may a new version of a name already loaded (a
// swap frees its old version's memory afterwards); any other only if its
// name has been asked for more than the victim's.
func (e *Engine) admitLocked(ent, victim *entry) error {
	if !e.opts.Admission || ent.pinned || e.loadedLocked(ent.key.name) {
		return nil
	}
	if e.freq[ent.key.name] > e.freq[victim.key.name] {
		return nil
	}
	e.metrics.refusals.WithLabelValues(ent.key.name, "NotAdmitted").Inc()
	return &serve.RefusedError{Reason: "NotAdmitted", Msg: fmt.Sprintf(
		"model %s is not loaded and the memory budget is held by models asked for as often or more (%s among them); it loads once asked for more than they are",
		ent.key, victim.key.name)}
}

// loadedLocked says whether some version of name is loaded.
func (e *Engine) loadedLocked(name string) bool {
	for k, m := range e.models {
		if k.name == name && m.ready {
			return true
		}
	}
	return false
}

// Cost-aware admission and eviction (Options.CostAware). Frequency
// admission compares the newcomer with one victim at a time, by requests
// alone: a large model may evict several, each a little less asked for than
// it, and a model that takes long to load back counts no more than one
// that loads at once. Here a load that needs room picks its victims as
// GDSF does (Greedy-Dual-Size-Frequency): the idle models with the lowest
//
//	value = recent requests x (1 + load time / objective) / bytes
//
// first, until the room is found (a model whose reload takes two
// objectives loses about that many objectives' worth of its requests when
// it comes back; its load time is the last load's, 0 when never measured).
// The load goes ahead only if its model's recent requests are more than
// twice the victims' weighted requests together (twice: a model displacing
// another of about the same rate would be displaced back by the next
// fluctuation, each swap paying two loads); otherwise the request is
// refused at once (NotAdmitted). Models requested within the last
// objective are victims only after every other idle one (their next
// request is likely on their way), and then only for a newcomer that
// passes the same test against them, never for a colder one. When the
// room needs a model in use and the newcomer passes the test against it,
// the load waits for its requests to end. Learnt online: with the decay of
// the counts (countLocked), the resident set follows the requests' rate per
// byte without knowing the trace in advance.

// costMargin is how many times its victims' weighted requests a newcomer
// must have been asked for.
const costMargin = 2

// valueLocked is a loaded model's weighted recent requests: what evicting
// it is expected to cost.
func (e *Engine) valueLocked(ent *entry) float64 {
	return e.freq[ent.key.name] * (1 + float64(ent.expect)/float64(e.opts.Objective))
}

// costVictimsLocked chooses the models to evict so that short more bytes
// fit, or refuses the load (NotAdmitted). A pinned model or a new version
// of a name loaded is always let in: when the idle models do not make
// room, it waits for references to drop (nil victims).
func (e *Engine) costVictimsLocked(ent *entry, short int64) ([]*entry, error) {
	now := e.clock.Now()
	forced := ent.pinned || e.loadedLocked(ent.key.name)
	var idle, busy []*entry
	for _, o := range e.models {
		switch {
		case !o.ready || o.pinned:
		case o.refs == 0:
			idle = append(idle, o)
		case !forced:
			busy = append(busy, o)
		}
	}
	recent := func(o *entry) bool { return !o.lastUsed.IsZero() && now.Sub(o.lastUsed) < e.opts.Objective }
	byValue := func(a, b *entry) int {
		if ra, rb := recent(a), recent(b); ra != rb {
			if rb {
				return -1
			}
			return 1
		}
		va, vb := e.valueLocked(a)/float64(a.reserved), e.valueLocked(b)/float64(b.reserved)
		if va != vb {
			if va < vb {
				return -1
			}
			return 1
		}
		return a.lastUsed.Compare(b.lastUsed)
	}
	slices.SortFunc(idle, byValue)
	slices.SortFunc(busy, byValue)
	var victims []*entry
	var freed int64
	wait := false
	for _, o := range append(idle, busy...) {
		if freed >= short {
			break
		}
		victims = append(victims, o)
		freed += o.reserved
		wait = wait || o.refs > 0
	}
	if freed < short {
		return nil, nil // pinned models or loads hold the rest: wait (reserve says if never)
	}
	if forced {
		return victims, nil
	}
	lost := 0.0
	for _, v := range victims {
		lost += e.valueLocked(v)
	}
	if asked := e.freq[ent.key.name]; asked <= costMargin*lost {
		e.metrics.refusals.WithLabelValues(ent.key.name, "NotAdmitted").Inc()
		return nil, &serve.RefusedError{Reason: "NotAdmitted", Msg: fmt.Sprintf(
			"model %s is not loaded and would displace %s, asked for more lately for their memory (%.1f recent requests against %.1f weighted); it loads once asked for more than %d times as often",
			ent.key, names(victims), asked, lost, costMargin)}
	}
	if wait {
		return nil, nil // for the requests of the models in use to end
	}
	return victims, nil
}

func names(es []*entry) string {
	var ns []string
	for _, e := range es {
		ns = append(ns, e.key.name)
	}
	return strings.Join(ns, ", ")
}
