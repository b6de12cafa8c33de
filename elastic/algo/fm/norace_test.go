//go:build !race

package fm

const raceEnabled = false
