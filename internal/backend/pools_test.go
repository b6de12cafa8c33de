package backend

import (
	"strings"
	"testing"
	"time"

	"github.com/virga-ml/virga"
)

func TestPools(t *testing.T) {
	ps := NewPools(true, []Pool{
		{Name: "od", Capacity: virga.Resources{CPU: 4, MemoryMB: 1000}},
		{Name: "spot", Capacity: virga.Resources{CPU: 2, MemoryMB: 500, GPU: 1}, Preemptible: true, Warning: 30 * time.Second},
	})
	od, err := ps.Get("")
	if err != nil || od.Name != "od" {
		t.Fatalf(`Get(""): %v %v, want the first pool`, od, err)
	}
	spot, err := ps.Get("spot")
	if err != nil || spot.Name != "spot" {
		t.Fatalf(`Get("spot"): %v %v`, spot, err)
	}
	if _, err := ps.Get("nope"); err == nil || !strings.Contains(err.Error(), "od, spot") {
		t.Errorf(`Get("nope"): %v, want an error naming the pools`, err)
	}
	if got, want := ps.Capacity(), (virga.Resources{CPU: 6, MemoryMB: 1500, GPU: 1}); got != want {
		t.Errorf("Capacity %+v, want %+v", got, want)
	}

	r := virga.Resources{CPU: 3, MemoryMB: 100}
	if !od.Fits(r) || spot.Fits(r) {
		t.Errorf("Fits %+v: od %v spot %v, want true false", r, od.Fits(r), spot.Fits(r))
	}
	od.Reserve(r)
	od.Reserve(r) // beyond capacity: an adopted attempt
	if got, want := ps.Free(), (virga.Resources{CPU: 0, MemoryMB: 1300, GPU: 1}); got != want {
		t.Errorf("Free with od overcommitted: %+v, want %+v", got, want)
	}
	spot.SetUp(false, time.Unix(100, 0))
	if got, want := ps.Free(), (virga.Resources{CPU: -2, MemoryMB: 800}); got != want {
		t.Errorf("Free with spot down: %+v, want %+v (od's only)", got, want)
	}
	st := ps.Status()
	if len(st) != 2 || st[0].Free != (virga.Resources{CPU: -2, MemoryMB: 800}) || !st[0].Up ||
		st[1].Up || !st[1].Next.Equal(time.Unix(100, 0)) || !st[1].Preemptible || st[1].Warning != 30*time.Second {
		t.Errorf("Status: %+v", st)
	}
	od.Release(r)
	od.Release(r)
	spot.SetUp(true, time.Time{})
	if got := ps.Free(); got != ps.Capacity() {
		t.Errorf("Free once released: %+v, want the capacity %+v", got, ps.Capacity())
	}

	one := NewPools(false, []Pool{{Capacity: virga.Resources{CPU: 1}}})
	if one.Status() != nil {
		t.Errorf("Status of an unnamed pool: %+v, want nil", one.Status())
	}
	if _, err := one.Get("x"); err == nil {
		t.Errorf(`Get("x") of a backend without pools succeeded`)
	}
}
