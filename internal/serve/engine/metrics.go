package engine

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Outcomes of a request, the values of virga_serve_requests_total's
// outcome label.
const (
	OutcomeOK          = "ok"
	OutcomeInvalid     = "invalid"     // InputError
	OutcomeRefused     = "refused"     // RefusedError
	OutcomeUnavailable = "unavailable" // ErrUnavailable
	OutcomeNotFound    = "not_found"   // ErrModelNotFound
	OutcomeCanceled    = "canceled"    // the caller went away
	OutcomeError       = "error"       // the runtime failed
)

type metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec
	refusals  *prometheus.CounterVec
	queue     *prometheus.HistogramVec
	compute   *prometheus.HistogramVec
	batchRows *prometheus.HistogramVec
	misses    *prometheus.CounterVec
	loads     *prometheus.CounterVec
	loadTime  *prometheus.HistogramVec
	evictions *prometheus.CounterVec
	// profileReuse counts loads that reused an earlier load's profile.
	profileReuse prometheus.Counter
	memory       prometheus.Gauge
	budget       prometheus.Gauge
	loaded       prometheus.Gauge
	modelBytes   *prometheus.GaugeVec
}

// latencyBuckets run from 50 µs to about 13 s.
var latencyBuckets = prometheus.ExponentialBuckets(50e-6, 2, 19)

func newMetrics(reg *prometheus.Registry) *metrics {
	m := &metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virga_serve_requests_total", Help: "Inference requests by model and outcome (ok, invalid, refused, unavailable, not_found, canceled, error).",
		}, []string{"model", "outcome"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virga_serve_refusals_total", Help: "Requests refused rather than served late, by model and reason (DeadlineUnmeetable, QueueFull, LoadTooSlow, NotAdmitted).",
		}, []string{"model", "reason"}),
		queue: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "virga_serve_queue_seconds", Help: "Time from a request's arrival to the start of its batch.", Buckets: latencyBuckets,
		}, []string{"model"}),
		compute: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "virga_serve_compute_seconds", Help: "Time of one batch's call to the runtime.", Buckets: latencyBuckets,
		}, []string{"model"}),
		batchRows: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "virga_serve_batch_rows", Help: "Rows per batch run.", Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}, []string{"model"}),
		misses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virga_serve_deadline_misses_total", Help: "Requests answered after their deadline.",
		}, []string{"model"}),
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virga_serve_loads_total", Help: "Model loads by outcome (ok, failed).",
		}, []string{"model", "outcome"}),
		loadTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "virga_serve_load_seconds", Help: "Time to load, warm up and profile a model.", Buckets: prometheus.ExponentialBuckets(1e-3, 2, 16),
		}, []string{"model"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "virga_serve_evictions_total", Help: "Models unloaded to make room, or after a swap or unload.",
		}, []string{"model"}),
		profileReuse: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "virga_serve_profile_reuses_total", Help: "Loads that reused the profile an earlier load of the same files and settings measured (only warmed up).",
		}),
		memory: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "virga_serve_memory_bytes", Help: "Memory reserved by loaded and loading models.",
		}),
		budget: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "virga_serve_memory_budget_bytes", Help: "The node's memory budget for models.",
		}),
		loaded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "virga_serve_models_loaded", Help: "Model versions loaded and ready.",
		}),
		modelBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "virga_serve_model_memory_bytes", Help: "Memory reserved by each loaded model version.",
		}, []string{"model", "version"}),
	}
	reg.MustRegister(m.requests, m.refusals, m.queue, m.compute, m.batchRows, m.misses, m.loads, m.loadTime,
		m.evictions, m.profileReuse, m.memory, m.budget, m.loaded, m.modelBytes)
	return m
}

// Registry is the registry holding the engine's metrics; a front end may
// register its own beside them.
func (e *Engine) Registry() *prometheus.Registry { return e.metrics.reg }

// MetricsHandler serves the engine's metrics in Prometheus's text format
// (for /metrics).
func (e *Engine) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(e.metrics.reg, promhttp.HandlerOpts{Registry: e.metrics.reg})
}
