package control_test

import (
	"bytes"
	"testing"

	"github.com/virga-ml/virga"
)

// TestVolatileStoreGetsSearcherAtEnd: a controller writes its searcher's
// snapshot with every commit that changed it (recovery restores the
// searcher from it), except on a volatile store (Config.Volatile, the
// simulator's), where it writes it once, when the experiment ends; the
// snapshot written then is the one a durable store holds at the end.
func TestVolatileStoreGetsSearcherAtEnd(t *testing.T) {
	final := map[bool][]byte{}
	for _, volatile := range []bool{false, true} {
		h := newHarness(t)
		h.volatile = volatile
		h.start(newFakeBackend())
		e := h.submit(expYAML("v", "max_trials: 1"))
		submitted := h.exp(e.ID).SearcherState
		s := h.nextStart()
		h.started(s)
		h.report(s.AttemptID, 1, 0.5)
		afterReport := h.exp(e.ID).SearcherState
		if changed := !bytes.Equal(afterReport, submitted); changed == volatile {
			t.Errorf("volatile %v: searcher snapshot changed by a report: %v, want %v", volatile, changed, !volatile)
		}
		h.exited(s.AttemptID, 0)
		final[volatile] = h.waitExp(e.ID, virga.ExperimentCompleted).SearcherState
		h.crash()
	}
	if !bytes.Equal(final[true], final[false]) {
		t.Errorf("searcher snapshot at the end on a volatile store\n%s\nwant (durable store)\n%s", final[true], final[false])
	}
}
