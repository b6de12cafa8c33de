package main

import (
	"math"
	"testing"
	"time"
)

// drifting is a machine whose load grows while it is measured: each call
// costs base times a factor that rises with every call made, the path's
// extra on top.
type drifting struct {
	t     time.Time
	calls int
}

func (m *drifting) now() time.Time { return m.t }

func (m *drifting) call(extra time.Duration) func() error {
	return func() error {
		load := 1 + float64(m.calls)/1000
		m.calls++
		m.t = m.t.Add(time.Duration(load*float64(100*time.Microsecond)) + extra)
		return nil
	}
}

// TestTimePairedDrift checks that the overhead timePaired measures is the
// path's own while the machine's load drifts, where timing direct first and
// the path after (as the overhead command did) adds the drift to it.
func TestTimePairedDrift(t *testing.T) {
	const extra = 10 * time.Microsecond
	const n = 500

	m := &drifting{t: time.Unix(0, 0)}
	path, direct, err := timePaired("engine", 64, n, m.now, m.call(0), m.call(extra))
	if err != nil {
		t.Fatal(err)
	}
	if path.N != n || direct.N != n {
		t.Fatalf("timed %d path and %d direct calls, want %d each", path.N, direct.N, n)
	}
	t.Logf("paired p50 overhead %.1fus", path.P50us-direct.P50us)
	if got := path.P50us - direct.P50us; math.Abs(got-10) > 2 {
		t.Errorf("paired p50 overhead %.1fus, want 10us +- 2us (direct %.1fus, path %.1fus)", got, direct.P50us, path.P50us)
	}

	// The same machine timed one after the other.
	m = &drifting{t: time.Unix(0, 0)}
	d, err := sample(n, m.now, m.call(0))
	if err != nil {
		t.Fatal(err)
	}
	p, err := sample(n, m.now, m.call(extra))
	if err != nil {
		t.Fatal(err)
	}
	got := latencyOf("engine", 64, p).P50us - latencyOf("direct", 64, d).P50us
	t.Logf("sequential p50 overhead %.1fus", got)
	if got < 30 {
		t.Errorf("sequential p50 overhead %.1fus: the drift should inflate it well past 10us", got)
	}
}
