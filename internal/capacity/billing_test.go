package capacity

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/capacity/trace"
)

func TestBilled(t *testing.T) {
	for _, tt := range []struct {
		b    Billing
		run  time.Duration
		want time.Duration
	}{
		{PerSecond, 0, 0},
		{PerSecond, 10 * time.Second, time.Minute},
		{PerSecond, 61*time.Second + time.Millisecond, 62 * time.Second},
		{PerHour, time.Minute, time.Hour},
		{PerHour, 61 * time.Minute, 2 * time.Hour},
		{Billing{}, 1500 * time.Millisecond, 1500 * time.Millisecond},
	} {
		if got := tt.b.Billed(tt.run); got != tt.want {
			t.Errorf("%+v.Billed(%v) = %v, want %v", tt.b, tt.run, got, tt.want)
		}
	}
}

func TestCostAcrossPriceSteps(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &trace.Series{Key: trace.Key{InstanceType: "p3.2xlarge", Zone: "us-east-1a", Market: trace.Spot}, Steps: []trace.Price{
		{Time: t0, USDPerHour: 1.0},
		{Time: t0.Add(30 * time.Minute), USDPerHour: 2.0},
		{Time: t0.Add(90 * time.Minute), USDPerHour: 0.5},
	}}
	// 2 hours from t0: 0.5 h at $1 + 1 h at $2 + 0.5 h at $0.5 = $2.75; half a node: $1.375.
	got, err := Cost(s, t0, 2*time.Hour, 0.5, PerSecond)
	if err != nil || math.Abs(got-1.375) > 1e-12 {
		t.Fatalf("Cost = %v, %v; want 1.375", got, err)
	}
	// Per-hour billing of 61 minutes from t0+20m bills 2 h: 10 m at $1, 1 h at $2, 50 m at $0.5.
	got, err = Cost(s, t0.Add(20*time.Minute), 61*time.Minute, 1, PerHour)
	if want := 10.0/60 + 2 + 0.5*50/60; err != nil || math.Abs(got-want) > 1e-12 {
		t.Fatalf("Cost = %v, %v; want %v", got, err, want)
	}
	// Before the first price: an error that says so.
	if _, err := Cost(s, t0.Add(-time.Minute), time.Hour, 1, PerSecond); !errors.Is(err, ErrNoPrice) {
		t.Fatalf("cost before the first price: %v, want ErrNoPrice", err)
	}
	if _, err := Cost(s, t0, time.Hour, 0, PerSecond); err == nil {
		t.Fatal("a zero share of a node was accepted")
	}
}
