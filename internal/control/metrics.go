package control

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store"
)

// The control plane's Prometheus metrics (docs/operations.md lists them).
// Each Controller has its own registry, so that several servers can run in
// one process. Counters and histograms are updated where the loop does the
// work they count; the gauges of trials, attempts and running cost are read
// from the loop's own state when the registry is scraped (stateCollector),
// so that they cannot drift from it.
//
// Durations are of Virga's own work (a pass, a commit), measured on the real
// monotonic clock whatever clock the loop decides with.

// statsTimeout bounds how long a scrape waits for the loop's answer.
const statsTimeout = 5 * time.Second

var (
	// passBuckets and commitBuckets run from 50 µs to about 6.5 s.
	passBuckets   = prometheus.ExponentialBuckets(50e-6, 2, 18)
	commitBuckets = passBuckets
	// changesBuckets run from 1 to 16384 changes.
	changesBuckets = prometheus.ExponentialBuckets(1, 2, 15)
)

// Kinds of report, the values of virga_reports_total's kind label.
const (
	reportMetrics    = "metrics"    // metrics only
	reportCheckpoint = "checkpoint" // metrics with a new checkpoint
)

// liveTrialStates are the states virga_trials reports (the terminal ones are
// counted by virga_trials_ended_total); liveAttemptStates likewise.
var (
	liveTrialStates   = []virga.TrialState{virga.TrialQueued, virga.TrialRunning, virga.TrialPaused}
	liveAttemptStates = []virga.AttemptState{virga.AttemptStarting, virga.AttemptRunning}
)

type metrics struct {
	reg           *prometheus.Registry
	once          sync.Once // registers what reads the controller
	pass          prometheus.Histogram
	commit        prometheus.Histogram
	commitChanges prometheus.Histogram
	reports       *prometheus.CounterVec
	trialsEnded   *prometheus.CounterVec
	attemptsEnded *prometheus.CounterVec
	spend         *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		pass: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "virga_control_loop_pass_seconds", Help: "Time of one pass of the control loop: handling its inputs, scheduling, committing, acting.", Buckets: passBuckets,
		}),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "virga_store_commit_seconds", Help: "Time of one commit of the control loop's changes to the store.", Buckets: commitBuckets,
		}),
		commitChanges: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "virga_store_commit_changes", Help: "Changes (rows written or deleted) one commit carries.", Buckets: changesBuckets,
		}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virga_reports_total", Help: "Metric reports of attempts recorded, by kind (metrics, checkpoint: with a new checkpoint).",
		}, []string{"kind"}),
		trialsEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virga_trials_ended_total", Help: "Trials that reached a terminal state (COMPLETED, STOPPED, FAILED), by state.",
		}, []string{"state"}),
		attemptsEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virga_attempts_ended_total", Help: "Attempts that ended, by outcome and pool.",
		}, []string{"outcome", "pool"}),
		spend: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virga_spend_dollars_total", Help: "Cost of the attempts that ended, by experiment and pool, as recorded with each attempt and counted against budgets.",
		}, []string{"experiment", "pool"}),
	}
	m.reg.MustRegister(m.pass, m.commit, m.commitChanges, m.reports, m.trialsEnded, m.attemptsEnded, m.spend,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry returns the controller's Prometheus registry: the control plane's
// metrics and the Go runtime's and the process's.
func (c *Controller) Registry() *prometheus.Registry {
	c.met.once.Do(func() {
		c.met.reg.MustRegister(stateCollector{c}, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "virga_control_inbox_depth", Help: "Inputs (requests, reports, backend events) waiting for the control loop.",
		}, func() float64 { return float64(len(c.inbox)) }))
	})
	return c.met.reg
}

// timePass starts timing a pass of the loop; call what it returns at its end.
func (m *metrics) timePass() func() {
	start := time.Now()
	return func() { m.pass.Observe(time.Since(start).Seconds()) }
}

// apply commits b to the store, timing the commit and counting its changes.
func (c *Controller) apply(ctx context.Context, b *store.Batch) error {
	start := time.Now()
	err := c.cfg.Store.Apply(ctx, b)
	if err == nil {
		c.met.commit.Observe(time.Since(start).Seconds())
		c.met.commitChanges.Observe(float64(batchChanges(b)))
	}
	return err
}

// batchChanges is how many rows b writes or deletes.
func batchChanges(b *store.Batch) int {
	return len(b.Experiments) + len(b.Trials) + len(b.NewAttempts) + len(b.NewExperimentEvents) + len(b.Attempts) +
		len(b.Checkpoints) + len(b.DeleteCheckpoints) + len(b.Metrics) + len(b.Events)
}

func (m *metrics) reported(newCheckpoint bool) {
	kind := reportMetrics
	if newCheckpoint {
		kind = reportCheckpoint
	}
	m.reports.WithLabelValues(kind).Inc()
}

// attemptEnded counts an ended attempt and what it cost.
func (m *metrics) attemptEnded(experimentID int64, a *virga.Attempt) {
	m.attemptsEnded.WithLabelValues(string(a.Outcome), a.Pool).Inc()
	m.spend.WithLabelValues(strconv.FormatInt(experimentID, 10), a.Pool).Add(a.Cost)
}

// loopStats is what the gauges read from the loop's state.
type loopStats struct {
	trials   map[virga.TrialState]int
	attempts map[attemptKey]int
	running  map[spendKey]float64 // cost so far of live attempts
	pools    []string             // the backend's pools ("": it has none)
}

type attemptKey struct {
	state virga.AttemptState
	pool  string
}

type spendKey struct {
	experiment int64
	pool       string
}

type statsReq struct{ reply chan result[loopStats] }

// handleStats answers a scrape once the pass's changes are committed, so
// that the gauges agree with the store. It counts the trials and attempts
// of the experiments the loop holds (those not ended).
func (c *Controller) handleStats(it *iteration, r *statsReq) {
	it.after = append(it.after, func() {
		s := loopStats{trials: map[virga.TrialState]int{}, attempts: map[attemptKey]int{}, running: map[spendKey]float64{}}
		s.pools = []string{""}
		if ps := c.poolStatus(); ps != nil {
			s.pools = s.pools[:0]
			for _, p := range ps {
				s.pools = append(s.pools, p.Name)
			}
		}
		now := c.now()
		for _, es := range c.exps {
			res := resources(es.spec)
			for _, ts := range es.trials {
				s.trials[ts.t.State]++
				a := ts.attempt
				if a == nil {
					continue
				}
				s.attempts[attemptKey{a.State, a.Pool}]++
				cost, err := runCost(c.cfg.Pricer, a, res, now)
				if err == nil && cost > 0 {
					s.running[spendKey{es.exp.ID, a.Pool}] += cost
				}
			}
		}
		r.reply <- result[loopStats]{v: s}
	})
}

var (
	trialsDesc = prometheus.NewDesc("virga_trials",
		"Trials of the experiments not yet ended, by state (QUEUED, RUNNING, PAUSED).", []string{"state"}, nil)
	attemptsDesc = prometheus.NewDesc("virga_attempts",
		"Live attempts, by state (STARTING, RUNNING) and pool.", []string{"state", "pool"}, nil)
	runningCostDesc = prometheus.NewDesc("virga_running_cost_dollars",
		"What the live attempts have cost so far, by experiment and pool (added to virga_spend_dollars_total when they end).", []string{"experiment", "pool"}, nil)
	statsUpDesc = prometheus.NewDesc("virga_control_loop_up",
		"1 if the control loop answered this scrape, 0 if it has stopped or did not answer in time.", nil, nil)
)

// stateCollector reads the gauges of trials, attempts and running cost from
// the loop at each scrape.
type stateCollector struct{ c *Controller }

var _ prometheus.Collector = stateCollector{}

func (sc stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- trialsDesc
	ch <- attemptsDesc
	ch <- runningCostDesc
	ch <- statsUpDesc
}

func (sc stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
	defer cancel()
	r := &statsReq{reply: make(chan result[loopStats], 1)}
	s, err := call(ctx, sc.c, r, r.reply)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(statsUpDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(statsUpDesc, prometheus.GaugeValue, 1)
	for _, st := range liveTrialStates {
		ch <- prometheus.MustNewConstMetric(trialsDesc, prometheus.GaugeValue, float64(s.trials[st]), string(st))
	}
	pools := map[string]bool{}
	for _, p := range s.pools {
		pools[p] = true
	}
	for k := range s.attempts {
		pools[k.pool] = true // an attempt on a pool the backend no longer has
	}
	for pool := range pools {
		for _, st := range liveAttemptStates {
			ch <- prometheus.MustNewConstMetric(attemptsDesc, prometheus.GaugeValue, float64(s.attempts[attemptKey{st, pool}]), string(st), pool)
		}
	}
	for k, v := range s.running {
		ch <- prometheus.MustNewConstMetric(runningCostDesc, prometheus.GaugeValue, v, strconv.FormatInt(k.experiment, 10), k.pool)
	}
}
