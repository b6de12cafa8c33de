package forecast

import (
	"math"
	"slices"
	"testing"

	"github.com/virga-ml/virga/internal/spec"
)

// TestExpectedStepsFollowsTheGracePeriod: without min_resource, ASHA's
// expected work starts from the searcher's default first rung (3 of 27),
// not from step 1.
func TestExpectedStepsFollowsTheGracePeriod(t *testing.T) {
	e := &spec.Experiment{MaxTrials: 9, Searcher: spec.Searcher{Name: "random+asha", Sampler: "random", Stopper: "asha",
		Settings: map[string]any{"max_resource": int64(27)}}}
	// 9 trials to 3, 3 of them to 9, 1 to 27: 27 + 18 + 18 steps.
	if got := ExpectedSteps(e, 27); math.Abs(got-63) > 1e-9 {
		t.Errorf("expectedSteps = %v, want 63", got)
	}
	e.Searcher.Settings["min_resource"] = int64(1)
	// 9 to 1, 3 to 3, 1 to 9, 1/3 to 27: 9 + 6 + 6 + 6.
	if got := ExpectedSteps(e, 27); math.Abs(got-27) > 1e-9 {
		t.Errorf("expectedSteps with min_resource 1 = %v, want 27", got)
	}
}

// TestAttemptShares: the attempts an estimate bills one by one: one per
// trial without a stopper; under ASHA in stop mode one per trial, of the
// length of the rung it is stopped at; in promote mode one per rung a
// trial reaches (a promotion resumes it as a new attempt).
func TestAttemptShares(t *testing.T) {
	lengths := func(e *spec.Experiment, steps int64) []float64 {
		sh := AttemptShares(e, steps, 1)
		total := ExpectedSteps(e, steps)
		out := make([]float64, len(sh))
		for i, s := range sh {
			out[i] = math.Round(s * total)
		}
		slices.Sort(out)
		return out
	}
	plain := &spec.Experiment{MaxTrials: 3, Searcher: spec.Searcher{Sampler: "random"}}
	if got := lengths(plain, 10); !slices.Equal(got, []float64{10, 10, 10}) {
		t.Errorf("random: %v", got)
	}
	asha := &spec.Experiment{MaxTrials: 9, Searcher: spec.Searcher{Sampler: "random", Stopper: "asha",
		Settings: map[string]any{"max_resource": int64(27), "min_resource": int64(3)}}}
	// 9 trials to 3; 3 of them to 9; 1 to 27: 6 stopped at 3, 2 at 9, 1 at 27.
	if got := lengths(asha, 27); !slices.Equal(got, []float64{3, 3, 3, 3, 3, 3, 9, 9, 27}) {
		t.Errorf("asha stop: %v", got)
	}
	asha.Searcher.Settings["mode"] = "promote"
	// 9 attempts of 3, 3 resumptions of 6, 1 of 18.
	if got := lengths(asha, 27); !slices.Equal(got, []float64{3, 3, 3, 3, 3, 3, 3, 3, 3, 6, 6, 6, 18}) {
		t.Errorf("asha promote: %v", got)
	}
}
