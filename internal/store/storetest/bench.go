package storetest

import (
	"context"
	"fmt"
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

// BenchmarkTrialLifecycle measures one trial's life as the control loop
// commits it, per op: the trial with its first attempt and an event, the
// attempt's start, 10 reports (a metric and the trial's progress each, a
// checkpoint every fifth), the attempt's exit with the trial's end, and the
// reads the loop makes of it (the trial, its attempts, its latest metric).
// It reports trials/s. s must be empty. Every op's cost is independent of
// how many trials came before only if the store indexes them, so a store
// whose figure grows with -benchtime does not.
func BenchmarkTrialLifecycle(b *testing.B, s store.Store) {
	ctx := context.Background()
	e := &virga.Experiment{Name: "bench", State: virga.ExperimentActive}
	if err := s.Apply(ctx, &store.Batch{Experiments: []*virga.Experiment{e}}); err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for n := 0; b.Loop(); n++ {
		t := &virga.Trial{ExperimentID: e.ID, Seq: n + 1, State: virga.TrialRunning, Attempts: 1,
			HParams: map[string]any{"lr": 0.01, "layers": 3.0}, CreatedAt: now, UpdatedAt: now}
		a := &virga.Attempt{Number: 1, State: virga.AttemptStarting, Backend: "sim", CreatedAt: now}
		must(s.Apply(ctx, &store.Batch{Trials: []*virga.Trial{t}, NewAttempts: []store.NewAttempt{{Trial: t, Attempt: a}},
			Events: []*virga.Event{{ExperimentID: e.ID, Kind: virga.EventAttemptCreated, Time: now}}}))
		a.State, a.StartedAt = virga.AttemptRunning, now
		must(s.Apply(ctx, &store.Batch{Attempts: []*virga.Attempt{a},
			Events: []*virga.Event{{ExperimentID: e.ID, TrialID: t.ID, AttemptID: a.ID, Kind: virga.EventAttemptStarted, Time: now}}}))
		for step := int64(1); step <= 10; step++ {
			loss := 1 / float64(step)
			t.Step, t.Latest, t.Best, t.BestStep = step, &loss, &loss, step
			batch := &store.Batch{Trials: []*virga.Trial{t}, Metrics: []virga.Metric{{TrialID: t.ID, AttemptID: a.ID,
				Step: step, Values: map[string]float64{"loss": loss}, Time: now}}}
			if step%5 == 0 {
				t.Checkpoint = fmt.Sprintf("%d-%d", t.ID, step)
				batch.Checkpoints = []virga.Checkpoint{{TrialID: t.ID, ID: t.Checkpoint, AttemptID: a.ID, Step: step, Time: now}}
			}
			must(s.Apply(ctx, batch))
		}
		a.State, a.Outcome, a.EndedAt = virga.AttemptExited, virga.OutcomeSucceeded, now
		must(t.Transition(virga.TrialCompleted, virga.ReasonSucceeded, "", now))
		must(s.Apply(ctx, &store.Batch{Trials: []*virga.Trial{t}, Attempts: []*virga.Attempt{a},
			Events: []*virga.Event{{ExperimentID: e.ID, TrialID: t.ID, Kind: virga.EventTrialCompleted, Time: now}}}))
		_, err := s.Trial(ctx, t.ID)
		must(err)
		_, err = s.Attempts(ctx, t.ID)
		must(err)
		ms, err := s.Metrics(ctx, store.MetricFilter{TrialID: t.ID, AfterStep: 9, Limit: 1})
		must(err)
		if len(ms) != 1 {
			b.Fatalf("trial %d: %d metrics after step 9, want 1", t.ID, len(ms))
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "trials/s")
}
