package capacity

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/capacity/trace"
)

// p3 is one p3.8xlarge-like node: 32 cores, 244 GiB, 4 GPUs.
var p3 = virga.Resources{CPU: 32, MemoryMB: 244 * 1024, GPU: 4}

func TestShare(t *testing.T) {
	tests := []struct {
		name string
		res  virga.Resources
		// want is the share of p3; wantErr says that res does not fit.
		want    float64
		wantErr bool
	}{
		{"nothing", virga.Resources{}, 0, false},
		{"cpu the largest", virga.Resources{CPU: 16, MemoryMB: 1024}, 0.5, false},
		{"memory the largest", virga.Resources{CPU: 1, MemoryMB: 183 * 1024}, 0.75, false},
		{"gpu the largest", virga.Resources{CPU: 1, MemoryMB: 1024, GPU: 1}, 0.25, false},
		{"the whole node", p3, 1, false},
		{"more cores than the node", virga.Resources{CPU: 33}, 0, true},
		{"more gpus than the node", virga.Resources{CPU: 1, GPU: 5}, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Share(tc.res, p3)
			if (err != nil) != tc.wantErr || math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("Share(%+v) = %v, %v; want %v (error: %v)", tc.res, got, err, tc.want, tc.wantErr)
			}
		})
	}
	// A dimension the node does not state is not counted.
	if got, err := Share(virga.Resources{CPU: 2, MemoryMB: 1 << 20}, virga.Resources{CPU: 8}); err != nil || got != 0.25 {
		t.Errorf("Share on a node without memory stated = %v, %v; want 0.25 (its cores)", got, err)
	}
}

func TestPricerCost(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	spot := &trace.Series{Key: trace.Key{InstanceType: "p3.8xlarge", Zone: "us-east-1a", Market: trace.Spot}, Steps: []trace.Price{
		{Time: t0, USDPerHour: 4},
		{Time: t0.Add(30 * time.Minute), USDPerHour: 8},
		{Time: t0.Add(90 * time.Minute), USDPerHour: 2},
	}}
	p := &Pricer{Pools: map[string]PricedPool{
		"ondemand": {Price: Constant(12), Node: p3, Billing: PerSecond},
		"spot":     {Price: spot, Node: p3, Billing: PerSecond},
		"hourly":   {Price: Constant(12), Node: p3, Billing: PerHour},
		"exact":    {Price: Constant(3.6), Node: p3},
	}}
	quarter := virga.Resources{CPU: 2, MemoryMB: 4096, GPU: 1} // the GPU decides: 1/4 of the node
	tests := []struct {
		name       string
		pool       string
		res        virga.Resources
		start, end time.Time
		// want is the cost in USD; wantErr the error it wraps, if any.
		want    float64
		wantErr error
	}{
		{"an hour on demand", "ondemand", quarter, t0, t0.Add(time.Hour), 3, nil},
		{"the whole node", "ondemand", p3, t0, t0.Add(time.Hour), 12, nil},
		// 10 s are billed as the one-minute minimum: 1/60 h * $12 * 1/4.
		{"billing minimum", "ondemand", quarter, t0, t0.Add(10 * time.Second), 0.05, nil},
		// 61.5 s are billed as 62 s.
		{"per-second increments", "ondemand", p3, t0, t0.Add(61500 * time.Millisecond), 62.0 / 3600 * 12, nil},
		// 61 minutes are billed as 2 hours.
		{"per-hour billing", "hourly", quarter, t0, t0.Add(61 * time.Minute), 6, nil},
		// Without a minimum or increments: exactly the run.
		{"exact billing", "exact", p3, t0, t0.Add(10 * time.Second), 0.01, nil},
		// 2 h from t0: 0.5 h at $4 + 1 h at $8 + 0.5 h at $2 = $11 a node; a quarter is $2.75.
		{"price changes mid-run", "spot", quarter, t0, t0.Add(2 * time.Hour), 2.75, nil},
		// Starting at t0+1h: 0.5 h at $8 + 0.5 h at $2 = $5 a node.
		{"started after a change", "spot", p3, t0.Add(time.Hour), t0.Add(2 * time.Hour), 5, nil},
		{"no run", "ondemand", quarter, t0, t0, 0, nil},
		{"end before start", "ondemand", quarter, t0, t0.Add(-time.Hour), 0, nil},
		{"takes nothing", "ondemand", virga.Resources{}, t0, t0.Add(time.Hour), 0, nil},
		{"unknown pool", "gone", quarter, t0, t0.Add(time.Hour), 0, ErrUnknownPool},
		{"default pool not priced", "", quarter, t0, t0.Add(time.Hour), 0, ErrUnknownPool},
		{"before the first price", "spot", quarter, t0.Add(-time.Minute), t0.Add(time.Hour), 0, ErrNoPrice},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := p.Cost(tc.pool, tc.res, tc.start, tc.end)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Cost = %v, %v; want an error wrapping %v", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("Cost = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	if _, err := p.Cost("ondemand", virga.Resources{CPU: 64}, t0, t0.Add(time.Hour)); err == nil {
		t.Error("a run larger than the node was priced")
	}
	// The default pool is priced once named "".
	p.Pools[""] = PricedPool{Price: Constant(1), Node: virga.Resources{CPU: 4, MemoryMB: 8192}, Billing: PerSecond}
	if got, err := p.Cost("", virga.Resources{CPU: 1, MemoryMB: 1024}, t0, t0.Add(time.Hour)); err != nil || math.Abs(got-0.25) > 1e-12 {
		t.Errorf("Cost on the default pool = %v, %v; want 0.25", got, err)
	}
}
