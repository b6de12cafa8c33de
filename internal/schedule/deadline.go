// Package schedule holds Virga's scheduling policies: pure functions from
// what is known now (work left, time left, the capacity on offer, its prices
// and its measured reliability) to a decision. They never call a backend;
// the control loop and the simulator (internal/sim) apply the decisions, so
// the same code runs live and in virtual time.
//
// This file holds the single-job deadline policies: where one training job
// should run for the next decision interval (a spot node, an on-demand node,
// or nowhere) so that it finishes by its deadline at the least cost. The
// baselines are the three of Can't Be Late (Wu et al., NSDI 2024): on-demand
// only, greedy spot with a safety net, and Uniform Progress; Virga's own
// policy is Planned (planned.go).
package schedule

import (
	"time"
)

// Instance is where a job runs.
type Instance int8

// Instances.
const (
	None     Instance = iota // not running (waiting)
	Spot                     // a preemptible node
	OnDemand                 // a node that is never taken back
)

func (i Instance) String() string {
	switch i {
	case Spot:
		return "spot"
	case OnDemand:
		return "on-demand"
	}
	return "none"
}

// PoolStats is what is known of a spot pool's reliability, from its history
// (a trace, or what Virga measured of it).
type PoolStats struct {
	Available float64       // fraction of the time capacity is there, in [0, 1]
	MeanUp    time.Duration // mean length of a period with capacity (0: never ends if Available is 1, else unknown)
	MeanDown  time.Duration // mean length of an outage (0: unknown)
	// UpPeriods and Outages are the distributions of the lengths of up
	// periods and of outages measured; nil means they are taken as
	// memoryless with mean MeanUp or MeanDown.
	UpPeriods, Outages *Periods
}

// Job is one job's situation at a decision point. Times are durations since
// the job was submitted; work is measured in time on one on-demand node.
type Job struct {
	Elapsed  time.Duration // since submission
	Deadline time.Duration // since submission
	Work     time.Duration // total work
	Done     time.Duration // work done and kept so far
	// Unsaved is the part of Done a preemption now would throw away (done
	// since the last checkpoint).
	Unsaved time.Duration
	// Running is what the job holds now (after any preemption at this
	// instant); Starting is the restart overhead it still has to pay on it.
	Running  Instance
	Starting time.Duration
	SpotUp   bool // spot capacity is available now
	// DownFor is how long spot capacity has been unavailable (zero when
	// it is available now, or in the first interval of an outage).
	DownFor time.Duration
	// UpFor is how long spot capacity has been available (zero when it is
	// not, or in the first interval it is back).
	UpFor time.Duration

	// Overhead is the restart overhead: time from asking for a node to the
	// job making progress on it (getting the node, starting, restoring).
	Overhead time.Duration
	// Tick is the decision interval: the next decision comes this much later.
	Tick time.Duration
	// Checkpoint is the checkpoint interval, in work; zero means progress is
	// kept at a reclaim (the job checkpoints within the reclaim warning).
	Checkpoint time.Duration
	Pool       PoolStats
	// SpotPrice and OnDemandPrice are the node prices, per hour.
	SpotPrice, OnDemandPrice float64
}

// Left returns the work still to do.
func (j *Job) Left() time.Duration { return max(j.Work-j.Done, 0) }

// Remaining returns the time to the deadline.
func (j *Job) Remaining() time.Duration { return j.Deadline - j.Elapsed }

// Policy decides where a job runs until the next decision.
type Policy interface {
	Name() string
	// Decide returns where the job should run now. Returning Spot while
	// j.SpotUp is false means None.
	Decide(j *Job) Instance
}

// needOnDemand returns the time the job needs from now if it runs on
// on-demand capacity to the end: the work left plus the overhead of getting
// there.
func needOnDemand(j *Job) time.Duration {
	if j.Running == OnDemand {
		return j.Left() + j.Starting
	}
	return j.Left() + j.Overhead
}

// risk is the time a preemption during the next interval could cost beyond
// the restart: the work not yet saved, plus this interval's if progress is
// only kept at checkpoints.
func risk(j *Job) time.Duration {
	if j.Checkpoint <= 0 {
		return 0
	}
	return min(j.Unsaved+j.Tick, j.Checkpoint)
}

// mustOnDemand is the safety net every policy but on-demand-only shares:
// switch to on-demand (and stay) when waiting one more interval, or being
// preempted in it, could make the deadline unreachable even on on-demand.
func mustOnDemand(j *Job) bool {
	slack := j.Remaining() - needOnDemand(j)
	if j.Running == OnDemand {
		// Leaving on-demand for one interval costs the interval and a
		// later restart back onto on-demand.
		return slack < j.Tick+j.Overhead+risk(j)
	}
	return slack < j.Tick+risk(j)
}

// OnDemandOnly runs on on-demand capacity from start to end.
type OnDemandOnly struct{}

// Name implements Policy.
func (OnDemandOnly) Name() string { return "on-demand" }

// Decide implements Policy.
func (OnDemandOnly) Decide(*Job) Instance { return OnDemand }

// SpotOnly runs on spot capacity whenever there is some and waits
// otherwise, whatever the deadline: the plan with no on-demand fallback.
type SpotOnly struct{}

// Name implements Policy.
func (SpotOnly) Name() string { return "spot-only" }

// Decide implements Policy.
func (SpotOnly) Decide(j *Job) Instance {
	if j.SpotUp {
		return Spot
	}
	return None
}

// Greedy runs on spot capacity whenever there is some and waits otherwise,
// until the safety net moves it to on-demand for the rest of the job.
type Greedy struct{}

// Name implements Policy.
func (Greedy) Name() string { return "greedy" }

// Decide implements Policy.
func (Greedy) Decide(j *Job) Instance {
	switch {
	case j.Running == OnDemand || mustOnDemand(j):
		return OnDemand
	case j.SpotUp:
		return Spot
	}
	return None
}

// UniformProgress is Can't Be Late's policy (Wu et al., NSDI 2024, §4): the
// job should make progress at least along the line from no work at
// submission to all of it at the deadline, ep(t) = t·Work/Deadline. Spot
// capacity is used whenever there is some (and kept until it is reclaimed);
// with none, the job waits while it is on or ahead of the line, and starts
// on on-demand once behind it. On on-demand it stays while spot capacity is
// unavailable, whatever its progress (stopping would only pay another
// restart when it falls behind again); when spot capacity is back it moves
// there only once ahead of where the line will be two restart overheads of
// time later, Done > ep(Elapsed + 2·Overhead) (the hysteresis that keeps it
// from flapping). With Plain, there is no hysteresis: it moves to spot as
// soon as spot capacity is back. The safety net applies as for Greedy.
type UniformProgress struct {
	// Plain leaves on-demand for spot capacity as soon as there is some
	// (the paper's variant without the hysteresis).
	Plain bool
}

// Name implements Policy.
func (u UniformProgress) Name() string {
	if u.Plain {
		return "uniform-progress-plain"
	}
	return "uniform-progress"
}

// line is the work the job should have done at elapsed time t on the
// uniform progress line: t·Work/Deadline.
func line(j *Job, t time.Duration) time.Duration {
	return time.Duration(float64(j.Work) * float64(t) / float64(j.Deadline))
}

// Decide implements Policy.
func (u UniformProgress) Decide(j *Job) Instance {
	if mustOnDemand(j) {
		return OnDemand
	}
	if j.Running == OnDemand {
		if !j.SpotUp {
			return OnDemand
		}
		if !u.Plain && j.Done <= line(j, j.Elapsed+2*j.Overhead) {
			return OnDemand
		}
		return Spot
	}
	switch {
	case j.SpotUp:
		return Spot
	case j.Done < line(j, j.Elapsed):
		return OnDemand
	}
	return None
}
