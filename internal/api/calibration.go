package api

import (
	"context"
	"net/http"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/forecast"
	"github.com/virga-ml/virga/internal/spec"
	"github.com/virga-ml/virga/internal/store"
)

// calibration lists the calibration pairs: for every completed experiment
// submitted with an estimate, that estimate beside what its run took
// (query: name=NAME keeps one experiment name's), newest first.
func (s *Server) calibration(w http.ResponseWriter, r *http.Request) {
	pairs, err := s.calibrationPairs(r.Context(), r.URL.Query().Get("name"))
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, pairs)
}

// calibrationPairs reads the pairs of the completed experiments named name
// (all if ""). A stopped or failed run is left out: its time says nothing
// of what the whole run would have taken; so is one paused on the way,
// whose time includes the pause. Its cost is what its attempts
// cost (all have ended), its wall time from submission to end.
func (s *Server) calibrationPairs(ctx context.Context, name string) ([]forecast.Pair, error) {
	exps, err := s.st.Experiments(ctx, store.ExperimentFilter{States: []virga.ExperimentState{virga.ExperimentCompleted}})
	if err != nil {
		return nil, err
	}
	pairs := []forecast.Pair{}
	for _, e := range exps {
		if name != "" && e.Name != name || e.EndedAt.IsZero() {
			continue
		}
		evs, err := s.st.Events(ctx, store.EventFilter{ExperimentID: e.ID})
		if err != nil {
			return nil, err
		}
		var kept forecast.Kept
		found, paused := false, false
		for _, ev := range evs {
			switch ev.Kind {
			case virga.EventExperimentEstimate:
				kept, found = forecast.KeptPlan(ev.Message)
			case virga.EventExperimentPause:
				paused = true
			}
		}
		if !found || paused {
			continue
		}
		as, err := s.st.ExperimentAttempts(ctx, e.ID)
		if err != nil {
			return nil, err
		}
		p := forecast.Pair{ExperimentID: e.ID, Name: e.Name, EndedAt: e.EndedAt, Predicted: kept, Wall: e.EndedAt.Sub(e.CreatedAt)}
		for _, a := range as {
			p.Cost += a.Cost
		}
		if sp, err := spec.Parse(e.SpecFile, e.Spec); err == nil {
			p.Entrypoint = sp.Entrypoint.Argv
		}
		pairs = append(pairs, p)
	}
	return pairs, nil
}
