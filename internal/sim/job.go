// Package sim is Virga's discrete-event simulator: the same scheduling and
// search code as the live server, against a virtual clock and simulated
// capacity replaying real traces.
package sim

import (
	"fmt"
	"time"

	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/schedule"
)

// JobConfig is one training job replayed against a spot availability trace.
type JobConfig struct {
	Work     time.Duration // on-demand time the job needs
	Deadline time.Duration // from submission
	// Overhead is the restart overhead: billed time from getting a node to
	// the job making progress on it.
	Overhead time.Duration
	// Checkpoint is the checkpoint interval in work; zero means progress is
	// kept at a reclaim (saved within the warning).
	Checkpoint               time.Duration
	SpotPrice, OnDemandPrice float64 // per node-hour
	Billing                  capacity.Billing
	Pool                     schedule.PoolStats // handed to the policy
	// Horizon bounds the replay (from submission); 0 means four times the
	// deadline plus the work. A job unfinished by then ends unfinished.
	Horizon time.Duration
}

// JobResult is what happened to one job.
type JobResult struct {
	Cost float64 // dollars
	// Finish is when the job finished, from submission (the trace ran out
	// first if Finished is false).
	Finish       time.Duration
	Finished     bool
	Met          bool          // finished by the deadline
	SpotTime     time.Duration // billed on spot nodes
	OnDemandTime time.Duration // billed on on-demand nodes
	Preemptions  int
	Lost         time.Duration // work thrown away by preemptions
	Starts       int           // nodes started
}

// RunJob replays one job under policy p from tick start of an availability
// trace (up[i] tells whether spot capacity is there during tick i, each tick
// long). At most one node is held at a time; a decision is taken at every
// tick. A job still unfinished at the end of the trace sees no spot capacity.
func RunJob(p schedule.Policy, up []bool, tick time.Duration, start int, cfg JobConfig) (JobResult, error) {
	if tick <= 0 || cfg.Work <= 0 || cfg.Deadline <= 0 {
		return JobResult{}, fmt.Errorf("sim: tick, work and deadline must be positive")
	}
	if start < 0 || start >= len(up) {
		return JobResult{}, fmt.Errorf("sim: start tick %d outside the trace (%d ticks)", start, len(up))
	}
	var (
		res      JobResult
		j        = schedule.Job{Deadline: cfg.Deadline, Work: cfg.Work, Overhead: cfg.Overhead, Tick: tick, Checkpoint: cfg.Checkpoint, Pool: cfg.Pool, SpotPrice: cfg.SpotPrice, OnDemandPrice: cfg.OnDemandPrice}
		runStart time.Duration // when the node held was started
		saved    time.Duration // work kept by the latest checkpoint
	)
	release := func(at time.Duration) {
		if j.Running == schedule.None {
			return
		}
		billed := cfg.Billing.Billed(at - runStart)
		if j.Running == schedule.Spot {
			res.SpotTime += billed
			res.Cost += cfg.SpotPrice * billed.Hours()
		} else {
			res.OnDemandTime += billed
			res.Cost += cfg.OnDemandPrice * billed.Hours()
		}
		j.Running, j.Starting = schedule.None, 0
	}
	// The job may run past the deadline (if a policy missed it): bound the
	// replay so that a policy that never runs cannot loop for ever.
	limit := 4*cfg.Deadline + 4*cfg.Work + 4*cfg.Overhead
	if cfg.Horizon > 0 {
		limit = cfg.Horizon
	}
	// The outage (or up period) under way at the start began before the job, as the
	// pool's history tells.
	downFrom, upFrom := start, start
	for downFrom > 0 && !up[downFrom-1] {
		downFrom--
	}
	for upFrom > 0 && up[upFrom-1] {
		upFrom--
	}
	for i := start; ; i++ {
		j.Elapsed = time.Duration(i-start) * tick
		if j.Elapsed > limit {
			release(j.Elapsed)
			res.Finish = j.Elapsed
			return res, nil
		}
		j.SpotUp = i < len(up) && up[i]
		j.DownFor, j.UpFor = 0, 0
		if j.SpotUp {
			downFrom = i + 1
			j.UpFor = time.Duration(i-upFrom) * tick
		} else {
			upFrom = i + 1
			j.DownFor = time.Duration(i-downFrom) * tick
		}
		if j.Running == schedule.Spot && !j.SpotUp {
			// Reclaimed at the start of this tick: the unsaved work is lost.
			res.Preemptions++
			res.Lost += j.Unsaved
			j.Done = saved
			j.Unsaved = 0
			release(j.Elapsed)
		}
		want := p.Decide(&j)
		if want == schedule.Spot && !j.SpotUp {
			want = schedule.None
		}
		if want != j.Running {
			// A voluntary move: the job checkpoints as it is stopped.
			release(j.Elapsed)
			saved, j.Unsaved = j.Done, 0
			if want != schedule.None {
				j.Running, j.Starting = want, cfg.Overhead
				runStart = j.Elapsed
				res.Starts++
			}
		}
		if j.Running == schedule.None {
			continue
		}
		// Run one tick: first the overhead, then progress.
		used := min(j.Starting, tick)
		j.Starting -= used
		room := tick - used
		if left := j.Left(); left <= room {
			j.Done = cfg.Work
			res.Finish = j.Elapsed + used + left
			res.Finished = true
			res.Met = res.Finish <= cfg.Deadline
			release(res.Finish)
			return res, nil
		}
		j.Done += room
		if cfg.Checkpoint > 0 {
			saved += (j.Done - saved) / cfg.Checkpoint * cfg.Checkpoint
		} else {
			saved = j.Done
		}
		j.Unsaved = j.Done - saved
	}
}

// StatsOf measures a spot pool's reliability from an availability trace.
func StatsOf(up []bool, tick time.Duration) schedule.PoolStats {
	var s schedule.PoolStats
	if len(up) == 0 {
		return s
	}
	var nUp, upRuns, downRuns int
	var ups, outages []time.Duration // lengths of the up periods and outages
	for i, u := range up {
		if u {
			nUp++
		}
		if i == 0 || u != up[i-1] {
			if u {
				upRuns++
				ups = append(ups, 0)
			} else {
				downRuns++
				outages = append(outages, 0)
			}
		}
		if u {
			ups[len(ups)-1] += tick
		} else {
			outages[len(outages)-1] += tick
		}
	}
	s.UpPeriods, s.Outages = schedule.NewPeriods(ups), schedule.NewPeriods(outages)
	s.Available = float64(nUp) / float64(len(up))
	if upRuns > 0 {
		s.MeanUp = time.Duration(float64(nUp) / float64(upRuns) * float64(tick))
	}
	if downRuns > 0 {
		s.MeanDown = time.Duration(float64(len(up)-nUp) / float64(downRuns) * float64(tick))
	}
	return s
}
