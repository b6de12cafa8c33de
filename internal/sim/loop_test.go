package sim

import (
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/schedule"
)

// loopRun is smallRun on the control loop (RunLoop).
func loopRun(t *testing.T, src string, cfg ExperimentConfig) *ExperimentResult {
	t.Helper()
	e, data := parse(t, src)
	c, err := NewCurves(smallTable(t), e, "exp.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	c.ScaleTo(time.Minute)
	cfg.Spec, cfg.Curves, cfg.Data = e, c, data
	if cfg.Policy == nil {
		cfg.Policy = schedule.ExpOnDemandOnly{}
	}
	r, err := RunLoop(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestLoopOnDemandRun(t *testing.T) {
	cfg := ExperimentConfig{Pools: []*capacity.Pool{onDemandPool(4, 3, 3*time.Minute)}}
	old := smallRun(t, smallExperiment, cfg)
	r := loopRun(t, smallExperiment, cfg)
	t.Logf("old  %+v", *old)
	t.Logf("loop %+v", *r)
}
