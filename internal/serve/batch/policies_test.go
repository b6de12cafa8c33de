package batch

import (
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ms(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

// at returns t0 + f milliseconds.
func at(f float64) time.Time { return t0.Add(ms(f)) }

// items returns n requests of one row arriving at t0+arrived ms, due
// objective ms later, at priority 0.
func items(n int, arrived, objective float64) []Item {
	q := make([]Item, n)
	for i := range q {
		q[i] = Item{Arrived: at(arrived), Deadline: at(arrived + objective), Rows: 1}
	}
	return q
}

func mustCheck(t *testing.T, d Decision, q []Item, idle int, p Profile) {
	t.Helper()
	if err := Check(d, q, idle, p); err != nil {
		t.Fatalf("invalid decision %+v: %v", d, err)
	}
}

func TestNoneRunsOneRequestFIFOWithinPriority(t *testing.T) {
	p := Linear{Base: ms(1), Max: 8}
	q := []Item{
		{Arrived: at(0), Deadline: at(100), Priority: 1, Rows: 1},
		{Arrived: at(1), Deadline: at(100), Priority: 0, Rows: 1},
		{Arrived: at(2), Deadline: at(100), Priority: 0, Rows: 1},
	}
	d := None{}.Decide(at(3), q, 1, p)
	mustCheck(t, d, q, 1, p)
	if !slices.Equal(d.Run, []int{1}) {
		t.Errorf("Run = %v, want [1] (the first request of the highest level)", d.Run)
	}
	if d := (None{}).Decide(at(3), q, 0, p); len(d.Run) != 0 {
		t.Errorf("with no idle instance Run = %v, want none", d.Run)
	}
}

func TestFixedDefaultsRunWhatIsQueuedAtOnce(t *testing.T) {
	p := Linear{Base: ms(1), Max: 4}
	f := &Fixed{}
	q := items(3, 0, 10)
	d := f.Decide(at(0), q, 1, p)
	mustCheck(t, d, q, 1, p)
	if !slices.Equal(d.Run, []int{0, 1, 2}) || !d.Wake.IsZero() {
		t.Errorf("3 queued, max 4, no delay: Run = %v Wake = %v, want [0 1 2] and no wake", d.Run, d.Wake)
	}
	q = items(6, 0, 10)
	d = f.Decide(at(0), q, 1, p)
	if !slices.Equal(d.Run, []int{0, 1, 2, 3}) {
		t.Errorf("6 queued, max 4: Run = %v, want the first 4", d.Run)
	}
}

func TestFixedWaitsForTheQueueDelay(t *testing.T) {
	p := Linear{Base: ms(1), Max: 8}
	f := &Fixed{MaxQueueDelay: ms(1)}
	q := items(3, 0, 10)
	d := f.Decide(at(0.5), q, 1, p)
	if len(d.Run) != 0 || !d.Wake.Equal(at(1)) {
		t.Fatalf("3 of 8 queued 0.5 ms into a 1 ms delay: Run = %v Wake = %v, want none until %v", d.Run, d.Wake, at(1))
	}
	d = f.Decide(at(1), q, 1, p)
	if !slices.Equal(d.Run, []int{0, 1, 2}) {
		t.Errorf("at the delay: Run = %v, want all 3", d.Run)
	}
}

func TestFixedPreferredBatchSizes(t *testing.T) {
	p := Linear{Base: ms(1), Max: 8}
	f := &Fixed{Preferred: []int{2, 4}, MaxQueueDelay: ms(1)}
	for _, c := range []struct {
		queued int
		now    float64
		want   int
	}{
		{queued: 1, now: 0, want: 0},   // no preferred size yet: wait
		{queued: 3, now: 0, want: 2},   // the largest preferred size reached, at once
		{queued: 5, now: 0, want: 4},   // past the largest preferred: that one
		{queued: 6, now: 1, want: 6},   // delay passed: everything pending
		{queued: 10, now: 0, want: 4},  // more than max: the largest preferred
		{queued: 10, now: 2, want: 8},  // delay passed: up to max
		{queued: 1, now: 1.5, want: 1}, // delay passed: whatever there is
	} {
		q := items(c.queued, 0, 10)
		d := f.Decide(at(c.now), q, 1, p)
		mustCheck(t, d, q, 1, p)
		if len(d.Run) != c.want {
			t.Errorf("%d queued at %v ms: ran %d, want %d", c.queued, c.now, len(d.Run), c.want)
		}
	}
}

func TestFixedPriorityLevelsAndQueuePolicy(t *testing.T) {
	p := Linear{Base: ms(1), Max: 2}
	q := []Item{
		{Arrived: at(0), Deadline: at(50), Priority: 2, Rows: 1},
		{Arrived: at(1), Deadline: at(50), Priority: 1, Rows: 1},
		{Arrived: at(2), Deadline: at(50), Priority: 2, Rows: 1},
		{Arrived: at(3), Deadline: at(50), Priority: 1, Rows: 1},
		{Arrived: at(4), Deadline: at(50), Priority: 1, Rows: 1},
	}
	d := (&Fixed{}).Decide(at(5), q, 1, p)
	if !slices.Equal(d.Run, []int{1, 3}) || len(d.Refuse) != 0 {
		t.Errorf("levels: Run = %v Refuse = %v, want [1 3] from level 1, none refused", d.Run, d.Refuse)
	}
	d = (&Fixed{MaxQueueSize: 2}).Decide(at(5), q, 1, p)
	if !slices.Equal(d.Refuse, []int{4}) {
		t.Errorf("max queue size 2: Refuse = %v, want [4] (the third of level 1)", d.Refuse)
	}
	d = (&Fixed{Timeout: ms(3.5)}).Decide(at(5), q, 1, p)
	if !slices.Equal(d.Refuse, []int{0, 1}) || !slices.Equal(d.Run, []int{3, 4}) {
		t.Errorf("timeout 3.5 ms, reject: Refuse = %v Run = %v, want [0 1] and [3 4]", d.Refuse, d.Run)
	}
	d = (&Fixed{Timeout: ms(3.5), TimeoutAction: Delay}).Decide(at(5), q, 1, p)
	if len(d.Refuse) != 0 || !slices.Equal(d.Run, []int{3, 4}) {
		t.Errorf("timeout 3.5 ms, delay: Refuse = %v Run = %v, want none and [3 4] (1 goes behind them)", d.Refuse, d.Run)
	}
	late := items(2, 0, 1)
	d = (&Fixed{AllowTimeoutOverride: true}).Decide(at(2), late, 1, p)
	if !slices.Equal(d.Refuse, []int{0, 1}) {
		t.Errorf("deadlines as timeouts: Refuse = %v, want both", d.Refuse)
	}
	d = (&Fixed{}).Decide(at(2), late, 1, p)
	if len(d.Refuse) != 0 {
		t.Errorf("Triton's default has no timeout: Refuse = %v, want none", d.Refuse)
	}
}

func TestAIMDGrowsAdditivelyAndBacksOffTenPercent(t *testing.T) {
	p := Linear{Base: ms(1), Max: 64}
	if c := (&AIMD{Initial: 16}).Cap(); c != 16 {
		t.Errorf("Initial 16: cap %d", c)
	}
	a := &AIMD{Objective: ms(10)}
	q := items(40, 0, 100)
	if d := a.Decide(at(0), q, 1, p); len(d.Run) != 1 {
		t.Fatalf("first batch: %d, want 1", len(d.Run))
	}
	for range 29 {
		a.Observe(1, ms(2), 0)
	}
	if a.Cap() != 30 {
		t.Fatalf("after 29 batches within the objective the cap is %d, want 30", a.Cap())
	}
	if d := a.Decide(at(0), q, 1, p); len(d.Run) != 30 {
		t.Errorf("Run %d, want 30", len(d.Run))
	}
	a.Observe(30, ms(11), 0)
	if a.Cap() != 27 {
		t.Errorf("after an overshoot the cap is %d, want 27 (30 less 10%%)", a.Cap())
	}
	for range 100 {
		a.Observe(1, ms(1), 0)
	}
	if a.Cap() != 64 {
		t.Errorf("the cap grew to %d, want the profile's 64", a.Cap())
	}
}

func TestDeadlineRefusesWhatCannotMeetItsDeadline(t *testing.T) {
	p := Linear{Base: ms(1), PerRow: ms(1), Max: 8}
	q := []Item{
		{Arrived: at(0), Deadline: at(1.9), Rows: 1}, // now+2ms > 1.9
		{Arrived: at(0), Deadline: at(2), Rows: 1},
		{Arrived: at(0), Deadline: at(10), Rows: 1},
	}
	d := (&Deadline{}).Decide(at(0), q, 0, p)
	mustCheck(t, d, q, 0, p)
	if !slices.Equal(d.Refuse, []int{0}) || len(d.Run) != 0 {
		t.Errorf("Refuse = %v Run = %v, want [0] and nothing run with no idle instance", d.Refuse, d.Run)
	}
	if want := at(0).Add(time.Nanosecond); !d.Wake.Equal(want) {
		t.Errorf("Wake = %v, want %v (when request 1 can no longer make it)", d.Wake, want)
	}
}

func TestDeadlineRunsTheLargestBatchMeetingTheEarliestDeadline(t *testing.T) {
	p := Linear{Base: ms(2), PerRow: ms(0.5), Max: 64}
	q := []Item{
		{Arrived: at(0), Deadline: at(20), Rows: 1},
		{Arrived: at(0), Deadline: at(3), Rows: 1}, // L(2) = 3 ms
		{Arrived: at(0), Deadline: at(20), Rows: 1},
		{Arrived: at(0), Deadline: at(20), Rows: 1},
	}
	d := (&Deadline{}).Decide(at(0), q, 1, p)
	mustCheck(t, d, q, 1, p)
	if len(d.Run) != 2 || !slices.Contains(d.Run, 1) {
		t.Errorf("Run = %v, want 2 requests, 1 among them", d.Run)
	}
	q[1].Deadline = at(20)
	if d := (&Deadline{}).Decide(at(0), q, 1, p); len(d.Run) != 4 {
		t.Errorf("with slack for all: Run = %v, want all 4", d.Run)
	}
}

func TestDeadlineGivesUpOneRequestToSaveTen(t *testing.T) {
	// The earliest-deadline batch (request 0 alone, 5.1 ms) would make the
	// other ten late; all eleven (6.1 ms) would miss request 0's deadline.
	p := Linear{Base: ms(5), PerRow: ms(0.1), Max: 64}
	q := items(11, 0, 6.2)
	q[0].Deadline = at(5.1)
	d := (&Deadline{}).Decide(at(0), q, 1, p)
	mustCheck(t, d, q, 1, p)
	if len(d.Run) != 10 || slices.Contains(d.Run, 0) || len(d.Refuse) != 0 {
		t.Errorf("Run = %v Refuse = %v, want the ten others run and 0 kept queued", d.Run, d.Refuse)
	}
}

func TestDeadlinePriorityLevelsFirst(t *testing.T) {
	p := Linear{Base: ms(1), PerRow: ms(1), Max: 8}
	q := []Item{
		{Arrived: at(0), Deadline: at(3), Priority: 1, Rows: 1},
		{Arrived: at(0), Deadline: at(50), Priority: 0, Rows: 1},
		{Arrived: at(0), Deadline: at(2.5), Priority: 1, Rows: 1},
	}
	d := (&Deadline{}).Decide(at(0), q, 1, p)
	mustCheck(t, d, q, 1, p)
	// Level 0's request first; one level-1 request fits beside it (3 ms).
	if !slices.Contains(d.Run, 1) || len(d.Run) != 2 || slices.Contains(d.Run, 2) {
		t.Errorf("Run = %v, want [1 0]: level 0 first, and the level-1 request with a 3 ms deadline beside it", d.Run)
	}
}

func TestDeadlineWithABacklogGivesUpARequestThatCostsTooMuchTime(t *testing.T) {
	// Request 0 is due in 1.2 ms: serving it takes a batch of its own
	// (1.1 ms) before the 40 others (5 ms) are due in 12 ms; dropping it
	// saves 1 ms, in which a full batch serves 0.5 * 64/7.4 ms > 1 request.
	p := Linear{Base: ms(1), PerRow: ms(0.1), Max: 64}
	q := items(41, 0, 12)
	q[0].Deadline = at(1.2)
	d := (&Deadline{}).Decide(at(0), q, 1, p)
	mustCheck(t, d, q, 1, p)
	if len(d.Run) != 40 || slices.Contains(d.Run, 0) {
		t.Errorf("Run %d requests (0 among them: %v), want the 40 others", len(d.Run), slices.Contains(d.Run, 0))
	}
	d = (&Deadline{Tradeoff: -1}).Decide(at(0), q, 1, p)
	if len(d.Run) != 2 || !slices.Contains(d.Run, 0) {
		t.Errorf("with no tradeoff Run = %v, want 0 and one other (1.2 ms), then the 39 others in time", d.Run)
	}
}

func TestDeadlineWaitSlackWaitsForALoneBatch(t *testing.T) {
	p := Linear{Base: ms(1), Max: 8}
	q := items(2, 0, 3)
	d := (&Deadline{WaitSlack: 0.5}).Decide(at(0), q, 1, p)
	mustCheck(t, d, q, 1, p)
	if len(d.Run) != 0 || !d.Wake.Equal(at(1)) {
		t.Errorf("Run = %v Wake = %v, want nothing until %v (half of the 2 ms slack)", d.Run, d.Wake, at(1))
	}
	if d := (&Deadline{}).Decide(at(0), q, 1, p); len(d.Run) != 2 {
		t.Errorf("by default Run = %v, want both at once", d.Run)
	}
}

func TestDeadlineServesARequestWithNoDeadlineLast(t *testing.T) {
	p := Linear{Base: ms(1), PerRow: ms(1), Max: 1}
	q := []Item{{Arrived: at(0), Rows: 1}, {Arrived: at(0), Deadline: at(5), Rows: 1}}
	d := (&Deadline{}).Decide(at(0), q, 1, p)
	mustCheck(t, d, q, 1, p)
	if len(d.Refuse) != 0 || !slices.Equal(d.Run, []int{1}) {
		t.Errorf("Refuse = %v Run = %v, want none refused and the request with a deadline first", d.Refuse, d.Run)
	}
}
