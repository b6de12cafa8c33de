// Package sim is a deterministic discrete-event simulator of a fleet of
// model replicas on spot and on-demand capacity, driven by a fleet.Policy.
//
// Requests arrive at the times given (a scaled, tiled real trace or a
// Poisson process). A router sends each to the less loaded of two ready
// replicas picked at random (least outstanding requests), or holds it while
// no replica is ready. A replica serves Slots requests at once, each for
// Service; the others wait in its FIFO queue. A request is answered within
// the objective when it completes by arrival + Objective; a request that can
// no longer complete in time when its turn comes is dropped, not served
// late (Clockwork's rule), so a backlog does not snowball.
//
// Spot capacity follows real availability traces, one per zone: while a
// zone's trace is down, launches there fail, and the replicas in it are
// reclaimed when it goes down, after a notice of Warning. Their in-flight and
// queued requests go back to the router, keeping their deadlines. Each
// replica is billed per second from launch until it stops or is reclaimed,
// at its pool's price.
//
// Every Interval the policy sees a fleet.Snapshot and its actions are
// applied at once. Nothing reads a clock or a global random source: the
// same Config gives the same Result.
package sim

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/virga-ml/virga/internal/capacity/trace"
	"github.com/virga-ml/virga/internal/fleet"
)

// Config is one simulation.
type Config struct {
	// Arrivals are request arrival times from the start of the run, in
	// nondecreasing order; those at or after Duration are ignored.
	Arrivals []time.Duration
	// Duration is the simulated span; WarmUp of it, at the start, is run
	// but neither billed nor counted in the Result.
	Duration, WarmUp time.Duration
	// Pools are where replicas may run. A spot pool's availability is its
	// Zone's trace in Zones; the Available field is ignored.
	Pools []fleet.Pool
	// Zones maps a spot zone to its availability trace, read from Offset on.
	Zones  map[string]*trace.Availability
	Offset time.Duration
	// Warning is the notice given before a spot reclaim.
	Warning time.Duration
	// StartUp is the time from launch to ready.
	StartUp time.Duration
	// Service is one request's service time on a replica; Slots how many a
	// replica serves at once.
	Service time.Duration
	Slots   int
	// Objective is the latency a request must be answered within.
	Objective time.Duration
	// Capacity is what policies are told one replica serves within the
	// objective, in requests per second (see MeasureCapacity).
	Capacity float64
	// Interval is the time between decisions (0: 10 s); History how far
	// back snapshots show the load (0: 30 min).
	Interval, History time.Duration
	Policy            fleet.Policy
	Seed              uint64
	// Epoch is the wall time of the run's start, as snapshots show it.
	Epoch time.Time
	// Observe, when set, sees every snapshot and the decision taken on it
	// (for tests and traces; it must not keep the snapshot's slices).
	Observe func(*fleet.Snapshot, fleet.Decision)
}

// Result is what a run measured after the warm-up.
type Result struct {
	Policy string
	// Requests arrived; OnTime were answered within the objective.
	Requests, OnTime int
	// Cost is in dollars; ReplicaSeconds is billed time by pool.
	Cost           float64
	ReplicaSeconds map[string]float64
	// Minutes counts whole minutes; MinutesOK those in which at least 99%
	// of the requests that arrived were answered within the objective.
	Minutes, MinutesOK int
	// Preemptions counts reclaimed replicas, LaunchFailures failed spot
	// launches; PeakReplicas the most live replicas at once.
	Preemptions, LaunchFailures, PeakReplicas int
	// OnDemandShare is the share of the cost spent on on-demand replicas.
	OnDemandShare float64
}

// Share is the share of requests answered within the objective.
func (r *Result) Share() float64 {
	if r.Requests == 0 {
		return 1
	}
	return float64(r.OnTime) / float64(r.Requests)
}

// Availability is the share of minutes with at least 99% of requests
// answered within the objective.
func (r *Result) Availability() float64 {
	if r.Minutes == 0 {
		return 1
	}
	return float64(r.MinutesOK) / float64(r.Minutes)
}

// CostPerMillion is dollars per million requests.
func (r *Result) CostPerMillion() float64 {
	if r.Requests == 0 {
		return 0
	}
	return r.Cost / float64(r.Requests) * 1e6
}

// Errors for a Config that cannot run.
var (
	ErrConfig = errors.New("invalid simulation config")
)

type evKind uint8

const (
	evComplete evKind = iota // a = request, b = attempt
	evReady                  // a = replica
	evWarn                   // a = zone
	evDown                   // a = zone
	evUp                     // a = zone
	evDecide
)

type event struct {
	at   time.Duration
	seq  uint64
	kind evKind
	a, b int32
}

type events []event

func (h events) Len() int { return len(h) }
func (h events) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h events) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *events) Push(x any)   { *h = append(*h, x.(event)) }
func (h *events) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

type replica struct {
	id         int
	pool       int
	state      fleet.State
	launched   time.Duration
	preempting bool
	dead       bool
	queue      []int32 // FIFO, from head
	head       int
	serving    []int32 // requests in service
}

func (r *replica) outstanding() int { return len(r.queue) - r.head + len(r.serving) }

type request struct {
	attempt int32
	owner   int32 // replica serving or queueing it, -1 when none
	done    bool
}

type simulator struct {
	cfg      Config
	rng      *rand.Rand
	prng     *rand.Rand
	ev       events
	seq      uint64
	now      time.Duration
	reqs     []request
	replicas []*replica
	ready    []int // ids of ready replicas
	waiting  []int32
	zoneIdx  map[string]int
	zoneUp   []bool
	zoneName []string
	res      Result
	minTotal []int
	minOK    []int
	events   []fleet.Event
	history  []fleet.Sample
	arrived  int // arrivals in the current interval
	memo     any
	spend    map[string]float64
}

// Run simulates cfg.
func Run(cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.History <= 0 {
		cfg.History = 30 * time.Minute
	}
	s := &simulator{
		cfg:     cfg,
		rng:     rand.New(rand.NewPCG(cfg.Seed, 0x5eed_0001)),
		prng:    rand.New(rand.NewPCG(cfg.Seed, 0x5eed_0002)),
		zoneIdx: map[string]int{},
		spend:   map[string]float64{},
	}
	s.res.Policy = cfg.Policy.Name()
	s.res.ReplicaSeconds = map[string]float64{}
	n := 0
	for n < len(cfg.Arrivals) && cfg.Arrivals[n] < cfg.Duration {
		n++
	}
	s.reqs = make([]request, n)
	minutes := int(math.Ceil((cfg.Duration - cfg.WarmUp).Minutes()))
	s.minTotal = make([]int, minutes)
	s.minOK = make([]int, minutes)
	s.scheduleZones()
	s.push(event{at: 0, kind: evDecide})
	s.loop(n)
	s.finish()
	return &s.res, nil
}

func (c *Config) validate() error {
	switch {
	case c.Policy == nil:
		return fmt.Errorf("%w: no policy", ErrConfig)
	case c.Duration <= 0 || c.WarmUp < 0 || c.WarmUp >= c.Duration:
		return fmt.Errorf("%w: duration %v and warm-up %v: want 0 <= warm-up < duration", ErrConfig, c.Duration, c.WarmUp)
	case c.Service <= 0 || c.Slots < 1:
		return fmt.Errorf("%w: service %v with %d slots: want a positive time and at least one slot", ErrConfig, c.Service, c.Slots)
	case c.Objective < c.Service:
		return fmt.Errorf("%w: objective %v is shorter than the service time %v", ErrConfig, c.Objective, c.Service)
	case len(c.Pools) == 0:
		return fmt.Errorf("%w: no pools", ErrConfig)
	}
	for i := 1; i < len(c.Arrivals); i++ {
		if c.Arrivals[i] < c.Arrivals[i-1] {
			return fmt.Errorf("%w: arrival %d (%v) is before arrival %d (%v)", ErrConfig, i, c.Arrivals[i], i-1, c.Arrivals[i-1])
		}
	}
	for _, p := range c.Pools {
		if !p.Spot {
			continue
		}
		a := c.Zones[p.Zone]
		if a == nil {
			return fmt.Errorf("%w: spot pool %s: no availability trace for zone %q", ErrConfig, p.Name, p.Zone)
		}
		if c.Offset < 0 || c.Offset+c.Duration > a.Duration() {
			return fmt.Errorf("%w: zone %s: offset %v + duration %v is past the trace's end (%v)", ErrConfig, p.Zone, c.Offset, c.Duration, a.Duration())
		}
	}
	return nil
}

func (s *simulator) push(e event) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.ev, e)
}

// scheduleZones turns each zone's trace into up, warning and down events.
func (s *simulator) scheduleZones() {
	for _, p := range s.cfg.Pools {
		if !p.Spot {
			continue
		}
		if _, ok := s.zoneIdx[p.Zone]; ok {
			continue
		}
		z := len(s.zoneName)
		s.zoneIdx[p.Zone] = z
		s.zoneName = append(s.zoneName, p.Zone)
		a := s.cfg.Zones[p.Zone]
		up := a.UpAt(s.cfg.Offset)
		s.zoneUp = append(s.zoneUp, up)
		first := int(s.cfg.Offset/a.Tick) + 1
		for i := first; time.Duration(i)*a.Tick < s.cfg.Offset+s.cfg.Duration; i++ {
			if a.Up(i) == up {
				continue
			}
			up = a.Up(i)
			at := time.Duration(i)*a.Tick - s.cfg.Offset
			if up {
				s.push(event{at: at, kind: evUp, a: int32(z)})
				continue
			}
			s.push(event{at: max(0, at-s.cfg.Warning), kind: evWarn, a: int32(z)})
			s.push(event{at: at, kind: evDown, a: int32(z)})
		}
	}
}

func (s *simulator) loop(n int) {
	next := 0
	for {
		var at time.Duration = math.MaxInt64
		if next < n {
			at = s.cfg.Arrivals[next]
		}
		if len(s.ev) > 0 && s.ev[0].at <= at {
			e := heap.Pop(&s.ev).(event)
			if e.at >= s.cfg.Duration && e.kind != evComplete {
				continue // after the end only the requests in flight finish
			}
			s.now = e.at
			s.handle(e)
			continue
		}
		if next >= n {
			return
		}
		s.now = at
		s.arrived++
		s.route(int32(next))
		next++
	}
}

func (s *simulator) handle(e event) {
	switch e.kind {
	case evComplete:
		r := &s.reqs[e.a]
		if r.attempt != e.b || r.done {
			return // its replica was reclaimed; the request was re-routed
		}
		rep := s.replicas[r.owner]
		rep.serving = remove(rep.serving, e.a)
		s.complete(e.a, true)
		s.serveNext(rep)
	case evReady:
		rep := s.replicas[e.a]
		if rep.dead || rep.state != fleet.Starting {
			return
		}
		rep.state = fleet.Ready
		s.ready = append(s.ready, rep.id)
		s.events = append(s.events, fleet.Event{Kind: fleet.BecameReady, Pool: s.cfg.Pools[rep.pool].Name, Replica: rep.id, At: s.wall()})
		w := s.waiting
		s.waiting = nil
		for _, q := range w {
			s.route(q)
		}
	case evWarn:
		for _, rep := range s.replicas {
			if !rep.dead && s.zoneOf(rep) == int(e.a) {
				rep.preempting = true
			}
		}
	case evDown:
		s.zoneUp[e.a] = false
		for _, rep := range s.replicas {
			if !rep.dead && s.zoneOf(rep) == int(e.a) {
				s.preempt(rep)
			}
		}
	case evUp:
		s.zoneUp[e.a] = true
	case evDecide:
		s.decide()
		s.push(event{at: s.now + s.cfg.Interval, kind: evDecide})
	}
}

func (s *simulator) wall() time.Time { return s.cfg.Epoch.Add(s.now) }

func (s *simulator) zoneOf(rep *replica) int {
	p := s.cfg.Pools[rep.pool]
	if !p.Spot {
		return -1
	}
	return s.zoneIdx[p.Zone]
}

func remove(xs []int32, x int32) []int32 {
	for i, y := range xs {
		if y == x {
			xs[i] = xs[len(xs)-1]
			return xs[:len(xs)-1]
		}
	}
	return xs
}

// complete records request q's outcome.
func (s *simulator) complete(q int32, onTime bool) {
	r := &s.reqs[q]
	r.done, r.owner = true, -1
	at := s.cfg.Arrivals[q]
	if at < s.cfg.WarmUp {
		return
	}
	m := int((at - s.cfg.WarmUp) / time.Minute)
	s.res.Requests++
	s.minTotal[m]++
	if onTime {
		s.res.OnTime++
		s.minOK[m]++
	}
}

func (s *simulator) deadline(q int32) time.Duration { return s.cfg.Arrivals[q] + s.cfg.Objective }

// route sends request q to the less loaded of two random ready replicas,
// or holds it at the router while none is ready.
func (s *simulator) route(q int32) {
	if s.now+s.cfg.Service > s.deadline(q) {
		s.complete(q, false)
		return
	}
	var rep *replica
	switch len(s.ready) {
	case 0:
		s.reqs[q].owner = -1
		s.waiting = append(s.waiting, q)
		return
	case 1:
		rep = s.replicas[s.ready[0]]
	default:
		i := s.rng.IntN(len(s.ready))
		j := s.rng.IntN(len(s.ready) - 1)
		if j >= i {
			j++
		}
		a, b := s.replicas[s.ready[i]], s.replicas[s.ready[j]]
		rep = a
		if b.outstanding() < a.outstanding() {
			rep = b
		}
	}
	s.reqs[q].owner = int32(rep.id)
	if len(rep.serving) < s.cfg.Slots {
		s.serve(rep, q)
		return
	}
	rep.queue = append(rep.queue, q)
}

func (s *simulator) serve(rep *replica, q int32) {
	rep.serving = append(rep.serving, q)
	s.push(event{at: s.now + s.cfg.Service, kind: evComplete, a: q, b: s.reqs[q].attempt})
}

// serveNext fills rep's free slots from its queue, dropping requests that
// can no longer finish in time, and stops a drained replica.
func (s *simulator) serveNext(rep *replica) {
	for len(rep.serving) < s.cfg.Slots && rep.head < len(rep.queue) {
		q := rep.queue[rep.head]
		rep.head++
		if s.now+s.cfg.Service > s.deadline(q) {
			s.complete(q, false)
			continue
		}
		s.serve(rep, q)
	}
	if rep.head == len(rep.queue) {
		rep.queue, rep.head = rep.queue[:0], 0
	} else if rep.head > 1024 && rep.head*2 > len(rep.queue) {
		rep.queue = append(rep.queue[:0], rep.queue[rep.head:]...)
		rep.head = 0
	}
	if rep.state == fleet.Draining && rep.outstanding() == 0 {
		s.terminate(rep)
	}
}

// terminate stops billing rep and takes it out of service.
func (s *simulator) terminate(rep *replica) {
	if rep.dead {
		return
	}
	rep.dead = true
	for i, id := range s.ready {
		if id == rep.id {
			s.ready = append(s.ready[:i], s.ready[i+1:]...)
			break
		}
	}
	from := max(rep.launched, s.cfg.WarmUp)
	to := min(s.now, s.cfg.Duration)
	if to > from {
		p := s.cfg.Pools[rep.pool]
		sec := (to - from).Seconds()
		s.res.ReplicaSeconds[p.Name] += sec
		s.spend[p.Name] += sec * p.Price / 3600
	}
}

// preempt reclaims rep and sends its requests back to the router.
func (s *simulator) preempt(rep *replica) {
	if s.now >= s.cfg.WarmUp {
		s.res.Preemptions++
	}
	s.events = append(s.events, fleet.Event{Kind: fleet.Preempted, Pool: s.cfg.Pools[rep.pool].Name, Replica: rep.id, At: s.wall()})
	orphans := append(append([]int32(nil), rep.serving...), rep.queue[rep.head:]...)
	rep.serving, rep.queue, rep.head = nil, nil, 0
	s.terminate(rep)
	for _, q := range orphans {
		s.reqs[q].attempt++
		s.route(q)
	}
}

func (s *simulator) launch(pool int, n int) {
	p := s.cfg.Pools[pool]
	if p.Spot && !s.zoneUp[s.zoneIdx[p.Zone]] {
		if s.now >= s.cfg.WarmUp {
			s.res.LaunchFailures += n
		}
		s.events = append(s.events, fleet.Event{Kind: fleet.LaunchFailed, Pool: p.Name, Replica: -1, At: s.wall()})
		return
	}
	for range n {
		rep := &replica{id: len(s.replicas), pool: pool, state: fleet.Starting, launched: s.now}
		s.replicas = append(s.replicas, rep)
		s.push(event{at: s.now + s.cfg.StartUp, kind: evReady, a: int32(rep.id)})
	}
}

func (s *simulator) stop(id int) {
	if id < 0 || id >= len(s.replicas) {
		return
	}
	rep := s.replicas[id]
	if rep.dead || rep.state == fleet.Draining {
		return
	}
	if rep.state == fleet.Starting {
		rep.state = fleet.Draining
		s.terminate(rep)
		return
	}
	rep.state = fleet.Draining
	for i, rid := range s.ready {
		if rid == rep.id {
			s.ready = append(s.ready[:i], s.ready[i+1:]...)
			break
		}
	}
	if rep.outstanding() == 0 {
		s.terminate(rep)
	}
}

// decide records the last interval's load, shows the policy a snapshot and
// applies its actions.
func (s *simulator) decide() {
	ongoing := len(s.waiting)
	live := 0
	for _, rep := range s.replicas {
		if !rep.dead {
			ongoing += rep.outstanding()
			live++
		}
	}
	if s.now > 0 {
		s.history = append(s.history, fleet.Sample{At: s.wall(), Interval: s.cfg.Interval, Arrivals: s.arrived, Ongoing: ongoing})
		keep := int(s.cfg.History / s.cfg.Interval)
		if len(s.history) > keep {
			s.history = append(s.history[:0], s.history[len(s.history)-keep:]...)
		}
	}
	s.arrived = 0
	if s.now >= s.cfg.WarmUp {
		s.res.PeakReplicas = max(s.res.PeakReplicas, live)
	}
	snap := &fleet.Snapshot{
		Now:       s.wall(),
		Interval:  s.cfg.Interval,
		History:   append([]fleet.Sample(nil), s.history...),
		Events:    s.events,
		Objective: s.cfg.Objective,
		Capacity:  s.cfg.Capacity,
		StartUp:   s.cfg.StartUp,
		Warning:   s.cfg.Warning,
		Memo:      s.memo,
	}
	s.events = nil
	for _, rep := range s.replicas {
		if rep.dead {
			continue
		}
		snap.Replicas = append(snap.Replicas, fleet.Replica{ID: rep.id, Pool: s.cfg.Pools[rep.pool].Name,
			State: rep.state, Since: s.cfg.Epoch.Add(rep.launched), Preempting: rep.preempting})
	}
	for _, p := range s.cfg.Pools {
		p.Available = !p.Spot || s.zoneUp[s.zoneIdx[p.Zone]]
		snap.Pools = append(snap.Pools, p)
	}
	d := s.cfg.Policy.Decide(snap, s.prng)
	if s.cfg.Observe != nil {
		s.cfg.Observe(snap, d)
	}
	s.memo = d.Memo
	for _, a := range d.Actions {
		switch a.Kind {
		case fleet.Start:
			for i, p := range s.cfg.Pools {
				if p.Name == a.Pool && a.N > 0 {
					s.launch(i, a.N)
					break
				}
			}
		case fleet.Stop:
			s.stop(a.Replica)
		}
	}
}

// finish bills the replicas still running and counts the requests left.
func (s *simulator) finish() {
	s.now = s.cfg.Duration
	for _, q := range s.waiting {
		s.complete(q, false)
	}
	for _, rep := range s.replicas {
		for _, q := range rep.queue[rep.head:] {
			if !s.reqs[q].done {
				s.complete(q, false)
			}
		}
		s.terminate(rep)
	}
	total, od := 0.0, 0.0
	for _, p := range s.cfg.Pools {
		total += s.spend[p.Name]
		if !p.Spot {
			od += s.spend[p.Name]
		}
	}
	s.res.Cost = total
	if total > 0 {
		s.res.OnDemandShare = od / total
	}
	for m := range s.minTotal {
		s.res.Minutes++
		if s.minTotal[m] == 0 || float64(s.minOK[m]) >= 0.99*float64(s.minTotal[m]) {
			s.res.MinutesOK++
		}
	}
}
