//go:build race

package fm

// raceEnabled: under the race detector (ten times slower) the tests stream
// fewer rows.
const raceEnabled = true
