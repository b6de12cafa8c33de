package engine

import (
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/serve/batch"
)

// TestAdaptiveForgetsAStall: one batch stalled 600x its profiled time (the
// process descheduled on a busy machine) makes a request look unable to
// meet a 20 ms objective, so deadline refuses it; once the stall is older
// than adaptiveAge, requests are served again although no batch ran since
// (none could: every request was refused).
func TestAdaptiveForgetsAStall(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := newAdaptive(&Profile{Max: 64, Points: []Point{{1, 50 * time.Microsecond}, {64, 1500 * time.Microsecond}}})
	a.observe(at, 1, 30*time.Millisecond)
	queue := func(now time.Time) []batch.Item {
		return []batch.Item{{Arrived: now, Deadline: now.Add(20 * time.Millisecond), Rows: 1}}
	}
	now := at.Add(time.Millisecond)
	a.refresh(now)
	if d := (&batch.Deadline{}).Decide(now, queue(now), 1, a); len(d.Refuse) != 1 {
		t.Fatalf("right after the stall, decision %+v, want the request refused (latency %v)", d, a.Latency(1))
	}
	now = at.Add(adaptiveAge + time.Millisecond)
	a.refresh(now)
	if got := a.Latency(1); got != 50*time.Microsecond {
		t.Fatalf("Latency(1) %v after the stall aged out, want the profiled 50µs", got)
	}
	if d := (&batch.Deadline{}).Decide(now, queue(now), 1, a); len(d.Run) != 1 {
		t.Fatalf("after the stall aged out, decision %+v, want the request run", d)
	}
}
