package schedule

import (
	"testing"
	"time"
)

func job(elapsed, done time.Duration, running Instance, up bool) *Job {
	return &Job{
		Elapsed: elapsed, Deadline: 20 * time.Hour, Work: 10 * time.Hour, Done: done,
		Running: running, SpotUp: up, Overhead: 12 * time.Minute, Tick: 10 * time.Minute,
		Pool:      PoolStats{Available: 0.5, MeanUp: 2 * time.Hour, MeanDown: 2 * time.Hour},
		SpotPrice: 1, OnDemandPrice: 3,
	}
}

func TestSafetyNet(t *testing.T) {
	// 10h of work left, 10h20m to the deadline: one more idle tick and a
	// restart would leave 10h10m < 10h12m.
	j := job(9*time.Hour+40*time.Minute, 0, None, false)
	for _, p := range []Policy{Greedy{}, UniformProgress{}, UniformProgress{Plain: true}, &Planned{}} {
		if got := p.Decide(j); got != OnDemand {
			t.Errorf("%s: %s, want on-demand at the safety net", p.Name(), got)
		}
	}
	// With spot up it is too late for spot as well.
	j.SpotUp = true
	for _, p := range []Policy{Greedy{}, UniformProgress{}, UniformProgress{Plain: true}, &Planned{}} {
		if got := p.Decide(j); got != OnDemand {
			t.Errorf("%s: %s, want on-demand at the safety net with spot up", p.Name(), got)
		}
	}
}

func TestGreedy(t *testing.T) {
	g := Greedy{}
	if got := g.Decide(job(0, 0, None, true)); got != Spot {
		t.Errorf("spot up: %s", got)
	}
	if got := g.Decide(job(0, 0, None, false)); got != None {
		t.Errorf("spot down with slack: %s, want to wait", got)
	}
	if got := g.Decide(job(time.Hour, 0, OnDemand, true)); got != OnDemand {
		t.Errorf("on on-demand: %s, want to stay", got)
	}
}

func TestUniformProgress(t *testing.T) {
	u := UniformProgress{}
	// At 10h of 20h the line is at 5h of work.
	if got := u.Decide(job(10*time.Hour, 4*time.Hour, None, false)); got != OnDemand {
		t.Errorf("behind the line, spot down: %s", got)
	}
	if got := u.Decide(job(10*time.Hour, 6*time.Hour, None, false)); got != None {
		t.Errorf("ahead of the line, spot down: %s", got)
	}
	if got := u.Decide(job(10*time.Hour, 4*time.Hour, None, true)); got != Spot {
		t.Errorf("behind the line, spot up: %s, want spot", got)
	}
	if got := u.Decide(job(10*time.Hour, 5*time.Hour+10*time.Minute, OnDemand, true)); got != OnDemand {
		t.Errorf("on on-demand, ahead by less than 2 overheads of time: %s", got)
	}
	if got := u.Decide(job(10*time.Hour, 6*time.Hour, OnDemand, true)); got != Spot {
		t.Errorf("on on-demand, well ahead, spot up: %s", got)
	}
}

// Can't Be Late keeps on-demand while spot capacity is unavailable, however
// far ahead of the line the job is: stopping would only pay another restart
// once it falls behind again.
func TestUniformProgressKeepsOnDemandInAnOutage(t *testing.T) {
	for _, u := range []UniformProgress{{}, {Plain: true}} {
		if got := u.Decide(job(10*time.Hour, 8*time.Hour, OnDemand, false)); got != OnDemand {
			t.Errorf("%s: on on-demand, far ahead, spot down: %s, want to stay", u.Name(), got)
		}
	}
}

// The hysteresis compares progress with the line two restart overheads of
// time ahead, Done > (t+2d)·Work/Deadline, not with the line plus two
// restart overheads of work.
func TestUniformProgressHysteresisInTime(t *testing.T) {
	u := UniformProgress{}
	// Work/Deadline is 1/2 and d is 12m: at 10h the threshold is the line at
	// 10h24m, 5h12m of work (not 5h24m).
	if got := u.Decide(job(10*time.Hour, 5*time.Hour+15*time.Minute, OnDemand, true)); got != Spot {
		t.Errorf("on on-demand, done 5h15m > 5h12m, spot up: %s, want spot", got)
	}
	if got := u.Decide(job(10*time.Hour, 5*time.Hour+12*time.Minute, OnDemand, true)); got != OnDemand {
		t.Errorf("on on-demand, done 5h12m, not above the threshold: %s, want on-demand", got)
	}
}

// Without the hysteresis, the job leaves on-demand as soon as spot capacity
// is back, behind the line or not.
func TestUniformProgressPlain(t *testing.T) {
	u := UniformProgress{Plain: true}
	if u.Name() == (UniformProgress{}).Name() {
		t.Fatalf("plain and hysteresis variants share the name %q", u.Name())
	}
	if got := u.Decide(job(10*time.Hour, 4*time.Hour, OnDemand, true)); got != Spot {
		t.Errorf("plain, on on-demand behind the line, spot up: %s, want spot", got)
	}
	if got := (UniformProgress{}).Decide(job(10*time.Hour, 4*time.Hour, OnDemand, true)); got != OnDemand {
		t.Errorf("hysteresis, on on-demand behind the line, spot up: %s, want on-demand", got)
	}
	if got := u.Decide(job(10*time.Hour, 4*time.Hour, None, false)); got != OnDemand {
		t.Errorf("plain, behind the line, spot down: %s, want on-demand", got)
	}
	if got := u.Decide(job(10*time.Hour, 6*time.Hour, None, false)); got != None {
		t.Errorf("plain, ahead of the line, spot down: %s, want to wait", got)
	}
}

func TestPlanned(t *testing.T) {
	p := &Planned{}
	// A pool that is nearly always up: wait out a short outage, use spot
	// when it is there.
	j := job(0, 0, None, false)
	j.Pool = PoolStats{Available: 0.95, MeanUp: 10 * time.Hour, MeanDown: 30 * time.Minute}
	if got := p.Decide(j); got != None {
		t.Errorf("plentiful spot, down: %s, want to wait", got)
	}
	j.SpotUp = true
	if got := p.Decide(j); got != Spot {
		t.Errorf("plentiful spot, up: %s, want spot", got)
	}
	// On on-demand with much work and slack left, spot back: unlike Greedy,
	// move back to spot.
	j = job(2*time.Hour, time.Hour, OnDemand, true)
	j.Pool = PoolStats{Available: 0.6, MeanUp: 6 * time.Hour, MeanDown: 4 * time.Hour}
	if got := p.Decide(j); got != Spot {
		t.Errorf("on on-demand, spot back: %s, want spot", got)
	}
	// Spot runs far shorter than the restart overhead are not worth a move.
	j.Pool = PoolStats{Available: 0.5, MeanUp: 2 * time.Minute, MeanDown: 2 * time.Minute}
	if got := p.Decide(j); got != OnDemand {
		t.Errorf("on on-demand, spot flapping: %s, want to stay", got)
	}
}

// On spot capacity that is never reclaimed, running now and waiting cost
// the same: the tie goes to running, which finishes sooner.
func TestPlannedRunsOnATie(t *testing.T) {
	j := job(0, 0, None, true)
	j.Pool = PoolStats{Available: 1} // never reclaimed
	if got := (&Planned{}).Decide(j); got != Spot {
		t.Errorf("spot never reclaimed, up: %s, want spot", got)
	}
}

// With an hourly checkpoint on a pool whose up periods last half an hour on
// average, work done since the checkpoint is likely lost to a reclaim
// before the next: the plan stops (saving it, a stop checkpoints) rather
// than risk it, while it runs on spot just after a checkpoint. A plan that
// charged every reclaim the same loss would decide alike in both.
func TestPlannedTracksUnsavedWork(t *testing.T) {
	p := &Planned{}
	j := job(20*time.Hour-9*time.Hour-75*time.Minute, time.Hour, Spot, true)
	j.Checkpoint = time.Hour
	j.Pool = PoolStats{Available: 0.15, MeanUp: 30 * time.Minute, MeanDown: 3 * time.Hour}
	if got := p.Decide(j); got != Spot {
		t.Errorf("on spot, just checkpointed: %s, want spot", got)
	}
	j.Unsaved = 20 * time.Minute
	if mustOnDemand(j) {
		t.Fatal("the safety net decides, not the plan")
	}
	if got := p.Decide(j); got == Spot {
		t.Errorf("on spot, 20m unsaved: %s, want to stop and keep the work", got)
	}
}
