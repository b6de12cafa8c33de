package clock_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/clock"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestZeroAndNilAreReal(t *testing.T) {
	for name, c := range map[string]clock.Clock{"zero": clock.Real{}, "Or(nil)": clock.Or(nil)} {
		before := time.Now()
		got := c.Now()
		if got.Before(before) || time.Since(got) > time.Minute {
			t.Errorf("%s: Now() = %v, want about %v", name, got, before)
		}
		tm := c.NewTimer(time.Millisecond)
		select {
		case <-tm.C():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: real timer did not fire", name)
		}
		done := make(chan struct{})
		c.AfterFunc(time.Millisecond, func() { close(done) })
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: real AfterFunc did not run", name)
		}
	}
	f := clock.NewFake(t0)
	if clock.Or(f) != clock.Clock(f) {
		t.Error("Or(fake) is not the fake")
	}
}

func TestFakeAdvance(t *testing.T) {
	f := clock.NewFake(t0)
	if got := f.Now(); !got.Equal(t0) {
		t.Fatalf("Now() = %v, want %v", got, t0)
	}
	tm := f.NewTimer(time.Second)
	var order []string
	var at []time.Time
	f.AfterFunc(1500*time.Millisecond, func() { order = append(order, "b"); at = append(at, f.Now()) })
	f.AfterFunc(500*time.Millisecond, func() { order = append(order, "a"); at = append(at, f.Now()) })
	f.AfterFunc(5*time.Second, func() { order = append(order, "late") })

	f.Advance(999 * time.Millisecond)
	select {
	case v := <-tm.C():
		t.Fatalf("timer fired early, at %v", v)
	default:
	}
	if got := f.Advance(time.Millisecond); !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("Advance returned %v", got)
	}
	select {
	case v := <-tm.C():
		if !v.Equal(t0.Add(time.Second)) {
			t.Errorf("timer sent %v, want %v", v, t0.Add(time.Second))
		}
	default:
		t.Fatal("timer did not fire at its time")
	}
	f.Advance(time.Second)
	if want := []string{"a", "b"}; len(order) != 2 || order[0] != want[0] || order[1] != want[1] {
		t.Fatalf("callbacks ran %v, want %v", order, want)
	}
	// Each callback saw the clock at its own due time.
	if !at[0].Equal(t0.Add(500*time.Millisecond)) || !at[1].Equal(t0.Add(1500*time.Millisecond)) {
		t.Errorf("callbacks saw %v", at)
	}
	if n := f.Waiters(); n != 1 {
		t.Errorf("Waiters() = %d, want 1 (the late one)", n)
	}
	if f.Since(t0) != 2*time.Second {
		t.Errorf("Since = %v", f.Since(t0))
	}
}

func TestFakeStopReset(t *testing.T) {
	f := clock.NewFake(t0)
	var ran atomic.Int32
	tm := f.AfterFunc(time.Second, func() { ran.Add(1) })
	if !tm.Stop() {
		t.Fatal("Stop of an active timer returned false")
	}
	if tm.Stop() {
		t.Fatal("second Stop returned true")
	}
	f.Advance(time.Hour)
	if ran.Load() != 0 {
		t.Fatal("stopped AfterFunc ran")
	}
	if tm.Reset(time.Second) {
		t.Fatal("Reset of a stopped timer returned true")
	}
	f.Advance(999 * time.Millisecond)
	if ran.Load() != 0 {
		t.Fatal("reset AfterFunc ran early")
	}
	f.Advance(time.Millisecond)
	if ran.Load() != 1 {
		t.Fatal("reset AfterFunc did not run")
	}
	// A zero delay waits for the next Advance, not the scheduling call.
	f.AfterFunc(0, func() { ran.Add(1) })
	if ran.Load() != 1 {
		t.Fatal("AfterFunc(0) ran at once")
	}
	f.Advance(0)
	if ran.Load() != 2 {
		t.Fatal("AfterFunc(0) did not run on Advance(0)")
	}
}

func TestFakeTicker(t *testing.T) {
	f := clock.NewFake(t0)
	tk := f.NewTicker(time.Second)
	for i := 1; i <= 3; i++ {
		f.Advance(time.Second)
		select {
		case v := <-tk.C():
			if want := t0.Add(time.Duration(i) * time.Second); !v.Equal(want) {
				t.Errorf("tick %d at %v, want %v", i, v, want)
			}
		default:
			t.Fatalf("no tick %d", i)
		}
	}
	// Ticks the receiver does not take are dropped: one is kept.
	f.Advance(10 * time.Second)
	<-tk.C()
	select {
	case v := <-tk.C():
		t.Fatalf("a second buffered tick %v", v)
	default:
	}
	tk.Reset(time.Minute)
	f.Advance(59 * time.Second)
	select {
	case <-tk.C():
		t.Fatal("tick before the reset period")
	default:
	}
	f.Advance(time.Second)
	select {
	case <-tk.C():
	default:
		t.Fatal("no tick after the reset period")
	}
	tk.Stop()
	f.Advance(time.Hour)
	select {
	case <-tk.C():
		t.Fatal("tick after Stop")
	default:
	}
	if n := f.Waiters(); n != 0 {
		t.Errorf("Waiters() = %d after Stop", n)
	}
}

func TestFakeSet(t *testing.T) {
	f := clock.NewFake(t0)
	fired := false
	f.AfterFunc(time.Minute, func() { fired = true })
	f.Set(t0.Add(-time.Hour))
	if fired || !f.Now().Equal(t0.Add(-time.Hour)) {
		t.Fatalf("Set backwards: fired %v, now %v", fired, f.Now())
	}
	f.Set(t0.Add(time.Minute))
	if !fired {
		t.Fatal("Set forwards past the AfterFunc did not run it")
	}
}

// A callback may use the clock, including scheduling more work that falls
// due within the same Advance.
func TestFakeCallbackReentry(t *testing.T) {
	f := clock.NewFake(t0)
	var n int
	var again func()
	again = func() {
		n++
		if n < 5 {
			f.AfterFunc(time.Second, again)
		}
	}
	f.AfterFunc(time.Second, again)
	f.Advance(10 * time.Second)
	if n != 5 {
		t.Fatalf("chained callbacks ran %d times, want 5", n)
	}
	if !f.Now().Equal(t0.Add(10 * time.Second)) {
		t.Errorf("Now() = %v", f.Now())
	}
}

// Concurrent use: run with -race.
func TestFakeConcurrent(t *testing.T) {
	f := clock.NewFake(t0)
	var fired atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				tm := f.AfterFunc(time.Duration(i%7)*time.Millisecond, func() { fired.Add(1) })
				if i%3 == 0 && tm.Stop() {
					fired.Add(1) // counted as if it ran: it never will
				}
				_ = f.Now()
				tk := f.NewTicker(time.Millisecond)
				tk.Stop()
			}
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				f.Advance(time.Millisecond)
			}
		}()
	}
	wg.Wait()
	f.Advance(time.Second)
	if got := fired.Load(); got != 8*200 {
		t.Fatalf("%d callbacks ran or were stopped, want %d", got, 8*200)
	}
	if n := f.Waiters(); n != 0 {
		t.Errorf("Waiters() = %d, want 0", n)
	}
}
