package engine

import (
	"fmt"

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
