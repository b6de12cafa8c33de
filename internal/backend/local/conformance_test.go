package local

import (
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/backend/backendtest"
)

// TestConformance runs the backend conformance suite against the local
// backend: two on-demand pools, and a spot pool for the reclaim.
func TestConformance(t *testing.T) {
	unit := virga.Resources{CPU: 1, MemoryMB: 64}
	pools := []Pool{
		{Name: "a", Capacity: virga.Resources{CPU: 3, MemoryMB: 512}},
		{Name: "b", Capacity: virga.Resources{CPU: 2, MemoryMB: 256}},
	}
	backendtest.Run(t, backendtest.Harness{
		New: func(t *testing.T) backend.Backend {
			return newBackend(t, Config{Pools: pools})
		},
		Unit: unit,
		Caps: backendtest.Caps{PID: true, Signals: true, Gang: true},
		Spot: func(t *testing.T, reclaimAt time.Time, warning time.Duration) backend.Backend {
			return newBackend(t, Config{Pools: []Pool{
				{Name: "a", Capacity: virga.Resources{CPU: 2, MemoryMB: 256}},
				{Name: "spot", Capacity: virga.Resources{CPU: 2, MemoryMB: 256}, Availability: upUntil(reclaimAt), Warning: warning},
			}})
		},
	})
}

// TestConformanceOnePool runs the suite against the local backend as it
// is by default: one unnamed pool of its capacity.
func TestConformanceOnePool(t *testing.T) {
	backendtest.Run(t, backendtest.Harness{
		New: func(t *testing.T) backend.Backend {
			return newBackend(t, Config{Capacity: virga.Resources{CPU: 3, MemoryMB: 512}})
		},
		Unit: virga.Resources{CPU: 1, MemoryMB: 64},
		Caps: backendtest.Caps{PID: true, Signals: true, Gang: true},
	})
}

// upUntil is capacity that is up until t and down for good from t.
type upUntil time.Time

func (u upUntil) Up(t time.Time) (bool, time.Time) {
	if t.Before(time.Time(u)) {
		return true, time.Time(u)
	}
	return false, time.Time{}
}
