package batch

import (
	"fmt"
	"sort"
	"time"
)

// Linear is a latency profile of the form Base + PerRow*rows, for batches of
// 1 to Max rows: a CPU MLP is about flat (Base only), a random forest costs
// about the same per row (PerRow only), and a GPU model has a fixed cost and
// a small cost per row.
type Linear struct {
	Base   time.Duration
	PerRow time.Duration
	Max    int
}

var _ Profile = Linear{}

// Latency returns Base + PerRow*rows.
func (l Linear) Latency(rows int) time.Duration { return l.Base + time.Duration(rows)*l.PerRow }

// MaxRows returns Max (at least 1).
func (l Linear) MaxRows() int { return max(1, l.Max) }

func (l Linear) String() string {
	return fmt.Sprintf("%v+%v/row max %d", l.Base, l.PerRow, l.MaxRows())
}

// rowsOf is an item's rows along the batch dimension (at least 1).
func rowsOf(it Item) int { return max(1, it.Rows) }

// order returns the queue positions in the order a FIFO-within-priority
// policy serves them: lower priority level first, arrival order within one.
func order(queue []Item) []int {
	idx := make([]int, len(queue))
	mixed := false
	for i := range idx {
		idx[i] = i
		mixed = mixed || queue[i].Priority != queue[0].Priority
	}
	if !mixed {
		return idx
	}
	sort.SliceStable(idx, func(a, b int) bool { return queue[idx[a]].Priority < queue[idx[b]].Priority })
	return idx
}

// Check reports whether d is a decision a policy may return for queue with
// idle free instances under profile p: positions in range and distinct
// across Refuse and Run, no Run when idle is 0, and a Run of at most
// p.MaxRows() rows.
func Check(d Decision, queue []Item, idle int, p Profile) error {
	seen := make(map[int]bool, len(d.Refuse)+len(d.Run))
	for _, part := range []struct {
		name string
		pos  []int
	}{{"Refuse", d.Refuse}, {"Run", d.Run}} {
		for _, i := range part.pos {
			if i < 0 || i >= len(queue) {
				return fmt.Errorf("%s position %d out of range [0,%d)", part.name, i, len(queue))
			}
			if seen[i] {
				return fmt.Errorf("%s position %d appears twice", part.name, i)
			}
			seen[i] = true
		}
	}
	if len(d.Run) > 0 && idle <= 0 {
		return fmt.Errorf("Run of %d requests with no idle instance", len(d.Run))
	}
	rows := 0
	for _, i := range d.Run {
		rows += rowsOf(queue[i])
	}
	if rows > p.MaxRows() {
		return fmt.Errorf("Run of %d rows over the profile's MaxRows %d", rows, p.MaxRows())
	}
	return nil
}
