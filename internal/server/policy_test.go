package server

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/capacity"
)

// TestPoolInfo: the experiment policy gets each pool of the capacity file
// as virga sim gives it: market, price, node, restart overhead, billing
// minimum and reliability (a pool never reclaimed has a long mean up time).
func TestPoolInfo(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "capacity.yaml")
	err := os.WriteFile(file, []byte(`pools:
  - name: spot
    backend: local
    node: {cpu: 4, memory: 1GiB}
    nodes: {min: 0, max: 2}
    market: spot
    price: 1.5
    preemption: {rate: 0.5/h, outage: 10m}
    billing: per-second
    restart_overhead: 2m
  - name: ondemand
    backend: local
    node: {cpu: 4, memory: 1GiB}
    nodes: {min: 0, max: 1}
    market: on-demand
    price: 4
    billing: per-hour
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	set, err := capacity.LoadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	info := PoolInfo(set)
	now := time.Now()
	spot, od := info["spot"], info["ondemand"]
	if !spot.Spot || spot.Price(now) != 1.5 || spot.RestartOverhead != 2*time.Minute || spot.MinBilled != 2*time.Minute || spot.Node.CPU != 4 {
		t.Errorf("spot pool: %+v (price %v)", spot, spot.Price(now))
	}
	if spot.Stats.MeanUp != 2*time.Hour || spot.Stats.MeanDown != 10*time.Minute || spot.Stats.Available >= 1 {
		t.Errorf("spot pool's stats %+v, want up 2h on average, down 10m", spot.Stats)
	}
	if od.Spot || od.Price(now) != 4 || od.MinBilled != time.Hour || od.Stats.MeanUp != 0 || od.Stats.Available != 1 {
		t.Errorf("on-demand pool: %+v (price %v)", od, od.Price(now))
	}
}
