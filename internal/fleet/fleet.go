// Package fleet decides how many replicas of a served model to run, and
// where: in which spot zones and how many on on-demand capacity.
//
// A Policy is a function over an immutable Snapshot of the fleet (the
// replicas by pool and state, the recent request rate and backlog, the
// pools with their prices and availability, the objective and a replica's
// measured capacity) that returns Actions: start N replicas in a pool, stop
// a replica. A policy keeps whatever it must remember between decisions
// (hysteresis counters, zones it saw reclaimed) in the Memo it returns,
// which the caller hands back in the next Snapshot; it holds no state of its
// own, so the same code can run in a simulator (internal/fleet/sim) and, later,
// in a live control loop.
//
// Policies: Fixed (on-demand replicas sized for the peak), Reactive (Ray
// Serve's autoscaler), SpotHedge (SkyServe's, arXiv 2411.01438) and Virga
// (forecast the rate one start-up ahead, cover it with spot placed by each
// zone's reclaim rate as seen online and an on-demand floor sized so that the
// expected share of the load lost to reclaims stays within a budget).
// docs/fleet.md describes them.
package fleet

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"time"
)

// State is where a replica is in its life.
type State int

const (
	// Starting replicas are billed but not yet serving.
	Starting State = iota
	// Ready replicas serve requests.
	Ready
	// Draining replicas finish the requests they hold and then stop; they
	// take no new ones.
	Draining
)

func (s State) String() string {
	switch s {
	case Starting:
		return "starting"
	case Ready:
		return "ready"
	case Draining:
		return "draining"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Replica is one replica as a policy sees it.
type Replica struct {
	ID   int
	Pool string
	// State is starting, ready or draining.
	State State
	// Since is when the replica was launched.
	Since time.Time
	// Preempting is set once the cloud has given notice that it will
	// reclaim this (spot) replica; it still serves until then.
	Preempting bool
}

// Pool is a place replicas can be started: one spot zone, or on-demand.
type Pool struct {
	Name string
	// Zone groups pools whose spot capacity is reclaimed together.
	Zone string
	Spot bool
	// Price is dollars per replica-hour.
	Price float64
	// Available is whether a launch in this pool would succeed now. Only a
	// policy that chooses to look ahead of launch failures reads it (Virga);
	// SpotHedge learns availability from Events as SkyServe does.
	Available bool
}

// Sample is the load over one decision interval.
type Sample struct {
	// At is the end of the interval.
	At time.Time
	// Interval is its length.
	Interval time.Duration
	// Arrivals counts the requests that arrived during it.
	Arrivals int
	// Ongoing is the number of requests in flight or queued (at replicas
	// and at the router) at At.
	Ongoing int
}

// Rate is the sample's arrival rate in requests per second.
func (s Sample) Rate() float64 {
	if s.Interval <= 0 {
		return 0
	}
	return float64(s.Arrivals) / s.Interval.Seconds()
}

// EventKind says what happened to a pool or replica since the last decision.
type EventKind int

const (
	// Preempted: the cloud reclaimed Replica in Pool.
	Preempted EventKind = iota
	// LaunchFailed: a start in Pool failed for want of capacity.
	LaunchFailed
	// BecameReady: Replica in Pool finished starting.
	BecameReady
)

// Event is something that happened since the last decision.
type Event struct {
	Kind    EventKind
	Pool    string
	Replica int
	At      time.Time
}

// Snapshot is what a policy decides from. A policy must not modify it.
type Snapshot struct {
	// Now is the decision's time: policies read no clock.
	Now time.Time
	// Interval is the time between decisions.
	Interval time.Duration
	// Replicas are the fleet's live replicas (starting, ready or draining).
	Replicas []Replica
	// Pools are every pool a replica may be started in.
	Pools []Pool
	// History is the load over the recent decision intervals, oldest first;
	// the last ends at Now.
	History []Sample
	// Events happened since the previous decision, in time order.
	Events []Event
	// Objective is the latency a request must be answered within.
	Objective time.Duration
	// Capacity is the rate, in requests per second, one replica serves
	// within the objective (measured, not assumed).
	Capacity float64
	// StartUp is the time from launch to ready.
	StartUp time.Duration
	// Warning is the notice the cloud gives before it reclaims a spot
	// replica (Replica.Preempting is set for that long).
	Warning time.Duration
	// Memo is what the policy returned with its previous decision (nil at
	// first).
	Memo any
}

// ActionKind is what an action does.
type ActionKind int

const (
	// Start launches N replicas in Pool.
	Start ActionKind = iota
	// Stop drains Replica (a starting replica stops at once).
	Stop
)

// Action is one step of a decision.
type Action struct {
	Kind    ActionKind
	Pool    string
	N       int
	Replica int
}

func (a Action) String() string {
	if a.Kind == Start {
		return fmt.Sprintf("start %d in %s", a.N, a.Pool)
	}
	return fmt.Sprintf("stop %d", a.Replica)
}

// Decision is a policy's answer: the actions to take and the memo to hand
// back with the next snapshot.
type Decision struct {
	Actions []Action
	Memo    any
}

// Policy decides the fleet's next actions.
type Policy interface {
	// Name is the policy's short name, as the benchmark prints it.
	Name() string
	// Decide returns the actions for s. It depends only on s and rng
	// (used for tie-breaking only), so the same snapshot, memo and seed
	// give the same decision.
	Decide(s *Snapshot, rng *rand.Rand) Decision
}

// Rate is the mean arrival rate, in requests per second, over the last
// window of History (over all of it when shorter).
func (s *Snapshot) Rate(window time.Duration) float64 {
	n, d := 0, time.Duration(0)
	for i := len(s.History) - 1; i >= 0 && d < window; i-- {
		n += s.History[i].Arrivals
		d += s.History[i].Interval
	}
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// MeanOngoing is the mean of Ongoing over the last window of History.
func (s *Snapshot) MeanOngoing(window time.Duration) float64 {
	n, sum, d := 0, 0, time.Duration(0)
	for i := len(s.History) - 1; i >= 0 && d < window; i-- {
		sum += s.History[i].Ongoing
		d += s.History[i].Interval
		n++
	}
	if n == 0 {
		return 0
	}
	return float64(sum) / float64(n)
}

// Pool returns the pool named name, or nil.
func (s *Snapshot) Pool(name string) *Pool {
	for i := range s.Pools {
		if s.Pools[i].Name == name {
			return &s.Pools[i]
		}
	}
	return nil
}

// OnDemand is the cheapest on-demand pool, or nil.
func (s *Snapshot) OnDemand() *Pool {
	var best *Pool
	for i := range s.Pools {
		p := &s.Pools[i]
		if !p.Spot && (best == nil || p.Price < best.Price || p.Price == best.Price && p.Name < best.Name) {
			best = p
		}
	}
	return best
}

// live reports whether r still counts toward the fleet: starting or ready,
// not draining.
func live(r Replica) bool { return r.State != Draining }

// count is the number of live replicas matching keep.
func (s *Snapshot) count(keep func(Replica, *Pool) bool) int {
	n := 0
	for _, r := range s.Replicas {
		if live(r) && keep(r, s.Pool(r.Pool)) {
			n++
		}
	}
	return n
}

// stopOrder returns up to n live replicas matching keep, in the order to stop
// them: starting before ready (they serve nothing yet), then the most
// recently launched first, as SkyServe's scale-down does
// (_select_nonterminal_replicas_to_scale_down in sky/serve/autoscalers.py).
func (s *Snapshot) stopOrder(n int, keep func(Replica, *Pool) bool) []Action {
	var cand []Replica
	for _, r := range s.Replicas {
		if live(r) && keep(r, s.Pool(r.Pool)) {
			cand = append(cand, r)
		}
	}
	sort.SliceStable(cand, func(i, j int) bool {
		if (cand[i].State == Starting) != (cand[j].State == Starting) {
			return cand[i].State == Starting
		}
		if !cand[i].Since.Equal(cand[j].Since) {
			return cand[i].Since.After(cand[j].Since)
		}
		return cand[i].ID > cand[j].ID
	})
	var out []Action
	for i := 0; i < n && i < len(cand); i++ {
		out = append(out, Action{Kind: Stop, Replica: cand[i].ID})
	}
	return out
}

// periods is how many decisions of length interval make up d (at least 1).
func periods(d, interval time.Duration) int {
	if interval <= 0 {
		return 1
	}
	n := int(d / interval)
	if n < 1 {
		n = 1
	}
	return n
}
