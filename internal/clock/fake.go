package clock

import (
	"slices"
	"sync"
	"time"
)

// Fake is a Clock that moves only when Advance or Set is called. Advance
// fires the timers and tickers that fall due in time order, and has run
// every due AfterFunc callback when it returns, so a test that advances the
// clock sees their effects at once. It is safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	seq     int64 // orders waiters due at the same time by creation
	waiters []*fakeWaiter
	// advancing serialises Advance calls, so callbacks run in time order
	// even when two goroutines advance the clock.
	advancing sync.Mutex
}

var _ Clock = (*Fake)(nil)

// NewFake returns a fake clock reading start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// fakeWaiter is a timer, a ticker or an AfterFunc on a Fake.
type fakeWaiter struct {
	clk    *Fake
	at     time.Time
	seq    int64
	period time.Duration // tickers: > 0
	f      func()        // AfterFunc
	c      chan time.Time
}

// Now returns the fake's time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Since returns f.Now().Sub(t).
func (f *Fake) Since(t time.Time) time.Duration { return f.Now().Sub(t) }

// NewTicker returns a ticker that ticks each time Advance passes a multiple
// of d since it was made; like a real ticker, it drops the ticks its
// receiver has not taken (its channel holds one).
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	w := &fakeWaiter{clk: f, period: d, c: make(chan time.Time, 1)}
	f.add(w, d)
	return (*fakeTicker)(w)
}

// NewTimer returns a timer that fires when Advance reaches d from now.
func (f *Fake) NewTimer(d time.Duration) Timer {
	w := &fakeWaiter{clk: f, c: make(chan time.Time, 1)}
	f.add(w, d)
	return (*fakeTimer)(w)
}

// AfterFunc returns a timer that calls fn, in the goroutine that advances
// the clock, when Advance reaches d from now. A d <= 0 waits for the next
// Advance (or Set), so fn never runs inside the call that schedules it.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	w := &fakeWaiter{clk: f, f: fn}
	f.add(w, d)
	return (*fakeTimer)(w)
}

// Advance moves the clock forward by d (d >= 0), firing every timer and
// ticker due by the new time in the order they fall due (the clock reads
// each one's due time while it fires), and returns the new time.
func (f *Fake) Advance(d time.Duration) time.Time {
	if d < 0 {
		panic("clock: Advance with a negative duration")
	}
	f.advancing.Lock()
	defer f.advancing.Unlock()
	f.mu.Lock()
	end := f.now.Add(d)
	f.mu.Unlock()
	f.runUntil(end)
	return end
}

// Set moves the clock to t, firing what falls due as Advance does; t before
// the clock's time only sets it back, firing nothing.
func (f *Fake) Set(t time.Time) {
	f.advancing.Lock()
	defer f.advancing.Unlock()
	f.mu.Lock()
	if t.Before(f.now) {
		f.now = t
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	f.runUntil(t)
}

// Waiters returns how many timers, tickers and AfterFuncs are active: a
// test can wait until the code under test has armed its timer before
// advancing the clock.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

// runUntil fires what is due by end, one waiter at a time, with the clock
// at the waiter's due time; callbacks run without the lock held, so they
// may use the clock.
func (f *Fake) runUntil(end time.Time) {
	for {
		f.mu.Lock()
		if len(f.waiters) == 0 || f.waiters[0].at.After(end) {
			f.now = end
			f.mu.Unlock()
			return
		}
		w := f.waiters[0]
		f.waiters = f.waiters[1:]
		if w.at.After(f.now) {
			f.now = w.at
		}
		now := f.now
		if w.period > 0 {
			f.insert(w, w.at.Add(w.period))
		}
		f.mu.Unlock()
		if w.f != nil {
			w.f()
			continue
		}
		select {
		case w.c <- now:
		default: // the receiver has not taken the last one: drop it
		}
	}
}

func (f *Fake) add(w *fakeWaiter, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.insert(w, f.now.Add(d))
}

// insert schedules w at at; the caller holds mu.
func (f *Fake) insert(w *fakeWaiter, at time.Time) {
	f.seq++
	w.at, w.seq = at, f.seq
	i, _ := slices.BinarySearchFunc(f.waiters, w, func(a, b *fakeWaiter) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return int(a.seq - b.seq)
	})
	f.waiters = slices.Insert(f.waiters, i, w)
}

// remove unschedules w, reporting whether it was scheduled; the caller
// holds mu.
func (f *Fake) remove(w *fakeWaiter) bool {
	i := slices.Index(f.waiters, w)
	if i < 0 {
		return false
	}
	f.waiters = slices.Delete(f.waiters, i, i+1)
	return true
}

type fakeTimer fakeWaiter

var _ Timer = (*fakeTimer)(nil)

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	f := t.clk
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.remove((*fakeWaiter)(t))
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	f := t.clk
	f.mu.Lock()
	defer f.mu.Unlock()
	active := f.remove((*fakeWaiter)(t))
	f.insert((*fakeWaiter)(t), f.now.Add(d))
	return active
}

type fakeTicker fakeWaiter

var _ Ticker = (*fakeTicker)(nil)

func (t *fakeTicker) C() <-chan time.Time { return t.c }

func (t *fakeTicker) Stop() {
	f := t.clk
	f.mu.Lock()
	defer f.mu.Unlock()
	f.remove((*fakeWaiter)(t))
}

func (t *fakeTicker) Reset(d time.Duration) {
	if d <= 0 {
		panic("clock: non-positive interval for Ticker.Reset")
	}
	f := t.clk
	f.mu.Lock()
	defer f.mu.Unlock()
	f.remove((*fakeWaiter)(t))
	t.period = d
	f.insert((*fakeWaiter)(t), f.now.Add(d))
}
