//go:build !race

package oip

const raceEnabled = false
