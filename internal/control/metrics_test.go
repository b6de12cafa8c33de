package control_test

import (
	"context"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/control"
)

// gathered is one scrape of a controller's registry.
type gathered map[string]*dto.MetricFamily

func gather(t *testing.T, c *control.Controller) gathered {
	t.Helper()
	mfs, err := c.Registry().Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	g := gathered{}
	for _, mf := range mfs {
		g[mf.GetName()] = mf
	}
	return g
}

// value sums the series of name whose labels include labels: a counter's or
// a gauge's value, a histogram's count (or its sum, with sum set); found
// says whether any matched.
func (g gathered) value(name string, labels map[string]string, sum bool) (v float64, found bool) {
	mf := g[name]
	if mf == nil {
		return 0, false
	}
series:
	for _, m := range mf.Metric {
		for k, want := range labels {
			got, ok := "", false
			for _, l := range m.Label {
				if l.GetName() == k {
					got, ok = l.GetValue(), true
				}
			}
			if !ok || got != want {
				continue series
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			v += m.Counter.GetValue()
		case m.Gauge != nil:
			v += m.Gauge.GetValue()
		case m.Histogram != nil && sum:
			v += m.Histogram.GetSampleSum()
		case m.Histogram != nil:
			v += float64(m.Histogram.GetSampleCount())
		}
	}
	return v, found
}

// TestMetricsFollowTheLoop drives two trials through start, reports and a
// pause, and checks the gauges against the store at each stage, the commit
// histograms against the store's own count of commits and rows, and that a
// stopped loop says so.
func TestMetricsFollowTheLoop(t *testing.T) {
	h := newHarness(t)
	h.start(newFakeBackend())
	e := h.submit(expYAML("metrics", "max_trials: 2\nmax_concurrent: 2"))
	s1, s2 := h.nextStart(), h.nextStart()
	h.started(s1)
	h.started(s2)
	h.waitTrial(s1.TrialID, virga.TrialRunning)
	h.eventually("both attempts to run", func() bool {
		return h.attempts(s1.TrialID)[0].State == virga.AttemptRunning && h.attempts(s2.TrialID)[0].State == virga.AttemptRunning
	})
	h.report(s1.AttemptID, 1, 0.5)
	h.report(s2.AttemptID, 1, 0.7)
	h.report(s2.AttemptID, 2, 0.6)

	g := gather(t, h.ctl)
	want := map[string]float64{"QUEUED": 0, "RUNNING": 2, "PAUSED": 0}
	for state, n := range want {
		if got, ok := g.value("virga_trials", map[string]string{"state": state}, false); !ok || got != n {
			t.Errorf("running: virga_trials{state=%s} = %v (present %v), want %v", state, got, ok, n)
		}
	}
	if got, _ := g.value("virga_attempts", map[string]string{"state": "RUNNING", "pool": ""}, false); got != 2 {
		t.Errorf("running: virga_attempts{state=RUNNING} = %v, want 2", got)
	}
	if got, _ := g.value("virga_attempts", map[string]string{"state": "STARTING", "pool": ""}, false); got != 0 {
		t.Errorf("running: virga_attempts{state=STARTING} = %v, want 0", got)
	}
	if got, _ := g.value("virga_reports_total", map[string]string{"kind": "metrics"}, false); got != 3 {
		t.Errorf("virga_reports_total{kind=metrics} = %v, want 3", got)
	}

	// Pause: both attempts are stopped and exit; the trials wait PAUSED.
	if _, err := h.ctl.Control(context.Background(), e.ID, wire.OpPause); err != nil {
		t.Fatal(err)
	}
	h.eventually("both attempts to be stopped", func() bool { return h.be.stopped(s1.AttemptID) && h.be.stopped(s2.AttemptID) })
	h.exited(s1.AttemptID, 143)
	h.exited(s2.AttemptID, 143)
	h.waitTrial(s1.TrialID, virga.TrialPaused)
	h.waitTrial(s2.TrialID, virga.TrialPaused)
	h.eventually("the gauges and the commit histograms to agree with the store", func() bool {
		g = gather(t, h.ctl)
		paused, _ := g.value("virga_trials", map[string]string{"state": "PAUSED"}, false)
		running, _ := g.value("virga_trials", map[string]string{"state": "RUNNING"}, false)
		live, _ := g.value("virga_attempts", nil, false)
		commits, _ := g.value("virga_store_commit_seconds", nil, false)
		changes, _ := g.value("virga_store_commit_changes", nil, true)
		return paused == 2 && running == 0 && live == 0 &&
			commits == float64(h.st.applies.Load()) && changes == float64(h.st.rows.Load())
	})
	if got, _ := g.value("virga_attempts_ended_total", map[string]string{"outcome": "STOPPED", "pool": ""}, false); got != 2 {
		t.Errorf("virga_attempts_ended_total{outcome=STOPPED} = %v, want 2", got)
	}
	if got, ok := g.value("virga_trials_ended_total", nil, false); got != 0 {
		t.Errorf("virga_trials_ended_total = %v (present %v), want 0: paused trials have not ended", got, ok)
	}
	if got, _ := g.value("virga_control_loop_up", nil, false); got != 1 {
		t.Errorf("virga_control_loop_up = %v, want 1", got)
	}
	if n, _ := g.value("virga_control_loop_pass_seconds", nil, false); n == 0 {
		t.Error("virga_control_loop_pass_seconds has no observations")
	}

	// A stopped loop: the gauges it would answer are absent, and up is 0.
	h.crash()
	g = gather(t, h.ctl)
	if got, ok := g.value("virga_control_loop_up", nil, false); !ok || got != 0 {
		t.Errorf("stopped: virga_control_loop_up = %v (present %v), want 0", got, ok)
	}
	if _, ok := g.value("virga_trials", nil, false); ok {
		t.Error("stopped: virga_trials is still reported")
	}
}
