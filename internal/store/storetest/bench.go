package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store"
)

// BenchmarkApplyMetrics measures s.Apply of one batch of 64 metrics and 8
// trial updates per op, the shape of a group commit of reports, and reports
// metrics/s. s must be empty.
func BenchmarkApplyMetrics(b *testing.B, s store.Store) {
	ctx := context.Background()
	e := &virga.Experiment{Name: "bench", State: virga.ExperimentActive}
	if err := s.Apply(ctx, &store.Batch{Experiments: []*virga.Experiment{e}}); err != nil {
		b.Fatal(err)
	}
	trials := make([]*virga.Trial, 8)
	for i := range trials {
		trials[i] = &virga.Trial{ExperimentID: e.ID, Seq: i + 1, State: virga.TrialRunning,
			HParams: map[string]any{"lr": 0.01 * float64(i+1)}}
	}
	if err := s.Apply(ctx, &store.Batch{Trials: trials}); err != nil {
		b.Fatal(err)
	}
	const perOp = 64
	now := time.Now()
	b.ResetTimer()
	for n := 0; b.Loop(); n++ {
		batch := &store.Batch{Trials: trials, Metrics: make([]virga.Metric, 0, perOp)}
		for j := range perOp {
			tr := trials[j%len(trials)]
			step := int64(n*perOp/len(trials) + j/len(trials))
			batch.Metrics = append(batch.Metrics, virga.Metric{TrialID: tr.ID, AttemptID: 1, Step: step,
				Values: map[string]float64{"loss": 1 / float64(step+1), "accuracy": 0.5}, Time: now})
		}
		for _, tr := range trials {
			tr.Step = int64(n*perOp/len(trials) + perOp/len(trials) - 1)
			tr.UpdatedAt = now
		}
		if err := s.Apply(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*perOp)/b.Elapsed().Seconds(), "metrics/s")
}

// BenchmarkApplyIngest measures s.Apply in the shape of the ingest benchmark's
// group commits: 32 trials reporting at once, so each op is one batch of 32
// metrics, one per trial (the next step of each), and every 32nd op also
// updates the 32 trials' rows. It reports metrics/s. s must be empty.
func BenchmarkApplyIngest(b *testing.B, s store.Store) {
	ctx := context.Background()
	e := &virga.Experiment{Name: "bench", State: virga.ExperimentActive}
	if err := s.Apply(ctx, &store.Batch{Experiments: []*virga.Experiment{e}}); err != nil {
		b.Fatal(err)
	}
	const nTrials = 32
	trials := make([]*virga.Trial, nTrials)
	for i := range trials {
		trials[i] = &virga.Trial{ExperimentID: e.ID, Seq: i + 1, State: virga.TrialRunning,
			HParams: map[string]any{"lr": 0.01 * float64(i+1)}}
	}
	if err := s.Apply(ctx, &store.Batch{Trials: trials}); err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	b.ResetTimer()
	for n := 0; b.Loop(); n++ {
		batch := &store.Batch{Metrics: make([]virga.Metric, 0, nTrials)}
		for _, tr := range trials {
			batch.Metrics = append(batch.Metrics, virga.Metric{TrialID: tr.ID, AttemptID: 1, Step: int64(n),
				Values: map[string]float64{"loss": 1 / float64(n+1)}, Time: now})
		}
		if n%32 == 31 {
			for _, tr := range trials {
				tr.Step, tr.UpdatedAt = int64(n), now
			}
			batch.Trials = trials
		}
		if err := s.Apply(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*nTrials)/b.Elapsed().Seconds(), "metrics/s")
}
