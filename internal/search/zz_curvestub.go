package search

func newCurveStopper(maxR int64, threshold float64, minSteps, minTrials int64, sign float64) (stopper, error) {
	return nil, nil
}
