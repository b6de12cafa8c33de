//go:build race

package kmeans

// The race detector slows the arithmetic some twentyfold: the large
// stream is shortened under it.
const raceEnabled = true
