//go:build race

package engine

// raceEnabled: the race detector slows computation about eightfold.
const raceEnabled = true
