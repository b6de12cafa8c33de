package schedule

import (
	"testing"
	"time"
)

// longTailed returns outages of a pool whose outages mostly last ten
// minutes, one in twenty ten hours: their mean is about forty minutes.
func longTailed() []time.Duration {
	var ls []time.Duration
	for i := range 200 {
		if i%20 == 0 {
			ls = append(ls, 10*time.Hour)
		} else {
			ls = append(ls, 10*time.Minute)
		}
	}
	return ls
}

func meanOf(ls []time.Duration) time.Duration {
	var sum time.Duration
	for _, l := range ls {
		sum += l
	}
	return sum / time.Duration(len(ls))
}

// The chance that capacity comes back in the next tick falls as an outage
// gets long when most outages are short and a few very long.
func TestOutageReturnRateFallsWithAge(t *testing.T) {
	ls := longTailed()
	out := NewPeriods(ls)
	tick := 10 * time.Minute
	edges := ageEdges(60)
	rates := out.endRates(tick, edges, float64(tick)/float64(meanOf(ls)))
	// At age 0 nineteen outages in twenty end within the tick.
	if rates[0] < 0.8 {
		t.Errorf("return rate at age 0: %.3f, want most outages to end", rates[0])
	}
	// Past the first tick, only the ten-hour outages are left.
	for b := 1; b < len(edges); b++ {
		if rates[b] > rates[0]/5 {
			t.Errorf("return rate at age %d ticks: %.3f, want at most a fifth of %.3f at age 0", edges[b], rates[b], rates[0])
		}
	}
}

func TestAgeEdges(t *testing.T) {
	got := ageEdges(40)
	want := []int{0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32}
	if len(got) != len(want) {
		t.Fatalf("ageEdges(40) = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ageEdges(40) = %v, want %v", got, want)
		}
	}
	if got := ageEdges(1); len(got) != 1 || got[0] != 0 {
		t.Errorf("ageEdges(1) = %v, want [0]", got)
	}
}

// With two hours of slack, the plan waits at the start of an outage (most
// end within minutes) but moves to on-demand once the outage has lasted half
// an hour (then it likely lasts hours more), where a memoryless model of the
// same mean outage would still wait.
func TestPlannedLeavesALongOutage(t *testing.T) {
	ls := longTailed()
	pool := PoolStats{Available: 0.9, MeanUp: 6 * time.Hour, MeanDown: meanOf(ls), Outages: NewPeriods(ls)}
	j := job(9*time.Hour, time.Hour, None, false)
	j.Pool = pool
	p := &Planned{}
	if got := p.Decide(j); got != None {
		t.Errorf("outage just begun: %s, want to wait", got)
	}
	j.DownFor = 30 * time.Minute
	if got := p.Decide(j); got != OnDemand {
		t.Errorf("outage half an hour old: %s, want on-demand", got)
	}
	j.Pool.Outages = nil
	if got := p.Decide(j); got != None {
		t.Errorf("memoryless outages, half an hour old: %s, want to wait", got)
	}
}

// blippy returns up periods of a pool where half the up periods last one
// tick (ten minutes) and half ten hours.
func blippy() []time.Duration {
	var ls []time.Duration
	for i := range 100 {
		if i%2 == 0 {
			ls = append(ls, 10*time.Minute)
		} else {
			ls = append(ls, 10*time.Hour)
		}
	}
	return ls
}

// On on-demand when spot capacity comes back, a move costs a restart: the
// plan does not move while the up period is young (half end within the
// tick, before the restart is paid) and moves once it has lasted, where a
// memoryless model of the same mean up period moves at once.
func TestPlannedWaitsOutABlip(t *testing.T) {
	ups := blippy()
	pool := PoolStats{Available: 0.8, MeanUp: meanOf(ups), MeanDown: time.Hour, UpPeriods: NewPeriods(ups)}
	p := &Planned{}
	j := job(2*time.Hour, time.Hour, OnDemand, true)
	j.Pool = pool
	if got := p.Decide(j); got == Spot {
		t.Errorf("spot just back: %s, want to let the tick pass", got)
	}
	j.UpFor = 30 * time.Minute
	if got := p.Decide(j); got != Spot {
		t.Errorf("spot back for half an hour: %s, want spot", got)
	}
	j.UpFor = 0
	j.Pool.UpPeriods = nil
	if got := p.Decide(j); got != Spot {
		t.Errorf("memoryless up periods, spot just back: %s, want spot", got)
	}
}
