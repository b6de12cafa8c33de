package server

import (
	"context"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/client"
	"github.com/virga-ml/virga/internal/control"
)

// scrape reads the server's /metrics with token ("" for none) and parses the
// exposition.
func scrape(t *testing.T, url, token string) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return mfs
}

// sample returns the value of the family's series whose labels include
// labels (a counter's, a gauge's, or a histogram's count), and whether
// there is one; several matching series are summed.
func sample(mfs map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
	sum, found := 0.0, false
series:
	for _, m := range mf.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue series
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum, found
}

func mustSample(t *testing.T, mfs map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	v, ok := sample(mfs, name, labels)
	if !ok {
		t.Fatalf("/metrics has no %s%v", name, labels)
	}
	return v
}

// TestMetricsOfARealExperiment runs an experiment of three real trial
// processes on a priced pool and checks /metrics against the store: while
// two trials run, and once the experiment has ended.
func TestMetricsOfARealExperiment(t *testing.T) {
	dir := t.TempDir()
	capFile := filepath.Join(dir, "capacity.yaml")
	err := os.WriteFile(capFile, []byte(`pools:
  - name: od
    backend: local
    node: {cpu: 4, memory: 4GiB}
    nodes: {min: 1, max: 1}
    market: on-demand
    price: 36
    billing: per-second
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Start(context.Background(), Config{DataDir: filepath.Join(dir, "state"), CapacityFile: capFile,
		ShimCommand: []string{"env", shimEnv + "=1", "GORACE=atexit_sleep_ms=0", os.Args[0]}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	c := client.New(s.URL, s.Token)
	before := scrape(t, s.URL, "")
	reportsBefore, _ := sample(before, "virga_reports_total", nil)

	// Each trial reports three times (a checkpoint with the second report,
	// or with the first if the shim reads that line after the file is in
	// place: it is written beside the directory and moved in whole, so
	// there is one checkpoint either way), waits for the marker, at most
	// 30 s, then exits 0.
	marker := filepath.Join(t.TempDir(), "go")
	y := `name: metrics
entrypoint: [sh, -c, 'echo "VIRGA_METRIC {\"step\":1,\"metrics\":{\"loss\":0.9}}"; f=$(mktemp -p "$(dirname "$VIRGA_CHECKPOINT_DIR")"); echo w > "$f"; mv "$f" "$VIRGA_CHECKPOINT_DIR/w"; echo "VIRGA_METRIC {\"step\":2,\"metrics\":{\"loss\":0.5}}"; i=0; while [ ! -e ` + marker + ` ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; echo "VIRGA_METRIC {\"step\":3,\"metrics\":{\"loss\":0.25}}"']
hyperparameters:
  x: {type: float, min: 0, max: 1}
searcher: random
objective: {metric: loss, direction: minimize}
resources: {cpu: 1}
max_trials: 3
max_concurrent: 2
`
	exp, err := c.Submit(ctx, "metrics.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	trialStates := func() map[virga.TrialState]int {
		ts, err := c.Trials(ctx, exp.ID)
		if err != nil {
			t.Fatal(err)
		}
		n := map[virga.TrialState]int{}
		for _, tr := range ts {
			n[tr.State]++
		}
		return n
	}
	// 1. Two trials run (the third waits for a slot): the gauges say so.
	waitUntil(t, "two trials to run and report twice", func() bool {
		ts, err := c.Trials(ctx, exp.ID)
		if err != nil || len(ts) != 2 {
			return false
		}
		for _, tr := range ts {
			tv, err := c.Trial(ctx, tr.ID)
			if err != nil || len(tv.AttemptList) != 1 || tv.AttemptList[0].State != virga.AttemptRunning || tv.Step != 2 {
				return false
			}
		}
		return true
	})
	mid := scrape(t, s.URL, "")
	stored := trialStates()
	for _, st := range []virga.TrialState{virga.TrialQueued, virga.TrialRunning, virga.TrialPaused} {
		if got := mustSample(t, mid, "virga_trials", map[string]string{"state": string(st)}); got != float64(stored[st]) {
			t.Errorf("while running: virga_trials{state=%q} = %v, the store has %d", st, got, stored[st])
		}
	}
	if got := mustSample(t, mid, "virga_attempts", map[string]string{"state": "RUNNING", "pool": "od"}); got != 2 {
		t.Errorf("while running: virga_attempts{state=RUNNING,pool=od} = %v, want 2", got)
	}
	if got := mustSample(t, mid, "virga_running_cost_dollars", map[string]string{"experiment": strconv.FormatInt(exp.ID, 10), "pool": "od"}); got <= 0 {
		t.Errorf("while running: virga_running_cost_dollars = %v, want > 0", got)
	}
	if got := mustSample(t, mid, "virga_control_loop_up", nil); got != 1 {
		t.Errorf("virga_control_loop_up = %v, want 1", got)
	}

	// 2. The experiment ends: counters and gauges agree with the store.
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the experiment to complete", func() bool {
		v, err := c.Experiment(ctx, exp.ID)
		return err == nil && v.State.Terminal()
	})
	end := scrape(t, s.URL, "")
	stored = trialStates()
	if stored[virga.TrialCompleted] != 3 {
		t.Fatalf("trials by state in the store: %v, want 3 COMPLETED", stored)
	}
	for _, st := range []virga.TrialState{virga.TrialQueued, virga.TrialRunning, virga.TrialPaused} {
		if got := mustSample(t, end, "virga_trials", map[string]string{"state": string(st)}); got != float64(stored[st]) {
			t.Errorf("at the end: virga_trials{state=%q} = %v, the store has %d", st, got, stored[st])
		}
	}
	for _, st := range []virga.TrialState{virga.TrialCompleted, virga.TrialStopped, virga.TrialFailed} {
		got, _ := sample(end, "virga_trials_ended_total", map[string]string{"state": string(st)})
		if got != float64(stored[st]) {
			t.Errorf("virga_trials_ended_total{state=%q} = %v, the store has %d", st, got, stored[st])
		}
	}
	if got, _ := sample(end, "virga_attempts", nil); got != 0 {
		t.Errorf("at the end: virga_attempts = %v live, want 0", got)
	}
	// Reports: every metric row the store holds came from one report.
	rows, ckpts, cost := 0, 0, 0.0
	tr, err := c.Trials(ctx, exp.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, trial := range tr {
		ms, err := c.Metrics(ctx, trial.ID)
		if err != nil {
			t.Fatal(err)
		}
		rows += len(ms)
		tv, err := c.Trial(ctx, trial.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range tv.AttemptList {
			cost += a.Cost
		}
		cks, err := s.Store().Checkpoints(ctx, trial.ID)
		if err != nil {
			t.Fatal(err)
		}
		ckpts += len(cks)
	}
	if rows != 9 || ckpts != 3 {
		t.Fatalf("the store holds %d metric rows and %d checkpoints, want 9 and 3", rows, ckpts)
	}
	if got := mustSample(t, end, "virga_reports_total", nil) - reportsBefore; got != float64(rows) {
		t.Errorf("virga_reports_total rose by %v, the trials sent %d reports", got, rows)
	}
	if got := mustSample(t, end, "virga_reports_total", map[string]string{"kind": "checkpoint"}); got != float64(ckpts) {
		t.Errorf("virga_reports_total{kind=checkpoint} = %v, the store has %d checkpoints", got, ckpts)
	}
	if got := mustSample(t, end, "virga_attempts_ended_total", map[string]string{"outcome": "SUCCEEDED", "pool": "od"}); got != 3 {
		t.Errorf("virga_attempts_ended_total{outcome=SUCCEEDED,pool=od} = %v, want 3", got)
	}
	// Commits and passes were timed.
	if n := mustSample(t, end, "virga_store_commit_seconds", nil); n == 0 {
		t.Error("virga_store_commit_seconds has no observations")
	}
	if n := mustSample(t, end, "virga_store_commit_changes", nil); n != mustSample(t, end, "virga_store_commit_seconds", nil) {
		t.Errorf("virga_store_commit_changes has %v observations, virga_store_commit_seconds %v", n, mustSample(t, end, "virga_store_commit_seconds", nil))
	}
	if n := mustSample(t, end, "virga_control_loop_pass_seconds", nil); n == 0 {
		t.Error("virga_control_loop_pass_seconds has no observations")
	}
	// Spend: what the store recorded with each attempt.
	spend := mustSample(t, end, "virga_spend_dollars_total", map[string]string{"experiment": strconv.FormatInt(exp.ID, 10)})
	if cost <= 0 || math.Abs(spend-cost) > 1e-9 {
		t.Errorf("virga_spend_dollars_total{experiment=%d} = %v, the attempts recorded %v", exp.ID, spend, cost)
	}
	if _, ok := sample(end, "virga_running_cost_dollars", nil); ok {
		t.Error("virga_running_cost_dollars still has series with nothing running")
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "virga_control_inbox_depth"} {
		if _, ok := end[name]; !ok {
			t.Errorf("/metrics has no %s", name)
		}
	}
}

// TestMetricsNeedTokenOffLoopback: off loopback /metrics needs the admin
// token, as the API does; a trial's token is refused.
func TestMetricsNeedTokenOffLoopback(t *testing.T) {
	dir := t.TempDir()
	s := start(t, dir, "0.0.0.0:0")
	defer s.Close()
	secret, err := os.ReadFile(filepath.Join(dir, "secret"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a trial's token", control.TrialToken(secret, 1), http.StatusUnauthorized},
		{"a wrong token", "nope", http.StatusUnauthorized},
		{"the admin token", s.Token, http.StatusOK},
	} {
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/metrics", nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %s, want %d", tc.name, resp.Status, tc.want)
		}
	}
	if mfs := scrape(t, s.URL, s.Token); mfs["virga_control_loop_up"] == nil {
		t.Error("with the admin token: no virga_control_loop_up")
	}
}
