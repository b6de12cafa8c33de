//go:build !race

package pca

const raceEnabled = false
