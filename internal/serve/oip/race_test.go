//go:build race

package oip

// raceEnabled: with the race detector, sync.Pool drops a share of what is
// put back, so pooled buffers are allocated again now and then.
const raceEnabled = true
