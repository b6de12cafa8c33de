package capacity

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/virga-ml/virga/internal/capacity/trace"
	"github.com/virga-ml/virga/internal/spec"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// naiveUp is the reference for a replay: the tick the wall time t falls in.
func naiveUp(counts []int, tick time.Duration, speed float64, offset time.Duration, start, t time.Time) bool {
	traceTime := float64(t.Sub(start))*speed + float64(offset)
	i := int(math.Floor(traceTime / float64(tick)))
	n := len(counts)
	i = ((i % n) + n) % n
	return counts[i] > 0
}

// checkWalk follows a timeline from t through its changes up to end and
// checks every answer against want at the change points and between them.
func checkWalk(t *testing.T, tl *Timeline, from, end time.Time, want func(time.Time) bool) (changes int) {
	t.Helper()
	at := from
	for at.Before(end) {
		up, next := tl.Up(at)
		if up != want(at) {
			t.Fatalf("Up(%v) = %v, want %v", at.Sub(from), up, !up)
		}
		if next.IsZero() {
			return changes
		}
		if !next.After(at) {
			t.Fatalf("Up(%v): next %v is not after it", at.Sub(from), next.Sub(from))
		}
		// Just before the change the state is the same; at it, it differs.
		if before := next.Add(-1); before.After(at) {
			if got, _ := tl.Up(before); got != up {
				t.Fatalf("Up(%v) = %v just before the change at %v, want %v", before.Sub(from), got, next.Sub(from), up)
			}
		}
		if got, _ := tl.Up(next); got == up {
			t.Fatalf("Up(%v) = %v at the announced change, want %v", next.Sub(from), got, !up)
		}
		at = next
		changes++
	}
	return changes
}

func TestReplayTrace(t *testing.T) {
	counts := []int{1, 1, 0, 0, 3, 0, 1, 1, 1, 0}
	a := &trace.Availability{Tick: 10 * time.Second, Count: counts}
	tests := []struct {
		name   string
		speed  float64
		offset time.Duration
	}{
		{"real time", 1, 0},
		{"offset inside a tick", 1, 25 * time.Second},
		{"offset past the end wraps", 1, 125 * time.Second},
		{"fast", 10, 30 * time.Second},
		{"slow", 0.5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ReplayTrace(a, tt.speed, tt.offset, false)
			if err != nil {
				t.Fatal(err)
			}
			tl := m.Timeline(t0, nil)
			span := time.Duration(float64(a.Duration()) / tt.speed)
			n := checkWalk(t, tl, t0, t0.Add(3*span), func(at time.Time) bool {
				return naiveUp(counts, a.Tick, tt.speed, tt.offset, t0, at)
			})
			// Six changes per period (the run at the end joins the one at the start).
			if n < 17 || n > 19 {
				t.Errorf("%d changes over three periods, want 18 (give or take the ends)", n)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for range 2000 {
				at := t0.Add(time.Duration(rng.Int64N(int64(5*span))) - span)
				if up, _ := tl.Up(at); up != naiveUp(counts, a.Tick, tt.speed, tt.offset, t0, at) {
					t.Fatalf("Up(%v) = %v, want the trace's tick", at.Sub(t0), up)
				}
			}
		})
	}
}

func TestReplayTraceWithoutWrapChange(t *testing.T) {
	// First and last ticks differ: the state flips at the wrap too.
	a := &trace.Availability{Tick: time.Minute, Count: []int{0, 1, 1}}
	m, err := ReplayTrace(a, 1, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	tl := m.Timeline(t0, nil)
	for _, c := range []struct {
		at   time.Duration
		up   bool
		next time.Duration
	}{
		{0, false, time.Minute},
		{time.Minute, true, 3 * time.Minute},
		{3 * time.Minute, false, 4 * time.Minute},
		{-time.Second, true, 0},
	} {
		up, next := tl.Up(t0.Add(c.at))
		if up != c.up || next.Sub(t0) != c.next {
			t.Errorf("Up(%v) = %v, %v; want %v, %v", c.at, up, next.Sub(t0), c.up, c.next)
		}
	}
}

func TestConstantTimelines(t *testing.T) {
	always, err := ReplayTrace(&trace.Availability{Tick: time.Second, Count: []int{2, 1, 4}}, 1, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	never, err := ReplayTrace(&trace.Availability{Tick: time.Second, Count: []int{0, 0}}, 1, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	var nilTimeline *Timeline
	for _, c := range []struct {
		name string
		tl   interface {
			Up(time.Time) (bool, time.Time)
		}
		up bool
	}{
		{"none", Never().Timeline(t0, nil), true},
		{"nil model", (*Preemption)(nil).Timeline(t0, nil), true},
		{"nil timeline", nilTimeline, true},
		{"trace always up", always.Timeline(t0, nil), true},
		{"trace never up", never.Timeline(t0, nil), false},
	} {
		for _, at := range []time.Time{t0.Add(-time.Hour), t0, t0.Add(1000 * time.Hour)} {
			if up, next := c.tl.Up(at); up != c.up || !next.IsZero() {
				t.Errorf("%s: Up(%v) = %v, %v; want %v, never", c.name, at, up, next, c.up)
			}
		}
	}
	if s := never.Stats(); s != (Stats{}) {
		t.Errorf("never-up stats = %+v", s)
	}
	if s := always.Stats(); s != (Stats{Available: 1}) {
		t.Errorf("always-up stats = %+v", s)
	}
}

func TestReplayTraceStats(t *testing.T) {
	// Up runs (cyclic): 2+3 joined over the wrap, 1; down runs: 2, 1.
	a := &trace.Availability{Tick: 30 * time.Second, Count: []int{1, 1, 0, 0, 1, 0, 1, 1, 1}}
	m, err := ReplayTrace(a, 3, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	tick := 10 * time.Second // wall
	want := Stats{
		Available:          6.0 / 9,
		MeanUp:             3 * tick,
		MeanOutage:         tick * 3 / 2,
		PreemptionsPerHour: 2 / (6 * tick).Hours(),
	}
	if diff := cmp.Diff(want, m.Stats(), cmpopts.EquateApprox(1e-12, 0)); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
	if m.Kind() != spec.PreemptTrace {
		t.Errorf("Kind = %s", m.Kind())
	}
}

func TestReplayTraceErrors(t *testing.T) {
	a := &trace.Availability{Tick: time.Second, Count: []int{1, 0}}
	for _, c := range []struct {
		a     *trace.Availability
		speed float64
	}{
		{&trace.Availability{Tick: time.Second}, 1},
		{a, 0},
		{a, math.Inf(1)},
		{a, 1e7}, // a tick would last 100ns
	} {
		if _, err := ReplayTrace(c.a, c.speed, 0, false); err == nil {
			t.Errorf("ReplayTrace(%d ticks, speed %g) succeeded", len(c.a.Count), c.speed)
		}
	}
}

func TestRandomOffset(t *testing.T) {
	counts := make([]int, 1000)
	for i := range counts {
		counts[i] = i / 7 % 2
	}
	a := &trace.Availability{Tick: time.Minute, Count: counts}
	m, err := ReplayTrace(a, 1, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	offsets := map[time.Duration]bool{}
	for seed := range uint64(20) {
		tl := m.Timeline(t0, rand.New(rand.NewPCG(seed, 0)))
		again := m.Timeline(t0, rand.New(rand.NewPCG(seed, 0)))
		if tl.offset != again.offset {
			t.Fatalf("seed %d: offsets %v and %v differ", seed, tl.offset, again.offset)
		}
		if tl.offset < 0 || tl.offset >= m.period {
			t.Fatalf("offset %v outside the period %v", tl.offset, m.period)
		}
		offsets[tl.offset] = true
		checkWalk(t, tl, t0, t0.Add(3*time.Hour), func(at time.Time) bool {
			return naiveUp(counts, a.Tick, 1, tl.offset, t0, at)
		})
	}
	if len(offsets) < 15 {
		t.Errorf("20 seeds gave %d distinct offsets", len(offsets))
	}
}

func TestRateModel(t *testing.T) {
	m, err := RateModel(0.5, 30*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{Available: 0.8, MeanUp: 2 * time.Hour, MeanOutage: 30 * time.Minute, PreemptionsPerHour: 0.5}
	if diff := cmp.Diff(want, m.Stats(), cmpopts.EquateApprox(1e-12, 0)); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}

	// Over a long horizon the drawn timeline agrees with the model.
	tl := m.Timeline(t0, rand.New(rand.NewPCG(7, 7)))
	end := t0.Add(20000 * time.Hour)
	var upTime, downTime time.Duration
	ups, downs := 0, 0
	for at := t0; at.Before(end); {
		up, next := tl.Up(at)
		if next.IsZero() || !next.After(at) {
			t.Fatalf("Up(%v): next %v", at, next)
		}
		if up {
			upTime += next.Sub(at)
			ups++
		} else {
			downTime += next.Sub(at)
			downs++
		}
		at = next
	}
	if got := float64(upTime) / float64(upTime+downTime); math.Abs(got-0.8) > 0.02 {
		t.Errorf("available %.3f of the time, want 0.8", got)
	}
	if got := upTime / time.Duration(ups); got < 110*time.Minute || got > 130*time.Minute {
		t.Errorf("mean up %v, want about 2h", got)
	}
	if got := downTime / time.Duration(downs); got < 27*time.Minute || got > 33*time.Minute {
		t.Errorf("mean outage %v, want about 30m", got)
	}

	// The same seed gives the same timeline, whatever order it is asked in
	// and whatever is drawn from the source afterwards.
	rng := rand.New(rand.NewPCG(3, 4))
	a := m.Timeline(t0, rng)
	rng.Uint64()
	b := m.Timeline(t0, rand.New(rand.NewPCG(3, 4)))
	b.Up(t0.Add(5000 * time.Hour)) // draws far ahead first
	for h := 0; h < 5000; h += 7 {
		at := t0.Add(time.Duration(h) * time.Hour)
		ua, na := a.Up(at)
		ub, nb := b.Up(at)
		if ua != ub || !na.Equal(nb) {
			t.Fatalf("at %dh: %v %v vs %v %v", h, ua, na, ub, nb)
		}
	}
	// Different seeds give different timelines.
	c := m.Timeline(t0, rand.New(rand.NewPCG(5, 6)))
	_, na := a.Up(t0)
	_, nc := c.Up(t0)
	if na.Equal(nc) {
		t.Error("two seeds gave the same first change")
	}
	// Before the start, the state is the start's.
	if ub, _ := b.Up(t0.Add(-time.Hour)); ub != b.up0 {
		t.Error("state before the start differs from the state at the start")
	}

	for _, bad := range []struct {
		rate   float64
		outage time.Duration
	}{{0, time.Minute}, {-1, time.Minute}, {math.NaN(), time.Minute}, {1, 0}, {1e-9, time.Minute}} {
		if _, err := RateModel(bad.rate, bad.outage); err == nil {
			t.Errorf("RateModel(%g, %v) succeeded", bad.rate, bad.outage)
		}
	}
}

func TestRateTimelineRepeatsAfterTheLimit(t *testing.T) {
	// A very high rate reaches maxDrawnChanges quickly; past it the timeline
	// repeats and still answers consistently.
	m, err := RateModel(3.6e6, time.Millisecond) // mean up 1ms
	if err != nil {
		t.Fatal(err)
	}
	tl := m.Timeline(t0, rand.New(rand.NewPCG(1, 1)))
	far := t0.Add(1000 * time.Hour)
	up, next := tl.Up(far)
	if next.IsZero() || !next.After(far) {
		t.Fatalf("Up(far) = %v, %v", up, next)
	}
	s := tl.gen.cur.Load()
	if s.period == 0 || len(s.changes)+1 > maxDrawnChanges {
		t.Fatalf("after a far query: period %v, %d changes", s.period, len(s.changes))
	}
	at := far
	for range 1000 {
		u, n := tl.Up(at)
		if u2, _ := tl.Up(n); u2 == u {
			t.Fatalf("no change at the announced %v", n)
		}
		at = n
	}
}

func TestTimelineConcurrent(t *testing.T) {
	m, err := RateModel(6, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ref := m.Timeline(t0, rand.New(rand.NewPCG(9, 9)))
	shared := m.Timeline(t0, rand.New(rand.NewPCG(9, 9)))
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 0))
			for range 2000 {
				at := t0.Add(time.Duration(rng.Int64N(int64(2000 * time.Hour))))
				u1, n1 := shared.Up(at)
				u2, n2 := ref.Up(at)
				if u1 != u2 || !n1.Equal(n2) {
					errs <- at.String()
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("concurrent answer at %s differs", e)
	}
}

func TestBidModel(t *testing.T) {
	h := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Hour) }
	s := &trace.Series{Steps: []trace.Price{
		{Time: h(0), USDPerHour: 1.0},
		{Time: h(2), USDPerHour: 1.5}, // above the bid: down
		{Time: h(3), USDPerHour: math.NaN()},
		{Time: h(4), USDPerHour: 1.2}, // at the bid: up
		{Time: h(8), USDPerHour: 1.3},
		{Time: h(10), USDPerHour: 0.9},
	}}
	m, err := BidModel(s, 1.2)
	if err != nil {
		t.Fatal(err)
	}
	tl := m.Timeline(t0.Add(time.Hour), nil) // start does not matter
	for _, c := range []struct {
		at   int
		up   bool
		next time.Time
	}{
		{-5, true, h(2)},
		{0, true, h(2)},
		{2, false, h(4)},
		{3, false, h(4)}, // the NaN keeps the price before it
		{4, true, h(8)},
		{8, false, h(10)},
		{10, true, time.Time{}},
		{100, true, time.Time{}},
	} {
		up, next := tl.Up(h(c.at))
		if up != c.up || !next.Equal(c.next) {
			t.Errorf("Up(%dh) = %v, %v; want %v, %v", c.at, up, next, c.up, c.next)
		}
	}
	// Over the series' 10 hours: up 2+4, down 2+2; two reclaims.
	want := Stats{Available: 0.6, MeanUp: 3 * time.Hour, MeanOutage: 2 * time.Hour, PreemptionsPerHour: 2.0 / 6}
	if diff := cmp.Diff(want, m.Stats(), cmpopts.EquateApprox(1e-12, 0)); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}

	if _, err := BidModel(&trace.Series{Steps: []trace.Price{{Time: t0, USDPerHour: math.NaN()}}}, 1); err == nil {
		t.Error("BidModel on a series of no price succeeded")
	}
	one, err := BidModel(&trace.Series{Steps: []trace.Price{{Time: t0, USDPerHour: 2}}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if s := one.Stats(); s != (Stats{}) {
		t.Errorf("stats of a price always above the bid = %+v", s)
	}
}

func TestUpAllocatesNothing(t *testing.T) {
	counts := make([]int, 20000)
	for i := range counts {
		counts[i] = (i / 13) % 2
	}
	replay, err := ReplayTrace(&trace.Availability{Tick: 195 * time.Second, Count: counts}, 60, time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	rate, err := RateModel(0.5, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*Preemption{replay, rate, Never()} {
		tl := m.Timeline(t0, rand.New(rand.NewPCG(1, 2)))
		tl.Up(t0.Add(1000 * time.Hour)) // draw ahead
		rng := rand.New(rand.NewPCG(3, 4))
		allocs := testing.AllocsPerRun(1000, func() {
			tl.Up(t0.Add(time.Duration(rng.Int64N(int64(1000 * time.Hour)))))
		})
		if allocs != 0 {
			t.Errorf("%s: Up allocates %v times per call", m, allocs)
		}
	}
}

func BenchmarkUp(b *testing.B) {
	counts := make([]int, 20000)
	r := rand.New(rand.NewPCG(1, 1))
	for i := range counts {
		if r.Float64() < 0.6 {
			counts[i] = 1
		}
	}
	replay, err := ReplayTrace(&trace.Availability{Tick: 195 * time.Second, Count: counts}, 60, 0, false)
	if err != nil {
		b.Fatal(err)
	}
	rate, err := RateModel(0.5, 10*time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		m    *Preemption
	}{{"trace", replay}, {"rate", rate}} {
		b.Run(c.name, func(b *testing.B) {
			tl := c.m.Timeline(t0, rand.New(rand.NewPCG(1, 2)))
			tl.Up(t0.Add(10000 * time.Hour))
			at := t0
			for b.Loop() {
				_, next := tl.Up(at)
				if next.IsZero() {
					next = t0
				}
				at = next
				if at.Sub(t0) > 10000*time.Hour {
					at = t0
				}
			}
		})
	}
}
