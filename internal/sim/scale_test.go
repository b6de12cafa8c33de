package sim

import (
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/schedule"
	"github.com/virga-ml/virga/internal/search/replay"
	"github.com/virga-ml/virga/internal/spec"
)

// BenchmarkScale is the simulator's scale target: 10,000 trials on 1,000
// nodes over a month of availability trace, under Virga's policy with a
// deadline of 30 days, in under 60 s. Run it with
//
//	go test ./internal/sim -run XXX -bench Scale -benchtime 1x
//
// It prints the wall time, the simulated span and the events handled.
func BenchmarkScale(b *testing.B) {
	e, data, err := spec.Load("testdata/scale.yaml")
	if err != nil {
		b.Fatal(err)
	}
	tb, err := replay.Load("../../bench/search/tables/digits-mlp.json.gz")
	if err != nil {
		b.Fatal(err)
	}
	c, err := NewCurves(tb, e, "testdata/scale.yaml", data)
	if err != nil {
		b.Fatal(err)
	}
	// About 40,000 steps on 1,000 nodes over a month: the median epoch
	// lasts 3 hours.
	c.ScaleTo(3 * time.Hour)
	set, err := capacity.LoadFile("testdata/scale-capacity.yaml")
	if err != nil {
		b.Fatal(err)
	}
	tpe := *e
	tpe.Searcher.Sampler, tpe.Searcher.Name = "tpe", "tpe+asha"
	for _, e := range []*spec.Experiment{e, &tpe} {
		b.Run(e.Searcher.Name, func(b *testing.B) {
			for b.Loop() {
				began := time.Now()
				r, err := RunExperiment(ExperimentConfig{Spec: e, Data: data, Curves: c, Pools: set.Pools, Policy: &schedule.ExpPlanned{},
					Deadline: 30 * 24 * time.Hour, TraceOffset: 5 * 24 * time.Hour})
				if err != nil {
					b.Fatal(err)
				}
				wall := time.Since(began)
				b.ReportMetric(wall.Seconds(), "s/run")
				b.Logf("%s: %d trials, %d steps on 1,000 nodes over %.1f simulated days (deadline met %v, cost $%.0f, %d preemptions): %d events, %d decisions in %.1f s",
					e.Searcher.Name, r.Trials, r.Steps, r.Makespan.Hours()/24, r.Met, r.Cost, r.Preemptions, r.Events, r.Decisions, wall.Seconds())
			}
		})
	}
}
