package capacity

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/capacity/trace"
	"github.com/virga-ml/virga/internal/spec"
)

// exampleTraces is the directory of the example capacity files' traces.
var exampleTraces, _ = filepath.Abs("../../examples/capacity/traces")

// loadString writes a capacity file into a temporary directory (with the
// example traces beside it, under traces/) and loads it.
func loadString(t *testing.T, yaml string) (*Set, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink(exampleTraces, filepath.Join(dir, "traces")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "cap.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := spec.ParseCapacity("cap.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("ParseCapacity: %v", err)
	}
	return Load(c, dir)
}

func TestLoadPools(t *testing.T) {
	s, err := loadString(t, `pools:
  - name: spot
    backend: sim
    node: {cpu: 8, memory: 61GiB, gpu: 1, gpu_type: V100}
    nodes: {min: 0, max: 16}
    market: spot
    price: 0.918
    on_demand_price: 3.06
    preemption: {trace: traces/us-east-1f_v100_1.json, speed: 60, offset: 195}
    warning: 30s
    restart_overhead: 3m
  - name: od
    node: {cpu: 2}
    nodes: 3
    price: 3.06
    billing: per-hour
  - name: a2
    node: {cpu: 12, gpu: 1}
    market: spot
    price: {trace: traces/gcp_spot_price_changes_a2-highgpu-1g_us-central1.csv, instance_type: a2-highgpu-1g, zone: us-central1}
    preemption: {bid: 1.3}
  - name: a2-od
    node: {cpu: 12, gpu: 1}
    price: {trace: traces/gcp_spot_price_changes_a2-highgpu-1g_us-central1.csv, instance_type: a2-highgpu-1g, zone: us-central1}
`)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Pools) != 4 || s.Pool("od") != s.Pools[1] || s.Pool("nope") != nil {
		t.Fatalf("pools %v", s.Pools)
	}

	spot := s.Pool("spot")
	want := &Pool{
		Name: "spot", Backend: spec.BackendSim,
		Node:     virga.Resources{CPU: 8, MemoryMB: 61 * 1024, GPU: 1},
		GPUType:  "V100",
		MinNodes: 0, MaxNodes: 16,
		Market:          spec.Spot,
		Billing:         PerSecond,
		Warning:         30 * time.Second,
		RestartOverhead: 3 * time.Minute,
	}
	if diff := cmp.Diff(want, spot, cmpopts.IgnoreFields(Pool{}, "PriceSeries", "OnDemandSeries", "Preemption")); diff != "" {
		t.Errorf("pool (-want +got):\n%s", diff)
	}
	if !spot.Spot() || s.Pool("od").Spot() {
		t.Error("Spot() is wrong")
	}
	if p, od := spot.Price(t0), spot.OnDemandPrice(t0); p != 0.918 || od != 3.06 {
		t.Errorf("prices %g, %g", p, od)
	}
	// The offset of one tick (195 s of trace) is 3.25 s of wall time at 60x.
	m := spot.Preemption
	if m.Kind() != spec.PreemptTrace || m.offset != 3250*time.Millisecond || m.period != 20158*3250*time.Millisecond {
		t.Errorf("replay %s: offset %v, period %v", m, m.offset, m.period)
	}
	st := spot.Stats()
	if math.Abs(st.Available-0.591) > 0.001 {
		t.Errorf("available %.4f, want 0.591 (us-east-1f)", st.Available)
	}
	// 45.5 days * 0.591 / 285 reclaims = 2.27 h of trace; 2.27 min at 60x.
	if st.MeanUp < 2*time.Minute || st.MeanUp > 150*time.Second {
		t.Errorf("mean up %v, want about 2.3 minutes", st.MeanUp)
	}
	if math.Abs(st.PreemptionsPerHour-60/2.27) > 1 {
		t.Errorf("preemptions per hour %.2f, want about %.1f", st.PreemptionsPerHour, 60/2.27)
	}
	tl := spot.Timeline(t0, nil)
	if up, next := tl.Up(t0); up || next.IsZero() {
		t.Errorf("us-east-1f at tick 1: up %v next %v; want down (its first 252 ticks are)", up, next)
	}

	od := s.Pool("od")
	if od.Billing != PerHour || od.MinNodes != 3 || od.MaxNodes != 3 || od.Preemption.Kind() != spec.PreemptNone || od.Warning != 0 {
		t.Errorf("on-demand pool %+v", od)
	}
	if od.OnDemandPrice(t0) != 3.06 || od.Price(t0) != 3.06 {
		t.Errorf("on-demand prices %g %g", od.Price(t0), od.OnDemandPrice(t0))
	}
	if up, next := od.Timeline(t0, nil).Up(t0); !up || !next.IsZero() {
		t.Errorf("on-demand pool: up %v next %v", up, next)
	}

	// GCP spot prices step weekly; before the first row the first price
	// holds, after the last the last.
	a2 := s.Pool("a2")
	date := func(s string) time.Time {
		d, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, c := range []struct {
		at         string
		spot, onDm float64
	}{
		{"2020-01-01T00:00:00Z", 1.1020155, 3.673385},
		{"2023-05-08T06:42:48Z", 1.1020155, 3.673385},
		{"2023-07-01T00:00:00Z", 1.21219, 3.673385},
		{"2025-02-01T00:00:00Z", 1.293355, 3.673385},
		{"2030-01-01T00:00:00Z", 1.92802, 3.673385},
	} {
		if p, od := a2.Price(date(c.at)), a2.OnDemandPrice(date(c.at)); p != c.spot || od != c.onDm {
			t.Errorf("a2 at %s: %g, %g; want %g, %g", c.at, p, od, c.spot, c.onDm)
		}
	}
	if got := s.Pool("a2-od").Price(date("2024-01-01T00:00:00Z")); got != 3.673385 {
		t.Errorf("a2 on-demand price %g", got)
	}
	// The bid of 1.3 is above the spot price until 2023-08-10, then below
	// it until 2025-01-30, then above it again until 2025-03-13.
	btl := a2.Timeline(t0, nil)
	for _, c := range []struct {
		at   string
		up   bool
		next string
	}{
		{"2023-06-01T00:00:00Z", true, "2023-08-10T13:53:52Z"},
		{"2024-06-01T00:00:00Z", false, "2025-01-30T03:54:17Z"},
		{"2025-02-01T00:00:00Z", true, "2025-03-13T03:56:15Z"},
	} {
		up, next := btl.Up(date(c.at))
		if up != c.up || !next.Equal(date(c.next)) {
			t.Errorf("bid at %s: %v, %v; want %v, %s", c.at, up, next, c.up, c.next)
		}
	}
	if st := a2.Stats(); st.Available <= 0 || st.Available >= 1 || st.PreemptionsPerHour <= 0 {
		t.Errorf("bid stats %+v", st)
	}

	// A run's cost at the pool's price and billing, and through the set's pricer.
	c, err := od.Cost(t0, 90*time.Minute, 0.5)
	if err != nil || math.Abs(c-3.06) > 1e-9 { // two hours billed, half a node
		t.Errorf("Cost = %g, %v; want 3.06", c, err)
	}
	c, err = a2.Cost(date("2023-06-22T02:58:20Z"), 2*time.Hour, 1) // one hour at each of two prices
	if err != nil || math.Abs(c-(1.1020155+1.21219)) > 1e-9 {
		t.Errorf("Cost across a price step = %g, %v", c, err)
	}
	pc, err := s.Pricer().Cost("od", virga.Resources{CPU: 1}, t0, t0.Add(90*time.Minute))
	if err != nil || math.Abs(pc-3.06) > 1e-9 {
		t.Errorf("Pricer().Cost = %g, %v; want 3.06", pc, err)
	}
}

func TestHandBuiltPool(t *testing.T) {
	// A pool built in code (a simulator's): nil Preemption is never
	// reclaimed, a nil price series costs nothing.
	p := &Pool{Name: "x"}
	if up, next := p.Timeline(t0, nil).Up(t0); !up || !next.IsZero() {
		t.Errorf("up %v next %v", up, next)
	}
	if p.Price(t0) != 0 || p.OnDemandPrice(t0) != 0 || p.Stats() != (Stats{Available: 1}) {
		t.Errorf("price %g, stats %+v", p.Price(t0), p.Stats())
	}
	if _, err := p.Cost(t0, time.Hour, 1); !errors.Is(err, ErrNoPrice) {
		t.Errorf("Cost without a price: %v", err)
	}
}

func TestPriceAtAllocatesNothing(t *testing.T) {
	s := &trace.Series{}
	for i := range 1000 {
		s.Steps = append(s.Steps, trace.Price{Time: t0.Add(time.Duration(i) * time.Hour), USDPerHour: float64(i)})
	}
	p := &Pool{PriceSeries: fromZero(s)}
	rng := rand.New(rand.NewPCG(1, 1))
	for range 1000 {
		i := rng.IntN(1000)
		at := t0.Add(time.Duration(i)*time.Hour + time.Duration(rng.Int64N(int64(time.Hour))))
		if got := p.Price(at); got != float64(i) {
			t.Fatalf("Price at hour %d = %g", i, got)
		}
	}
	if got := p.Price(t0.Add(-time.Hour)); got != 0 {
		t.Errorf("price before the series = %g, want its first", got)
	}
	allocs := testing.AllocsPerRun(1000, func() { p.Price(t0.Add(time.Duration(rng.Int64N(int64(1000 * time.Hour))))) })
	if allocs != 0 {
		t.Errorf("Price allocates %v times per call", allocs)
	}
}

// TestLoadErrors checks that a trace that cannot be used is reported at the
// capacity file's line, naming the trace file, for every pool at once.
func TestLoadErrors(t *testing.T) {
	const gcp = "traces/gcp_spot_price_changes_a2-highgpu-1g_us-central1.csv"
	_, err := loadString(t, `pools:
  - name: missing
    node: {cpu: 1}
    market: spot
    price: 1
    preemption: {trace: traces/nope.json}
  - name: missing-again
    node: {cpu: 1}
    market: spot
    price: 1
    preemption: {trace: traces/nope.json}
  - name: not-json
    node: {cpu: 1}
    market: spot
    price: 1
    preemption: {trace: `+gcp+`}
  - name: zone
    node: {cpu: 1}
    market: spot
    price: {trace: `+gcp+`, instance_type: a2-highgpu-1g, zone: us-east1}
    preemption: none
  - name: type
    node: {cpu: 1}
    market: spot
    price: {trace: `+gcp+`, instance_type: a2-highgpu-2g, zone: us-central1}
    preemption: none
  - name: not-aws
    node: {cpu: 1}
    market: spot
    price: {trace: `+gcp+`, format: aws-json, instance_type: p3.2xlarge, zone: us-east-1a}
    preemption: {bid: 1}
`)
	var perr *spec.Error
	if !errors.As(err, &perr) {
		t.Fatalf("error %T %v, want *spec.Error", err, err)
	}
	got := err.Error()
	dir := "" // the temporary directory, in messages
	for _, p := range perr.Problems {
		if i := strings.Index(p.Msg, "/traces/"); i >= 0 && dir == "" {
			dir = p.Msg[strings.LastIndex(p.Msg[:i], " ")+1 : i]
		}
	}
	got = strings.ReplaceAll(got, dir, "DIR")
	want := `cap.yaml:6:25: pools[missing].preemption.trace: cannot read the availability trace: open DIR/traces/nope.json: no such file or directory
cap.yaml:11:25: pools[missing-again].preemption.trace: cannot read the availability trace traces/nope.json (see above)
cap.yaml:16:25: pools[not-json].preemption.trace: cannot read the availability trace: DIR/traces/gcp_spot_price_changes_a2-highgpu-1g_us-central1.csv:1:1: invalid character 'c' looking for beginning of value
cap.yaml:20:20: pools[zone].price.trace: DIR/traces/gcp_spot_price_changes_a2-highgpu-1g_us-central1.csv has no spot prices for a2-highgpu-1g in us-east1 (it has a2-highgpu-1g in us-central1)
cap.yaml:25:20: pools[type].price.trace: DIR/traces/gcp_spot_price_changes_a2-highgpu-1g_us-central1.csv has no spot prices for a2-highgpu-2g in us-central1 (it has no a2-highgpu-2g at all; it has a2-highgpu-1g)
cap.yaml:30:20: pools[not-aws].price.trace: cannot read the price trace: DIR/traces/gcp_spot_price_changes_a2-highgpu-1g_us-central1.csv:1:1: invalid character 'c' looking for beginning of value`
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("error (-want +got):\n%s", diff)
	}
}
