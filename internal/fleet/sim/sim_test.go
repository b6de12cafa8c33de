package sim

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/capacity/trace"
	"github.com/virga-ml/virga/internal/fleet"
	"github.com/virga-ml/virga/internal/serve/loadgen"
)

func TestMeasureCapacity(t *testing.T) {
	c, err := MeasureCapacity(2*time.Second, 2, 5*time.Second, 0.999, 2*time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("capacity %.3f/s", c)
	// One replica serves at most slots/service = 1 request/s; meeting the
	// objective for 99.9% of Poisson arrivals leaves it well below that.
	if c <= 0.3 || c >= 1 {
		t.Fatalf("capacity %.3f/s: want between 0.3 and 1", c)
	}
}

func poisson(rate float64, span time.Duration, seed uint64) []time.Duration {
	rng := rand.New(rand.NewPCG(seed, 7))
	return loadgen.Poisson(rng, rate, int(rate*span.Seconds()))
}

func TestFixedFleetCostIsReplicaSecondsTimesPrice(t *testing.T) {
	res, err := Run(Config{
		Arrivals: poisson(2, 3*time.Hour, 1),
		Duration: 3 * time.Hour, WarmUp: time.Hour,
		Pools:   []fleet.Pool{{Name: "od", Price: 3.6}},
		StartUp: 3 * time.Minute, Service: 2 * time.Second, Slots: 4, Objective: 5 * time.Second,
		Capacity: 1, Policy: fleet.Fixed{N: 4}, Seed: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Four replicas billed for the two measured hours, nothing during the
	// warm-up: 4 x 7200 s, at 3.6 $/h = 28.8 $.
	if got := res.ReplicaSeconds["od"]; math.Abs(got-4*7200) > 1e-6 {
		t.Fatalf("replica-seconds %v, want %v", got, 4*7200)
	}
	if math.Abs(res.Cost-28.8) > 1e-9 {
		t.Fatalf("cost %v, want 28.8", res.Cost)
	}
	// 2 requests/s on four replicas of 2 requests/s each: all on time.
	if res.Share() != 1 || res.Requests < 13000 || res.Requests > 15800 {
		t.Fatalf("%d requests, share %v: want about 14400 all on time", res.Requests, res.Share())
	}
}

// zoneTrace is a synthetic availability trace with a 10-minute tick: up
// except for the ticks in down.
func zoneTrace(ticks int, down ...[2]int) *trace.Availability {
	c := make([]int, ticks)
	for i := range c {
		c[i] = 1
	}
	for _, d := range down {
		for i := d[0]; i < d[1]; i++ {
			c[i] = 0
		}
	}
	return &trace.Availability{Tick: 10 * time.Minute, Count: c}
}

func spotConfig(p fleet.Policy, zones map[string]*trace.Availability) Config {
	pools := []fleet.Pool{{Name: "od", Price: 3.06}}
	for _, z := range []string{"a", "b"} {
		pools = append(pools, fleet.Pool{Name: "spot-" + z, Zone: z, Spot: true, Price: 0.918})
	}
	return Config{
		Arrivals: poisson(4, 6*time.Hour, 2),
		Duration: 6 * time.Hour, WarmUp: time.Hour,
		Pools: pools, Zones: zones, Warning: 2 * time.Minute,
		StartUp: 3 * time.Minute, Service: 2 * time.Second, Slots: 4, Objective: 5 * time.Second,
		Capacity: 1, Policy: p, Seed: 3,
	}
}

func TestSpotHedgeFallsBackToOnDemandAndReturns(t *testing.T) {
	// Both zones are down from 2 h to 3 h.
	zones := map[string]*trace.Availability{"a": zoneTrace(36, [2]int{12, 18}), "b": zoneTrace(36, [2]int{12, 18})}
	cfg := spotConfig(fleet.SpotHedge{Extra: 2}, zones)
	type obs struct{ spot, od int }
	at := map[time.Duration]obs{}
	cfg.Observe = func(s *fleet.Snapshot, _ fleet.Decision) {
		var o obs
		for _, r := range s.Replicas {
			if r.State != fleet.Ready {
				continue
			}
			if s.Pool(r.Pool).Spot {
				o.spot++
			} else {
				o.od++
			}
		}
		at[s.Now.Sub(cfg.Epoch)] = o
	}
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	before, during, after := at[110*time.Minute], at[170*time.Minute], at[230*time.Minute]
	if before.spot < 4 || before.od != 0 {
		t.Fatalf("before the outage: %+v, want spot only", before)
	}
	if during.spot != 0 || during.od < 4 {
		t.Fatalf("during the outage: %+v, want on-demand covering the target of 4", during)
	}
	if after.spot < 4 || after.od != 0 {
		t.Fatalf("an hour after spot returned: %+v, want spot only again", after)
	}
	if res.Preemptions == 0 || res.OnDemandShare == 0 || res.OnDemandShare > 0.8 {
		t.Fatalf("preemptions %d, on-demand share of cost %.2f: want some of both", res.Preemptions, res.OnDemandShare)
	}
}

func TestRunIsDeterministic(t *testing.T) {
	zones := map[string]*trace.Availability{"a": zoneTrace(36, [2]int{12, 14}), "b": zoneTrace(36, [2]int{20, 25})}
	a, err := Run(spotConfig(fleet.Virga{}, zones))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(spotConfig(fleet.Virga{}, zones))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("two runs differ:\n%+v\n%+v", a, b)
	}
}

func TestRunRejectsABadConfig(t *testing.T) {
	cfg := spotConfig(fleet.Virga{}, map[string]*trace.Availability{"a": zoneTrace(36)})
	_, err := Run(cfg)
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), `zone "b"`) {
		t.Fatalf("err = %v, want ErrConfig naming zone \"b\"", err)
	}
}
