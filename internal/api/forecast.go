package api

import (
	"context"
	"slices"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/forecast"
	"github.com/virga-ml/virga/internal/spec"
	"github.com/virga-ml/virga/internal/store"
)

// forecast is what is left of an active experiment's run (nil when
// nothing can be said yet): its progress in steps against the steps its
// search is expected to run, its rate so far, and the forecast kept from
// before the run (virga run --estimate, or --capacity).
func (s *Server) forecast(ctx context.Context, v *wire.ExperimentView, trials []*virga.Trial) (*forecast.Forecast, error) {
	sp, err := spec.Parse(v.SpecFile, v.Spec)
	if err != nil {
		return nil, nil // an experiment accepted once parses; nothing to say otherwise
	}
	steps := sp.Searcher.Int("max_resource", 0)
	if steps <= 0 {
		_, steps = forecast.StepsConstant(sp)
	}
	var done float64
	var completed []int64
	for _, t := range trials {
		done += float64(t.Step)
		if t.State == virga.TrialCompleted {
			completed = append(completed, t.Step)
		}
	}
	if steps <= 0 && len(completed) > 0 {
		slices.Sort(completed)
		steps = completed[len(completed)/2]
	}
	if steps <= 0 {
		return nil, nil
	}
	in := forecast.Input{Started: v.CreatedAt, Now: s.cfg.Clock.Now(), Done: done, Total: forecast.ExpectedSteps(sp, steps),
		Spent: v.Cost, Budget: sp.Budget}
	if !sp.Deadline.IsZero() {
		in.Deadline = sp.Deadline.Time(v.CreatedAt)
	}
	evs, err := s.st.Events(ctx, store.EventFilter{ExperimentID: v.ID})
	if err != nil {
		return nil, err
	}
	for _, e := range evs {
		if e.Kind == virga.EventExperimentEstimate {
			in.Before = keptForecast(e.Message)
		}
	}
	f, ok := forecast.Remaining(in)
	if !ok {
		return nil, nil
	}
	return &f, nil
}

// keptForecast reads the plan Virga would run from a forecast kept with an
// experiment (virga estimate --json): Virga's own plan when it has one,
// else on-demand, else the first; nil if there is none.
func keptForecast(msg string) *forecast.Before {
	k, ok := forecast.KeptPlan(msg)
	if !ok {
		return nil
	}
	return &forecast.Before{Wall: k.Wall, Cost: k.Cost}
}
