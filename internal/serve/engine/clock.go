package engine

import "time"

// Clock is the engine's time: the zero Options use the real one, tests a
// fake they advance.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed; stop
	// prevents that if it has not happened yet.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
