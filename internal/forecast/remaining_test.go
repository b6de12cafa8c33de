package forecast

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)

// TestRemainingFromTheRunsRate: halfway through after 10 minutes and $2,
// the rest takes about 10 minutes and $2 more, with a spread around it; a
// deadline 30 minutes away is likely met, one 5 minutes away is not.
func TestRemainingFromTheRunsRate(t *testing.T) {
	in := Input{Started: t0, Now: t0.Add(10 * time.Minute), Done: 50, Total: 100, Spent: 2,
		Deadline: t0.Add(40 * time.Minute), Budget: 3}
	f, ok := Remaining(in)
	if !ok {
		t.Fatal("no forecast halfway")
	}
	if f.Done != 0.5 || f.Left.Round(time.Second) != 10*time.Minute || math.Abs(f.More-2) > 1e-9 || f.FromBefore != 0 {
		t.Errorf("forecast %+v, want half done, 10m and $2 left", f)
	}
	if !(f.LeftP10 < f.Left && f.Left < f.LeftP90) || !(f.MoreP10 < f.More && f.More < f.MoreP90) {
		t.Errorf("forecast %+v: want p10 < median < p90", f)
	}
	if f.PDeadline == nil || *f.PDeadline < 0.99 {
		t.Errorf("P(deadline) %v with 30 minutes for 10, want nearly 1", f.PDeadline)
	}
	// $1 of budget left for $2 of work: unlikely.
	if f.PBudget == nil || *f.PBudget > 0.05 {
		t.Errorf("P(budget) %v with $1 left for $2, want nearly 0", f.PBudget)
	}
	in.Deadline = t0.Add(15 * time.Minute)
	f, _ = Remaining(in)
	if *f.PDeadline > 0.05 {
		t.Errorf("P(deadline) %v with 5 minutes for 10, want nearly 0", *f.PDeadline)
	}
	// As the forecast of the run itself had it: the spread of what is
	// left narrows as the run goes on.
	late := Input{Started: t0, Now: t0.Add(18 * time.Minute), Done: 90, Total: 100, Spent: 3.6}
	g, _ := Remaining(late)
	if a, b := math.Log(float64(f.LeftP90)/float64(f.Left)), math.Log(float64(g.LeftP90)/float64(g.Left)); b >= a {
		t.Errorf("spread at 90%% done %.3f, at 50%% %.3f: want narrower", b, a)
	}
}

// TestRemainingBeforeAnyStep: before any step has run, the forecast is the
// one made before the run; with neither, there is none; at the end
// nothing is left.
func TestRemainingBeforeAnyStep(t *testing.T) {
	in := Input{Started: t0, Now: t0.Add(time.Minute), Total: 100, Before: &Before{Wall: time.Hour, Cost: 10}, Deadline: t0.Add(2 * time.Hour)}
	f, ok := Remaining(in)
	if !ok || f.Left.Round(time.Second) != time.Hour || math.Abs(f.More-10) > 1e-9 || f.FromBefore != 1 || f.End.Round(time.Second) != t0.Add(61*time.Minute) {
		t.Errorf("forecast %+v (%v), want the forecast before the run", f, ok)
	}
	in.Before = nil
	if _, ok := Remaining(in); ok {
		t.Error("a forecast from nothing")
	}
	done := Input{Started: t0, Now: t0.Add(time.Hour), Done: 100, Total: 100, Spent: 5, Deadline: t0.Add(2 * time.Hour), Budget: 6}
	f, ok = Remaining(done)
	if !ok || f.Left != 0 || f.More != 0 || *f.PDeadline != 1 || *f.PBudget != 1 {
		t.Errorf("at the end: %+v", f)
	}
}

// TestRemainingBlends: a quarter done, the run's own rate and the forecast
// before the run weigh 1/4 and 3/4 (geometrically).
func TestRemainingBlends(t *testing.T) {
	in := Input{Started: t0, Now: t0.Add(10 * time.Minute), Done: 25, Total: 100, Spent: 1,
		Before: &Before{Wall: 80 * time.Minute, Cost: 8}}
	f, _ := Remaining(in)
	// Own rate: 30m left; before: 60m left. exp(0.25 ln 30 + 0.75 ln 60) = 50.45m.
	want := math.Exp(0.25*math.Log(30) + 0.75*math.Log(60))
	if got := f.Left.Minutes(); math.Abs(got-want) > 0.01 || f.FromBefore != 0.75 {
		t.Errorf("left %.2fm (from before %.2f), want %.2fm (0.75)", got, f.FromBefore, want)
	}
}
