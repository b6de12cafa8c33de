package sim

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/schedule"
	"github.com/virga-ml/virga/internal/search/replay"
	"github.com/virga-ml/virga/internal/spec"
)

// BenchmarkScale is the simulator's scale target: 10,000 trials on 1,000
// nodes over a month of availability trace, under Virga's policy with a
// deadline of 30 days, in under 60 s, on each engine (the legacy simulator
// and the control loop, RunLoop). Run it with
//
//	go test ./internal/sim -run XXX -bench 'Scale/10000' -benchtime 1x
//
// It prints, per searcher and engine, the wall time, the simulated outcome
// and the events handled. Scale/1000 is the same run a tenth the size
// (1,000 trials on 100 nodes), for quicker measures, and Scale/3000 one
// between, to tell a cost that grows with the trials from one that grows
// faster. Select a size exactly: 'Scale/^1000$' (Scale/1000 matches 10000).
func BenchmarkScale(b *testing.B) {
	for _, trials := range []int{10000, 3000, 1000} {
		b.Run(fmt.Sprint(trials), func(b *testing.B) { benchmarkScale(b, trials) })
	}
}

func benchmarkScale(b *testing.B, trials int) {
	cfg := scaleConfig(b, trials)
	e := cfg.Spec
	tpe := *e
	tpe.Searcher.Sampler, tpe.Searcher.Name = "tpe", "tpe+asha"
	engines := []struct {
		name string
		run  func(ExperimentConfig) (*ExperimentResult, error)
	}{{"legacy", runLegacy}, {"loop", RunLoop}}
	for _, e := range []*spec.Experiment{e, &tpe} {
		for _, en := range engines {
			b.Run(e.Searcher.Name+"/"+en.name, func(b *testing.B) {
				for b.Loop() {
					began := time.Now()
					cfg := cfg
					cfg.Spec = e
					r, err := en.run(cfg)
					if err != nil {
						b.Fatal(err)
					}
					wall := time.Since(began)
					b.ReportMetric(wall.Seconds(), "s/run")
					b.Logf("%s on %s: %d trials, %d steps on %d nodes over %.1f simulated days (deadline met %v, cost $%.0f, %d preemptions): %d events, %d decisions in %.1f s",
						e.Searcher.Name, en.name, r.Trials, r.Steps, trials/10, r.Makespan.Hours()/24, r.Met, r.Cost, r.Preemptions, r.Events, r.Decisions, wall.Seconds())
				}
			})
		}
	}
}

// scaleConfig is the scale run at the given trials (a tenth of them at a
// time, on a tenth as many nodes): random search with ASHA under Virga's
// policy with a deadline of 30 days, from 5 days into the trace.
func scaleConfig(t testing.TB, trials int) ExperimentConfig {
	t.Helper()
	data, err := readScale("testdata/scale.yaml", trials)
	if err != nil {
		t.Fatal(err)
	}
	e, err := spec.Parse("testdata/scale.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := replay.Load("../../bench/search/tables/digits-mlp.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCurves(tb, e, "testdata/scale.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	// About 40,000 steps on 1,000 nodes over a month: the median epoch
	// lasts 3 hours.
	c.ScaleTo(3 * time.Hour)
	set, err := capacity.LoadFile("testdata/scale-capacity.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pools := make([]*capacity.Pool, len(set.Pools))
	for i, p := range set.Pools {
		q := *p
		q.MaxNodes = p.MaxNodes * trials / 10000
		pools[i] = &q
	}
	return ExperimentConfig{Spec: e, Data: data, Curves: c, Pools: pools, Policy: &schedule.ExpPlanned{},
		Deadline: 30 * 24 * time.Hour, TraceOffset: 5 * 24 * time.Hour}
}

// readScale reads the scale experiment, resized to the given trials (a
// tenth of them at a time).
func readScale(path string, trials int) ([]byte, error) {
	_, data, err := spec.Load(path)
	if err != nil {
		return nil, err
	}
	for _, r := range [][2]string{{"max_trials: 10000", fmt.Sprintf("max_trials: %d", trials)},
		{"max_concurrent: 1000", fmt.Sprintf("max_concurrent: %d", trials/10)}} {
		if !bytes.Contains(data, []byte(r[0])) {
			return nil, fmt.Errorf("%s: no %q", path, r[0])
		}
		data = bytes.Replace(data, []byte(r[0]), []byte(r[1]), 1)
	}
	return data, nil
}
