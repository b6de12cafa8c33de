package schedule

import (
	"github.com/virga-ml/virga/internal/capacity"
)

// StatsOfPool returns what a policy knows of a pool's reliability from its
// preemption model's statistics. A pool never reclaimed (capacity.Stats'
// MeanUp 0 with capacity always up) keeps MeanUp 0 with Available 1, which
// the policies read as never reclaimed.
func StatsOfPool(st capacity.Stats) PoolStats {
	return PoolStats{Available: st.Available, MeanUp: st.MeanUp, MeanDown: st.MeanOutage}
}
