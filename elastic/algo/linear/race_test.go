//go:build race

package linear

// raceEnabled: under the race detector (ten times slower) the tests stream
// fewer rows.
const raceEnabled = true
