//go:build !race

package linear

const raceEnabled = false
