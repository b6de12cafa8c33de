package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/schedule"
	"github.com/virga-ml/virga/internal/search/replay"
	"github.com/virga-ml/virga/internal/spec"
)

// line is one run's figures.
func line(name string, r *ExperimentResult, wall time.Duration) string {
	return fmt.Sprintf("%-28s end=%-9s cost=%8.3f lost$=%6.3f makespan=%-10s met=%-5v trials=%3d done=%3d steps=%5d work=%-10s lost=%-8s preempt=%3d moves=%3d wall=%s",
		name, r.End, r.Cost, r.LostCost, r.Makespan.Round(time.Second), r.Met, r.Trials, r.Completed, r.Steps, r.Work.Round(time.Second), r.Lost.Round(time.Second), r.Preemptions, r.Moves, wall.Round(time.Millisecond))
}

// BenchmarkEngines runs the same experiments on the legacy simulator and on
// the control loop (RunLoop) and prints their figures side by side:
//
//	go test ./internal/sim -run XXX -bench Engines -benchtime 1x
func BenchmarkEngines(b *testing.B) {
	for b.Loop() {
		engines(b)
	}
}

func engines(t testing.TB) {
	both := func(name string, cfg ExperimentConfig) {
		b := time.Now()
		o, err := runLegacy(cfg)
		if err != nil {
			t.Fatal(err)
		}
		w1 := time.Since(b)
		b = time.Now()
		n, err := RunLoop(cfg)
		if err != nil {
			t.Fatal(err)
		}
		w2 := time.Since(b)
		t.Log(line("legacy "+name, o, w1))
		t.Log(line("loop   "+name, n, w2))
	}
	od := func() []*capacity.Pool { return []*capacity.Pool{onDemandPool(4, 3, 3*time.Minute)} }
	both("small on-demand", smallConfig(t, smallExperiment, ExperimentConfig{Pools: od()}))
	both("small budget 0.5", smallConfig(t, smallExperiment, ExperimentConfig{Budget: 0.5, Pools: od()}))
	pools := []*capacity.Pool{spotPool(t, 4, 0.9, 3*time.Minute, ""), onDemandPool(4, 3, 3*time.Minute)}
	for _, p := range schedule.ExperimentPolicies() {
		both("small spot 1h "+p.Name(), smallConfig(t, smallExperiment, ExperimentConfig{Pools: pools, Deadline: time.Hour, Policy: p}))
	}
	pattern := "1111001111111111111111111111111111111111"
	for _, save := range []bool{false, true} {
		cfg := smallConfig(t, oneTrial, ExperimentConfig{Policy: schedule.ExpGreedy{}, SaveOnStop: save,
			Pools: []*capacity.Pool{spotPool(t, 1, 0.6, time.Minute, pattern), onDemandPool(1, 3, time.Minute)}})
		cfg.Curves.ScaleTo(2 * time.Minute)
		both(fmt.Sprintf("preempt save=%v", save), cfg)
		cfg.Deadline = time.Hour
		both(fmt.Sprintf("preempt 1h save=%v", save), cfg)
	}
	e, data, err := spec.Load("../../bench/search/tables/digits-mlp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tb, err := replay.Load("../../bench/search/tables/digits-mlp.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCurves(tb, e, "digits-mlp.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	c.ScaleTo(2 * time.Minute)
	set, err := capacity.LoadFile("../../examples/capacity/aws-p3.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := ExperimentConfig{Spec: e, Data: data, Curves: c, Pools: onDemandOf(set.Pools), Policy: schedule.ExpOnDemandOnly{}, Deadline: -1}
	both("digits on-demand", cfg)
	base, _ := runLegacy(cfg)
	cfg.Pools = set.Pools
	cfg.Deadline = 3 * base.Makespan
	cfg.TraceOffset = 100 * time.Hour
	for _, p := range schedule.ExperimentPolicies() {
		cfg.Policy = p
		both("digits 3x "+p.Name(), cfg)
	}
}
