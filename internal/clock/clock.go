// Package clock is Virga's time: the real clock for the server, a fake one
// that moves only when a test advances it. Long-running code (the control
// loop, the backends, the API) takes a Clock instead of calling package time,
// so tests decide when timeouts, ticks and grace periods happen. It must
// never be the only way to learn the wall time of an external fact: events
// from processes carry their own times.
package clock

import "time"

// Clock tells the time and makes timers and tickers on it.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Since returns the time elapsed since t (Now().Sub(t)).
	Since(t time.Time) time.Duration
	// NewTicker returns a ticker sending the time on its channel every d
	// (d > 0), dropping ticks a slow receiver misses, as time.NewTicker.
	NewTicker(d time.Duration) Ticker
	// NewTimer returns a timer sending the time on its channel once d has
	// passed, as time.NewTimer.
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f once d has passed, as time.AfterFunc: in its own
	// goroutine on the real clock, in the goroutine that advances a fake one.
	// The Timer's channel is nil.
	AfterFunc(d time.Duration, f func()) Timer
}

// Ticker is a time.Ticker on some Clock.
type Ticker interface {
	// C returns the channel the ticks are sent on.
	C() <-chan time.Time
	// Stop stops the ticks; it does not close the channel.
	Stop()
	// Reset stops the ticker and restarts it with period d (d > 0).
	Reset(d time.Duration)
}

// Timer is a time.Timer on some Clock.
type Timer interface {
	// C returns the channel the time is sent on (nil for AfterFunc).
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did so
	// (false if the timer had fired or been stopped).
	Stop() bool
	// Reset makes the timer fire once d has passed from now; it reports
	// whether the timer had been active.
	Reset(d time.Duration) bool
}

// Real is the real clock (package time). Its zero value is ready to use.
type Real struct{}

var _ Clock = Real{}

// Or returns c, or the real clock when c is nil: what a Config's nil Clock
// means.
func Or(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Since returns time.Since(t).
func (Real) Since(t time.Time) time.Duration { return time.Since(t) }

// NewTicker returns a time.Ticker.
func (Real) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

// NewTimer returns a time.Timer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// AfterFunc returns time.AfterFunc(d, f).
func (Real) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, f)} }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time   { return r.t.C }
func (r realTicker) Stop()                 { r.t.Stop() }
func (r realTicker) Reset(d time.Duration) { r.t.Reset(d) }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }
