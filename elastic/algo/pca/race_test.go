//go:build race

package pca

// The race detector slows the arithmetic some twentyfold: the large
// stream is shortened under it.
const raceEnabled = true
