// Package forecast says how much of an experiment's work is left and,
// while it runs, how long and how much money it will take to end, with the
// chances of meeting its deadline and its budget.
//
// The work's shape (Steps, ExpectedSteps, AttemptShares) is what the
// estimate before a run uses too. The forecast during a run (Remaining)
// extrapolates the run's own rate (elapsed time and spend per step run so
// far) to the steps left, blended with the estimate kept from before the
// run while little has run (weight: the share done), and spreads it by the
// error such forecasts have (Unmodelled, measured by bench/estimate) on the
// share of the run still to come.
package forecast

import (
	"math"
	"math/rand/v2"

	"github.com/virga-ml/virga/internal/spec"
)

// DefaultUnmodelled is the spread (log standard deviation) of what a
// forecast of a whole run leaves out, as measured by bench/estimate on a
// 2-core machine: the log of actual over forecast wall time of 11 runs of 8
// kinds (searchers, examples, billings, concurrency) had a standard
// deviation of 0.31 and a mean of 0.
const DefaultUnmodelled = 0.3

// StepsConstant is the steps a trial runs when the experiment fixes them as
// a constant hyperparameter named epochs or steps (as the examples do).
func StepsConstant(e *spec.Experiment) (string, int64) {
	for _, name := range []string{"epochs", "steps"} {
		hp := e.Hyperparameters[name]
		if hp == nil || hp.Type != spec.HPConst {
			continue
		}
		switch v := hp.Value.(type) {
		case int64:
			return name, v
		case float64:
			if v == math.Trunc(v) && v > 0 {
				return name, int64(v)
			}
		}
	}
	return "", 0
}

// ExpectedSteps returns the steps all trials of e are expected to run when
// a trial that runs to the end runs steps: every trial to the end, or for
// the rung stoppers (asha, hyperband) the share successive halving lets
// through: all trials reach min_resource (by default the searcher's grace
// period, spec.DefaultMinResource), a 1/eta share of them each further rung.
func ExpectedSteps(e *spec.Experiment, steps int64) float64 {
	n := float64(max(e.MaxTrials, 1))
	switch e.Searcher.Stopper {
	case "asha", "hyperband":
		maxR := e.Searcher.Int("max_resource", steps)
		r := float64(e.Searcher.Int("min_resource", spec.DefaultMinResource(maxR, e.Searcher.Int("reduction_factor", 3))))
		big := float64(maxR)
		eta := e.Searcher.Float("reduction_factor", 3)
		if r <= 0 || big <= r || eta <= 1 {
			break
		}
		total, share, at := n*r, 1.0, r
		for at < big {
			next := math.Min(at*eta, big)
			share /= eta
			total += n * share * (next - at)
			at = next
		}
		return total
	}
	return n * float64(steps)
}

// AttemptShares returns e's attempts, each as its share of the steps all
// trials run (ExpectedSteps), in the order they start: a trial without a
// rung stopper is one attempt of steps; under asha or hyperband in stop
// mode a trial runs on until it is stopped at a rung or reaches the end,
// one attempt each (their lengths in a shuffled order, seeded); in promote
// mode a trial pauses at each rung and each promotion resumes it as a new
// attempt, which starts again and is billed again. Counts at each rung are
// the expected ones, rounded (at least one trial reaches the end).
func AttemptShares(e *spec.Experiment, steps int64, seed uint64) []float64 {
	n := max(e.MaxTrials, 1)
	var lens []float64
	maxR := e.Searcher.Int("max_resource", steps)
	eta := e.Searcher.Float("reduction_factor", 3)
	r := float64(e.Searcher.Int("min_resource", spec.DefaultMinResource(maxR, e.Searcher.Int("reduction_factor", 3))))
	rungs := e.Searcher.Stopper == "asha" || e.Searcher.Stopper == "hyperband"
	if !rungs || r <= 0 || float64(maxR) <= r || eta <= 1 {
		for range n {
			lens = append(lens, float64(steps))
		}
	} else {
		// at[k] is rung k's resource, reach[k] how many trials reach it.
		at, reach := []float64{r}, []int{n}
		for share := 1.0; at[len(at)-1] < float64(maxR); {
			share /= eta
			at = append(at, math.Min(at[len(at)-1]*eta, float64(maxR)))
			reach = append(reach, max(int(math.Round(float64(n)*share)), 0))
		}
		if reach[len(reach)-1] == 0 {
			reach[len(reach)-1] = 1
		}
		for k := 1; k < len(reach); k++ {
			reach[k] = min(reach[k], reach[k-1])
		}
		if e.Searcher.Text("mode", "stop") == "promote" {
			for k := range at {
				from := 0.0
				if k > 0 {
					from = at[k-1]
				}
				for range reach[k] {
					lens = append(lens, at[k]-from)
				}
			}
		} else {
			for k := range at {
				stopped := reach[k]
				if k+1 < len(reach) {
					stopped -= reach[k+1]
				}
				for range stopped {
					lens = append(lens, at[k])
				}
			}
			rand.New(rand.NewPCG(seed, 0x6174746d)).Shuffle(len(lens), func(i, j int) { lens[i], lens[j] = lens[j], lens[i] })
		}
	}
	total := 0.0
	for _, l := range lens {
		total += l
	}
	for i := range lens {
		lens[i] /= total
	}
	return lens
}
