package control

import "testing"

// BenchmarkMetricsPerReport is what the metrics add to one report handled
// in a pass of its own: counting it, timing the pass, timing and sizing the
// commit (the worst case: under load one pass and one commit carry many).
func BenchmarkMetricsPerReport(b *testing.B) {
	m := newMetrics()
	b.ReportAllocs()
	for range b.N {
		done := m.timePass()
		m.reported(false)
		m.commit.Observe(0.001)
		m.commitChanges.Observe(3)
		done()
	}
}
