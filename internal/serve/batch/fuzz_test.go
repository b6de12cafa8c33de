package batch

import (
	"testing"
	"time"
)

// FuzzPoliciesDecideValidly checks that no policy returns an invalid
// decision, whatever the queue, the idle count and the profile, including
// after it has observed batches.
func FuzzPoliciesDecideValidly(f *testing.F) {
	f.Add([]byte{3, 1, 10, 200, 0, 1, 5, 30, 1, 2, 0, 0, 0, 1}, uint8(1), uint8(8), uint16(100), uint16(50), uint16(10))
	f.Add([]byte{0, 0, 0, 0, 9, 9, 9, 9, 255, 255, 255, 255}, uint8(0), uint8(1), uint16(0), uint16(0), uint16(0))
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, uint8(3), uint8(64), uint16(5), uint16(1), uint16(500))
	f.Fuzz(func(t *testing.T, data []byte, idle, maxRows uint8, baseUs, perRowUs, nowUs uint16) {
		p := Linear{Base: time.Duration(baseUs) * time.Microsecond, PerRow: time.Duration(perRowUs) * time.Microsecond, Max: int(maxRows)}
		var q []Item
		for i := 0; i+4 <= len(data) && len(q) < 300; i += 4 {
			arrived := t0.Add(time.Duration(data[i]) * 10 * time.Microsecond)
			it := Item{
				Arrived:  arrived,
				Deadline: arrived.Add(time.Duration(data[i+1]) * 20 * time.Microsecond),
				Priority: int(data[i+2] % 3),
				Rows:     int(data[i+3]%9) - 1, // -1 and 0 mean one row
			}
			if data[i+1] == 255 {
				it.Deadline = time.Time{} // none
			}
			q = append(q, it)
		}
		now := t0.Add(time.Duration(nowUs) * time.Microsecond)
		policies := map[string]Policy{
			"none":        None{},
			"fixed":       &Fixed{},
			"fixed-pq":    &Fixed{Preferred: []int{2, 3}, MaxQueueDelay: 100 * time.Microsecond, MaxQueueSize: 4, Timeout: time.Millisecond, TimeoutAction: Delay},
			"fixed-to":    &Fixed{MaxBatch: 5, AllowTimeoutOverride: true},
			"aimd":        &AIMD{Objective: time.Millisecond},
			"deadline":    &Deadline{},
			"deadline-h2": &Deadline{Horizon: 2},
		}
		for name, pol := range policies {
			for round := range 3 {
				d := pol.Decide(now, q, int(idle), p)
				if err := Check(d, q, int(idle), p); err != nil {
					t.Fatalf("%s round %d: %v (decision %+v)", name, round, err, d)
				}
				if !d.Wake.IsZero() && !d.Wake.After(now) && len(d.Run) == 0 && len(d.Refuse) == 0 {
					t.Fatalf("%s: nothing to do now but wake at %v, not after now %v", name, d.Wake, now)
				}
				pol.Observe(max(1, len(d.Run)), time.Duration(round)*time.Millisecond, round)
			}
		}
	})
}
