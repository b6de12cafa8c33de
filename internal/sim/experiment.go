package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/schedule"
	"github.com/virga-ml/virga/internal/search"
	"github.com/virga-ml/virga/internal/spec"
)

// ExperimentConfig is one experiment to simulate: its file, where its
// trials' curves come from, the pools it may use and the policy that places
// its trials.
type ExperimentConfig struct {
	Spec *spec.Experiment
	// File and Data are the experiment file Spec was parsed from (RunLoop
	// submits it).
	File string
	Data []byte
	// Seed seeds the searcher; 0 means the file's seed, or 1 when the file
	// leaves it to Virga.
	Seed   uint64
	Curves *Curves
	Pools  []*capacity.Pool
	Policy schedule.ExperimentPolicy
	// Start is the virtual time of submission (the zero time if unset).
	Start time.Time
	// TraceOffset shifts every pool's availability: the experiment starts
	// that far into each trace (on top of the pool's own offset).
	TraceOffset time.Duration
	// Deadline and Budget override the file's when set; a negative value
	// means none.
	Deadline time.Duration
	Budget   float64
	// Tick is the decision interval (default one minute): the policy is
	// asked at every event that frees or takes capacity, and at least this
	// often.
	Tick time.Duration
	// SaveOnStop means trials checkpoint when told to stop (SIGTERM), a
	// reclaim's warning included, so that a move or a reclaim loses nothing;
	// by default they checkpoint only at the end of each step (with each
	// report) and lose the step under way.
	SaveOnStop bool
	// Margin is the share of the on-demand time still needed that the
	// policies' safety net keeps in hand (0: schedule.DefaultMargin).
	Margin float64
	// Limit bounds the simulated time (default: four times the deadline,
	// else a year): an experiment still running then ends unfinished.
	Limit time.Duration
	// Rand draws the pools' rate-model timelines and random trace offsets;
	// nil means a source seeded from the seed.
	Rand *rand.Rand
}

// ExperimentResult is what happened to one simulated experiment.
type ExperimentResult struct {
	Policy string `json:"policy"`
	// Cost is what all attempts cost, in USD; LostCost the part spent after
	// each preempted attempt's last checkpoint.
	Cost     float64 `json:"cost"`
	LostCost float64 `json:"lost_cost"`
	// Makespan is from submission to the end of the last trial.
	Makespan time.Duration `json:"makespan"`
	Deadline time.Duration `json:"deadline,omitempty"` // 0: none
	Budget   float64       `json:"budget,omitempty"`   // 0: none
	// Finished says the search ran to its end; Met that it did by the
	// deadline. End says why it ended: completed, budget (spent), or
	// limit (the simulated time ran out).
	Finished bool   `json:"finished"`
	Met      bool   `json:"deadline_met"`
	End      string `json:"end"`
	// Work is the node time of the steps trained and kept; Lost the work
	// thrown away by preemptions, Moved by the policy's own moves and stops.
	Work        time.Duration `json:"work"`
	Lost        time.Duration `json:"lost"`
	Moved       time.Duration `json:"moved_lost,omitempty"`
	Preemptions int           `json:"preemptions"`
	Moves       int           `json:"moves"`
	Trials      int           `json:"trials"`
	Completed   int           `json:"completed"` // trained to their last step
	Steps       int64         `json:"steps"`     // steps trained and kept
	Pools       []PoolUsage   `json:"pools"`
	Best        *Best         `json:"best,omitempty"`
	// Events is how many events the simulation processed, Decisions how
	// many times it asked the policy.
	Events    int `json:"events"`
	Decisions int `json:"decisions"`
}

// PoolUsage is what one pool was used for.
type PoolUsage struct {
	Pool        string  `json:"pool"`
	Spot        bool    `json:"spot"`
	NodeHours   float64 `json:"node_hours"` // billed node time, by share of node
	Cost        float64 `json:"cost"`
	LostCost    float64 `json:"lost_cost"`
	Attempts    int     `json:"attempts"`
	Preemptions int     `json:"preemptions"`
}

// Best is the best objective value any trial reported.
type Best struct {
	Trial   int64          `json:"trial"`
	Step    int64          `json:"step"`
	Value   float64        `json:"value"`
	Config  int            `json:"config"` // the table's configuration
	HParams map[string]any `json:"hparams"`
}

// Trial states in the simulator.
const (
	waiting = iota
	running
	paused
	ended
)

// simTrial is one trial.
type simTrial struct {
	id       int64
	hp       map[string]any
	cfg      int
	steps    int // its length
	step     int // steps done and checkpointed
	kept     time.Duration
	state    int8
	pool     int // while running
	gen      uint32
	start    int64         // attempt start, ns since submission
	runFrom  int64         // when the step under way began making progress
	ckptAt   int64         // last checkpoint of the attempt (start if none)
	ckptRest bool          // the attempt restored a checkpoint or saved one
	own      time.Duration // time of the steps it has done
}

// simPool is one pool's runtime state.
type simPool struct {
	p        *capacity.Pool
	tl       *capacity.Timeline
	share    float64
	slots    int
	used     int
	up       bool
	next     int64 // next availability change, ns since submission; -1 never
	usage    PoolUsage
	stats    schedule.PoolStats
	overhead int64
}

// Event kinds, in the order events at one instant are handled.
const (
	evStep = iota
	evPool
	evBudget
	evTick
)

type event struct {
	at   int64
	kind uint8
	gen  uint32
	idx  int32
	seq  uint64
}

func (a *event) before(b *event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	return a.seq < b.seq
}

// eventHeap is a binary min-heap of events.
type eventHeap struct {
	ev  []event
	seq uint64
}

func (h *eventHeap) push(e event) {
	h.seq++
	e.seq = h.seq
	h.ev = append(h.ev, e)
	i := len(h.ev) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.ev[i].before(&h.ev[p]) {
			break
		}
		h.ev[i], h.ev[p] = h.ev[p], h.ev[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	top := h.ev[0]
	n := len(h.ev) - 1
	h.ev[0] = h.ev[n]
	h.ev = h.ev[:n]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h.ev[l].before(&h.ev[m]) {
			m = l
		}
		if r < n && h.ev[r].before(&h.ev[m]) {
			m = r
		}
		if m == i {
			break
		}
		h.ev[i], h.ev[m] = h.ev[m], h.ev[i]
		i = m
	}
	return top
}

// experimentSim is one run.
type experimentSim struct {
	cfg      ExperimentConfig
	spec     *spec.Experiment
	searcher search.Searcher
	policy   schedule.ExperimentPolicy // cfg.Policy, or FirstFit without a deadline
	shape    schedule.SearchShape
	pools    []*simPool
	trials   []*simTrial // by id-1
	active   []*simTrial // waiting or running, in the order they became so
	heap     eventHeap
	now      int64
	res      ExperimentResult

	deadline, limit, tick int64
	budget                float64
	exhausted, over       bool
	dirty                 bool

	// Money: settled attempts plus running ones accrued at their start
	// price, accrued up to accruedAt.
	settled, accrued, rate float64 // rate in USD per ns
	accruedAt              int64
	budgetGen              uint32

	running   int           // attempts running
	segments  int           // trials created or resumed
	overhead  time.Duration // the largest restart overhead of a pool
	steps     quantiles     // step times
	work      time.Duration // node time of the steps done
	stepHint  time.Duration
	endedN    int
	endedStep int64
	pausedAt  []int // paused trials by step
	// rungOf[step] is 1 + the rung at that step (0: none); reached and
	// passed count the trials that reached each rung and went on past it.
	rungOf          []int
	reached, passed []int

	trace func(*experimentSim) // called after each instant, for tests
	snap  schedule.Experiment
	moves []schedule.Move
	live  []schedule.LiveTrial
}

// RunExperiment simulates one experiment.
func RunExperiment(cfg ExperimentConfig) (*ExperimentResult, error) {
	if onLoop {
		return RunLoop(cfg)
	}
	return runLegacy(cfg)
}

// onLoop makes RunExperiment run the control loop (RunLoop).
var onLoop = false

func runLegacy(cfg ExperimentConfig) (*ExperimentResult, error) {
	s, err := newExperimentSim(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.run(); err != nil {
		return nil, err
	}
	return &s.res, nil
}

func newExperimentSim(cfg ExperimentConfig) (*experimentSim, error) {
	e := cfg.Spec
	switch {
	case e == nil:
		return nil, errors.New("sim: no experiment")
	case cfg.Curves == nil:
		return nil, errors.New("sim: no learning-curve table")
	case cfg.Policy == nil:
		return nil, errors.New("sim: no policy")
	case len(cfg.Pools) == 0:
		return nil, errors.New("sim: no pools")
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = e.Seed
	}
	if seed == 0 {
		seed = 1
	}
	// The searcher is made as the control loop makes it (handleSubmit):
	// the registry's searcher for the file's spec and seed.
	sr, err := search.New(e, seed)
	if err != nil {
		return nil, fmt.Errorf("searcher: %w", err)
	}
	s := &experimentSim{cfg: cfg, spec: e, searcher: sr}
	s.res.Policy = cfg.Policy.Name()
	s.shape = schedule.ShapeOf(e, int64(cfg.Curves.Table.Epochs))
	s.pausedAt = make([]int, cfg.Curves.Table.Epochs+1)
	s.rungOf = make([]int, cfg.Curves.Table.Epochs+2)
	for k, r := range s.shape.Rungs {
		if r < int64(len(s.rungOf)) {
			s.rungOf[r] = k + 1
		}
	}
	s.reached, s.passed = make([]int, len(s.shape.Rungs)), make([]int, len(s.shape.Rungs))
	s.stepHint = cfg.Curves.MeanEpoch() // as a profiling run would measure
	if s.stepHint <= 0 {
		s.stepHint = time.Second
	}

	start := cfg.Start
	switch {
	case cfg.Deadline > 0:
		s.deadline = int64(cfg.Deadline)
	case cfg.Deadline == 0 && !e.Deadline.IsZero():
		s.deadline = int64(e.Deadline.Time(start).Sub(start))
		if s.deadline <= 0 {
			return nil, fmt.Errorf("the deadline %s is not after the start %s", e.Deadline.At.Format(time.RFC3339), start.Format(time.RFC3339))
		}
	}
	switch {
	case cfg.Budget > 0:
		s.budget = cfg.Budget
	case cfg.Budget == 0:
		s.budget = e.Budget
	}
	s.res.Deadline, s.res.Budget = time.Duration(s.deadline), s.budget
	s.policy = cfg.Policy
	if s.deadline == 0 {
		// As the control loop: an experiment without a deadline is placed
		// on the first pool with room, whatever the policy.
		s.policy = FirstFit{}
		s.res.Policy = s.policy.Name()
	}
	s.tick = int64(cfg.Tick)
	if s.tick <= 0 {
		s.tick = int64(time.Minute)
	}
	s.limit = int64(cfg.Limit)
	if s.limit <= 0 {
		s.limit = int64(365 * 24 * time.Hour)
		if s.deadline > 0 {
			s.limit = 4 * s.deadline
		}
	}

	rng := cfg.Rand
	if rng == nil {
		rng = rand.New(rand.NewPCG(seed, 0x73696d))
	}
	need := virga.Resources{CPU: e.Resources.CPU, MemoryMB: e.Resources.MemoryMB, GPU: e.Resources.GPU}
	fits := false
	for _, p := range cfg.Pools {
		sp := &simPool{p: p, tl: p.Timeline(start.Add(-cfg.TraceOffset), rng), usage: PoolUsage{Pool: p.Name, Spot: p.Spot()}}
		share, err := capacity.Share(need, p.Node)
		if err == nil {
			fits = true
			if share <= 0 {
				share = 1
			}
			sp.share = share
			sp.slots = p.MaxNodes * max(1, int(math.Floor(1/share+1e-9)))
		}
		st := p.Stats()
		sp.stats = schedule.StatsOfPool(st)
		sp.overhead = int64(p.RestartOverhead)
		s.overhead = max(s.overhead, p.RestartOverhead)
		s.pools = append(s.pools, sp)
	}
	if !fits {
		return nil, fmt.Errorf("each trial needs %s, more than a node of any pool has", fmtNeed(need))
	}
	return s, nil
}

func fmtNeed(r virga.Resources) string {
	s := fmt.Sprintf("cpu %g", r.CPU)
	if r.MemoryMB > 0 {
		s += fmt.Sprintf(", memory %d MiB", r.MemoryMB)
	}
	if r.GPU > 0 {
		s += fmt.Sprintf(", gpu %d", r.GPU)
	}
	return s
}

func (s *experimentSim) at(ns int64) time.Time {
	return s.cfg.Start.Add(time.Duration(ns))
}

// run is the event loop: take every event of the next instant, then, when
// capacity or trials changed (or at a tick), fill the free concurrency with
// the searcher's proposals and ask the policy where trials run.
func (s *experimentSim) run() error {
	for i, p := range s.pools {
		s.poolChanged(i)
		_ = p
	}
	s.heap.push(event{at: 0, kind: evTick})
	s.dirty = true
	if err := s.decide(); err != nil {
		return err
	}
	for len(s.heap.ev) > 0 && !s.over {
		ev := s.heap.pop()
		if ev.at > s.limit {
			s.finish("limit", s.limit)
			break
		}
		s.now = ev.at
		if err := s.handle(ev); err != nil {
			return err
		}
		for len(s.heap.ev) > 0 && s.heap.ev[0].at == s.now && !s.over {
			if err := s.handle(s.heap.pop()); err != nil {
				return err
			}
		}
		if s.over {
			break
		}
		if err := s.decide(); err != nil {
			return err
		}
		if s.trace != nil {
			s.trace(s)
		}
	}
	if !s.over {
		s.finish("limit", s.now)
	}
	return nil
}

func (s *experimentSim) handle(ev event) error {
	s.res.Events++
	switch ev.kind {
	case evStep:
		t := s.trials[ev.idx]
		if t.state != running || t.gen != ev.gen {
			return nil
		}
		return s.stepEnded(t)
	case evPool:
		p := s.pools[ev.idx]
		if p.next != ev.at {
			return nil
		}
		s.poolChanged(int(ev.idx))
	case evBudget:
		if ev.gen != s.budgetGen {
			return nil
		}
		if s.spent() >= s.budget-1e-9 {
			s.stopAll()
			s.finish("budget", s.now)
			return nil
		}
		s.scheduleBudget()
	case evTick:
		s.dirty = true
		s.heap.push(event{at: s.now + s.tick, kind: evTick})
	}
	return nil
}

// poolChanged reads pool i's availability now, preempts its trials if its
// capacity went, and schedules its next change.
func (s *experimentSim) poolChanged(i int) {
	p := s.pools[i]
	up, next := p.tl.Up(s.at(s.now))
	p.up = up
	p.next = -1
	if !next.IsZero() {
		p.next = int64(next.Sub(s.cfg.Start))
		if p.next <= s.now {
			p.next = s.now + 1
		}
		s.heap.push(event{at: p.next, kind: evPool, idx: int32(i)})
	}
	if !up {
		for _, t := range s.active {
			if t.state == running && t.pool == i {
				s.endAttempt(t, true)
				s.res.Preemptions++
				p.usage.Preemptions++
			}
		}
	}
	s.dirty = true
}

// stepEnded records a step: its checkpoint, the metric, the searcher's
// decision.
func (s *experimentSim) stepEnded(t *simTrial) error {
	t.step++
	t.kept = 0
	t.runFrom, t.ckptAt, t.ckptRest = s.now, s.now, true
	d := s.cfg.Curves.StepTime(t.cfg, t.step)
	s.work += d
	t.own += d
	s.steps.add(d)
	rung := s.rungOf[t.step]
	if rung > 0 {
		s.reached[rung-1]++
	}
	s.res.Steps++
	v := s.cfg.Curves.Value(t.cfg, t.step)
	s.best(t, v)
	dec := s.searcher.Observe(t.id, int64(t.step), v)
	switch {
	case dec == search.Continue && t.step < t.steps:
		if rung > 0 {
			s.passed[rung-1]++ // promoted at once
		}
		s.heap.push(event{at: s.now + int64(s.cfg.Curves.StepTime(t.cfg, t.step+1)), kind: evStep, gen: t.gen, idx: int32(t.id - 1)})
		return nil
	case dec == search.Pause && t.step < t.steps:
		s.endAttempt(t, false)
		s.deactivate(t)
		t.state = paused
		s.pausedAt[min(t.step, len(s.pausedAt)-1)]++
		if pa, ok := s.searcher.(search.PauseAware); ok {
			pa.Paused(t.id)
		}
	default:
		s.endAttempt(t, false)
		s.deactivate(t)
		out := search.Completed
		if t.step < t.steps {
			out = search.Stopped
		} else {
			s.res.Completed++
		}
		s.end(t, out)
	}
	s.dirty = true
	return nil
}

// end ends a trial and tells the searcher.
func (s *experimentSim) end(t *simTrial, out search.Outcome) {
	t.state = ended
	s.endedN++
	s.endedStep += int64(t.step)
	s.searcher.Ended(t.id, out)
}

func (s *experimentSim) best(t *simTrial, v float64) {
	b := s.res.Best
	better := b == nil || v < b.Value
	if s.spec.Objective.Direction == spec.Maximize {
		better = b == nil || v > b.Value
	}
	if better {
		s.res.Best = &Best{Trial: t.id, Step: int64(t.step), Value: v, Config: t.cfg, HParams: t.hp}
	}
}

// deactivate removes t from the active list.
func (s *experimentSim) deactivate(t *simTrial) {
	for i, a := range s.active {
		if a == t {
			s.active = append(s.active[:i], s.active[i+1:]...)
			return
		}
	}
}

// spent is what the experiment has cost up to now, running attempts
// included (at their start price).
func (s *experimentSim) spent() float64 {
	return s.settled + s.accrued + s.rate*float64(s.now-s.accruedAt)
}

// accrue brings the running attempts' accrual up to now.
func (s *experimentSim) accrue() {
	s.accrued += s.rate * float64(s.now-s.accruedAt)
	s.accruedAt = s.now
}

// startAttempt starts t on pool i now.
func (s *experimentSim) startAttempt(t *simTrial, i int) {
	p := s.pools[i]
	s.accrue()
	t.state, t.pool = running, i
	t.gen++
	t.start, t.ckptAt = s.now, s.now
	t.ckptRest = t.step > 0 || t.kept > 0
	t.runFrom = s.now + p.overhead
	p.used++
	s.running++
	p.usage.Attempts++
	s.rate += p.p.Price(s.at(s.now)) * p.share / float64(time.Hour)
	left := s.cfg.Curves.StepTime(t.cfg, t.step+1) - t.kept
	s.heap.push(event{at: t.runFrom + int64(max(left, 0)), kind: evStep, gen: t.gen, idx: int32(t.id - 1)})
}

// endAttempt ends t's attempt now: preempted (a reclaim) or stopped (by
// the policy, the searcher or the budget). The step under way is lost
// unless it ended or trials save on stop.
func (s *experimentSim) endAttempt(t *simTrial, preempted bool) {
	p := s.pools[t.pool]
	s.accrue()
	price := p.p.Price(s.at(t.start)) * p.share / float64(time.Hour)
	s.rate -= price
	s.accrued -= price * float64(s.now-t.start)
	if s.running--; s.running == 0 {
		s.rate, s.accrued = 0, 0 // no drift from the sums
	}
	run := time.Duration(s.now - t.start)
	cost, _ := p.p.Cost(s.at(t.start), run, p.share)
	s.settled += cost
	billed := p.p.Billing.Billed(run)
	p.usage.NodeHours += billed.Hours() * p.share
	p.usage.Cost += cost
	progress := time.Duration(max(s.now-t.runFrom, 0))
	if progress > 0 {
		if s.cfg.SaveOnStop {
			t.kept += progress
		} else if preempted {
			s.res.Lost += progress
		} else {
			s.res.Moved += progress
		}
	}
	if preempted && !s.cfg.SaveOnStop {
		// Lost cost: what the attempt cost after its last checkpoint (all
		// of it when it saved none).
		lost := cost
		if t.ckptAt > t.start {
			kept, _ := p.p.Cost(s.at(t.start), time.Duration(t.ckptAt-t.start), p.share)
			lost = max(cost-kept, 0)
		}
		s.res.LostCost += lost
		p.usage.LostCost += lost
	}
	p.used--
	t.state = waiting
	t.gen++
}

// stopAll stops every running attempt (the budget is spent).
func (s *experimentSim) stopAll() {
	for _, t := range s.active {
		if t.state == running {
			s.endAttempt(t, false)
		}
	}
}

// scheduleBudget schedules the check at the time the running attempts
// would spend the budget.
func (s *experimentSim) scheduleBudget() {
	if s.budget <= 0 || s.rate <= 0 {
		return
	}
	s.budgetGen++
	left := s.budget - s.spent()
	at := s.now + int64(math.Ceil(max(left, 0)/s.rate))
	if at <= s.now {
		at = s.now + 1
	}
	s.heap.push(event{at: at, kind: evBudget, gen: s.budgetGen})
}

// fill asks the searcher for trials while fewer than max_concurrent wait or
// run (a resumed trial waits again; a new one is created).
func (s *experimentSim) fill() error {
	for !s.exhausted && len(s.active) < s.spec.MaxConcurrent {
		p, err := s.searcher.Propose()
		switch {
		case errors.Is(err, search.ErrExhausted):
			s.exhausted = true
			return nil
		case errors.Is(err, search.ErrWait):
			if len(s.active) == 0 {
				// As the control loop: a searcher that waits with nothing
				// live ends the search.
				s.exhausted = true
			}
			return nil
		case err != nil:
			return fmt.Errorf("searcher: %w", err)
		}
		if p.Resume != 0 {
			if p.Resume < 1 || p.Resume > int64(len(s.trials)) || s.trials[p.Resume-1].state != paused {
				return fmt.Errorf("searcher: resumes trial %d, which is not paused", p.Resume)
			}
			t := s.trials[p.Resume-1]
			s.pausedAt[min(t.step, len(s.pausedAt)-1)]--
			if k := s.rungOf[t.step]; k > 0 {
				s.passed[k-1]++
			}
			t.state = waiting
			s.active = append(s.active, t)
			s.segments++
			continue
		}
		cfg, err := s.cfg.Curves.Config(p.HParams)
		if err != nil {
			return fmt.Errorf("trial %d: %w", len(s.trials)+1, err)
		}
		t := &simTrial{id: int64(len(s.trials) + 1), hp: p.HParams, cfg: cfg, steps: s.cfg.Curves.Steps(p.HParams), state: waiting}
		if p.Parent >= 1 && p.Parent <= int64(len(s.trials)) {
			t.step = min(s.trials[p.Parent-1].step, t.steps) // from the parent's checkpoint
		}
		s.trials = append(s.trials, t)
		s.res.Trials++
		s.segments++
		s.searcher.Created(p.ID, t.id)
		if t.step >= t.steps {
			s.end(t, search.Completed)
			continue
		}
		s.active = append(s.active, t)
	}
	return nil
}

// decide fills free concurrency, asks the policy and carries out its moves.
func (s *experimentSim) decide() error {
	if !s.dirty || s.over {
		return nil
	}
	s.dirty = false
	if err := s.fill(); err != nil {
		return err
	}
	if len(s.active) == 0 {
		if s.exhausted {
			s.finish("completed", s.now)
		}
		return nil
	}
	s.snapshot()
	s.res.Decisions++
	s.snap.Committed = s.snap.Committed || s.snap.MustOnDemand()
	s.moves = s.policy.Place(&s.snap, s.moves[:0])
	s.moves = schedule.Feasible(&s.snap, s.moves)
	for _, m := range s.moves {
		t := s.trials[m.Trial-1]
		if t.state == running {
			// A trial taken off a pool whose reclaim is announced is
			// preempted all the same.
			reclaimed := s.snap.Pools[t.pool].Reclaiming
			s.endAttempt(t, reclaimed)
			if reclaimed {
				s.res.Preemptions++
				s.pools[t.pool].usage.Preemptions++
			} else {
				s.res.Moves++
			}
		}
		if m.Pool >= 0 {
			s.startAttempt(t, m.Pool)
		}
	}
	if len(s.moves) > 0 {
		s.scheduleBudget()
	}
	if s.budget > 0 && s.running == 0 {
		// Nothing runs: end if no start fits the budget any more.
		afford := false
		for i := range s.snap.Pools {
			if s.spent()+s.snap.Pools[i].MinCost <= s.budget {
				afford = true
			}
		}
		if !afford {
			s.finish("budget", s.now)
		}
	}
	return nil
}

// snapshot builds the policy's view of now.
func (s *experimentSim) snapshot() {
	step := s.stepHint
	if s.res.Steps > 0 {
		step = s.work / time.Duration(s.res.Steps)
	}
	e := &s.snap
	e.Elapsed = time.Duration(s.now)
	e.Deadline = time.Duration(s.deadline)
	e.Budget, e.Spent = s.budget, s.spent()
	e.Tick = time.Duration(s.tick)
	e.Checkpoint = step
	if s.cfg.SaveOnStop {
		e.Checkpoint = 0
	}
	e.Lanes = s.spec.MaxConcurrent
	e.Margin = s.cfg.Margin
	e.Done = s.work

	s.live = s.live[:0]
	lowest := int64(math.MaxInt64)
	e.Trials = e.Trials[:0]
	for _, t := range s.active {
		own := step
		if t.step > 0 {
			own = t.own / time.Duration(t.step)
		}
		s.live = append(s.live, schedule.LiveTrial{Step: int64(t.step), StepTime: own})
		lowest = min(lowest, int64(t.step))
		tr := schedule.Trial{ID: t.id, Pool: -1, Done: t.own + t.kept,
			Left: max(time.Duration(t.steps-t.step)*own-t.kept, 0), Final: s.shape.Final(int64(t.step)),
			PauseAhead: s.shape.PauseAhead(int64(t.step))}
		if t.state == running {
			tr.Pool = t.pool
			tr.Starting = time.Duration(max(t.runFrom-s.now, 0))
			if !s.cfg.SaveOnStop {
				tr.Unsaved = time.Duration(max(s.now-t.runFrom, 0))
			}
		}
		e.Trials = append(e.Trials, tr)
	}
	for k := 0; k < len(s.pausedAt) && int64(k) < lowest; k++ {
		if s.pausedAt[k] > 0 {
			lowest = int64(k)
		}
	}
	if lowest == math.MaxInt64 {
		lowest = 0 // no trial yet: a new one starts from nothing
	}
	e.Left, e.Chain = s.shape.EstimateWork(schedule.Progress{Steps: s.res.Steps, Ended: s.endedN, EndedSteps: s.endedStep,
		Live: s.live, Lowest: lowest, Reached: s.reached, Passed: s.passed, Attempts: s.segments, Overhead: s.overhead,
		Exhausted: s.exhausted,
		StepTime:  step, Slow: s.steps.quantile(slowQuantile)})

	e.Pools = e.Pools[:0]
	now := s.at(s.now)
	for _, p := range s.pools {
		price := p.p.Price(now) * p.share
		reclaiming := p.up && p.next >= 0 && s.now >= p.next-int64(p.p.Warning)
		e.Pools = append(e.Pools, schedule.Pool{
			Name: p.p.Name, Spot: p.p.Spot(), Slots: p.slots, Free: p.slots - p.used, Up: p.up, Reclaiming: reclaiming,
			Price: price, Overhead: time.Duration(p.overhead), MinCost: price * p.p.Billing.Billed(max(time.Duration(p.overhead), 1)).Hours(),
			Stats: p.stats,
		})
	}
}

// finish ends the experiment at ns: trials still waiting or paused end as
// stopped (not promoted), running ones are stopped.
func (s *experimentSim) finish(why string, at int64) {
	if s.over {
		return
	}
	s.over = true
	s.now = max(s.now, min(at, s.limit))
	for _, t := range s.active {
		if t.state == running {
			s.endAttempt(t, false)
		}
	}
	for _, t := range s.trials {
		if t.state != ended {
			s.end(t, search.Stopped)
		}
	}
	s.active = s.active[:0]
	r := &s.res
	r.End = why
	r.Finished = why == "completed"
	r.Makespan = time.Duration(s.now)
	r.Met = r.Finished && (s.deadline == 0 || s.now <= s.deadline)
	r.Work = s.work
	r.Cost = s.settled
	for _, p := range s.pools {
		r.Pools = append(r.Pools, p.usage)
	}
}

// FirstFit is what places an experiment without a deadline, on the server
// (control.FirstFit) and so in the simulator: each waiting trial, in turn,
// starts on the first pool, in the capacity file's order, that is up, is
// not being reclaimed and has room; running trials stay where they are.
type FirstFit struct{}

// Name implements schedule.ExperimentPolicy.
func (FirstFit) Name() string { return "first-fit" }

// Place implements schedule.ExperimentPolicy.
func (FirstFit) Place(e *schedule.Experiment, moves []schedule.Move) []schedule.Move {
	free := make([]int, len(e.Pools))
	for i := range e.Pools {
		free[i] = e.Pools[i].Free
	}
	for i := range e.Trials {
		t := &e.Trials[i]
		if !t.Waiting() {
			continue
		}
		for j := range e.Pools {
			if p := &e.Pools[j]; p.Up && !p.Reclaiming && free[j] > 0 {
				free[j]--
				moves = append(moves, schedule.Move{Trial: t.ID, Pool: j})
				break
			}
		}
	}
	return moves
}

// slowQuantile is the quantile of step times taken as a slow trial's
// (Progress.Slow).
const slowQuantile = 0.75

// quantiles is a histogram of durations in buckets 5% wide, for quantiles
// of the step times without keeping them.
type quantiles struct {
	n      int
	counts []int
}

const quantileBase = 1.05

func (q *quantiles) add(d time.Duration) {
	b := 0
	if d > time.Microsecond {
		b = int(math.Log(float64(d)/float64(time.Microsecond)) / math.Log(quantileBase))
	}
	for len(q.counts) <= b {
		q.counts = append(q.counts, 0)
	}
	q.counts[b]++
	q.n++
}

// quantile returns the upper edge of the bucket holding quantile f; 0 when
// empty.
func (q *quantiles) quantile(f float64) time.Duration {
	if q.n == 0 {
		return 0
	}
	want := int(math.Ceil(f * float64(q.n)))
	seen := 0
	for b, c := range q.counts {
		seen += c
		if seen >= want {
			return time.Duration(float64(time.Microsecond) * math.Pow(quantileBase, float64(b+1)))
		}
	}
	return 0
}
