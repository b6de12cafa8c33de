package spec

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestBadCapacityFiles parses every testdata/capacity/bad/NAME.yaml as
// "NAME.yaml" and compares the whole error text with NAME.want (-update
// rewrites them).
func TestBadCapacityFiles(t *testing.T) {
	goldenErrors(t, "testdata/capacity/bad", 12, func(name string, data []byte) (any, error) { return ParseCapacity(name, data) })
}

func TestGoodCapacityFiles(t *testing.T) {
	const (
		gib = 1024
		sec = Duration(time.Second)
	)
	od := func(name string, cpu float64) Pool {
		return Pool{Name: name, Backend: BackendLocal, Node: NodeShape{CPU: cpu}, Nodes: NodeCount{Min: 1, Max: 1},
			Market: OnDemand, Preemption: Preemption{Kind: PreemptNone}, Billing: BillingPerSecond}
	}
	spot := func(p Pool) Pool {
		p.Market = Spot
		p.Warning = DefaultSpotWarning
		return p
	}
	with := func(p Pool, f func(*Pool)) Pool { f(&p); return p }
	tests := []struct {
		file string
		want *Capacity // the parsed file, defaults applied (positions ignored)
	}{
		{
			file: "full.yaml",
			want: &Capacity{File: "full.yaml", Pools: []Pool{
				{
					Name: "p3-spot", Backend: BackendSim,
					Node:  NodeShape{CPU: 8, MemoryMB: 61 * gib, GPU: 1, GPUType: "V100"},
					Nodes: NodeCount{Min: 0, Max: 16}, Market: Spot,
					Price: Price{Trace: &PriceTrace{Path: "prices/aws.json", Format: PriceAWSJSON, InstanceType: "p3.2xlarge",
						Zone: "us-east-1a", Product: "Linux/UNIX"}},
					OnDemandPrice: 3.06,
					Preemption: Preemption{Kind: PreemptTrace, Trace: "traces/us-east-1a_v100_1.json", Speed: 60,
						Offset: Duration(2 * time.Hour)},
					Billing:         Billing{Increment: sec, Minimum: 60 * sec},
					Warning:         30 * sec,
					RestartOverhead: Duration(3 * time.Minute),
				},
				with(od("p3-od", 8), func(p *Pool) {
					p.Node = NodeShape{CPU: 8, MemoryMB: 61 * gib, GPU: 1, GPUType: "V100"}
					p.Nodes = NodeCount{Min: 4, Max: 4}
					p.Price = Price{USDPerHour: 3.06}
					p.Billing = BillingPerHour
				}),
				with(spot(od("a2-spot", 12)), func(p *Pool) {
					p.Backend = BackendKubernetes
					p.Node = NodeShape{CPU: 12, MemoryMB: 85 * gib, GPU: 1, GPUType: "A100"}
					p.Price = Price{Trace: &PriceTrace{Path: "gcp.csv", Format: PriceGCP, InstanceType: "a2-highgpu-1g", Zone: "us-central1"}}
					p.Preemption = Preemption{Kind: PreemptBid, Bid: 1.3}
					p.Kubernetes = &KubernetesPool{NodeSelector: map[string]string{"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"},
						Tolerations: []Toleration{{Key: "nvidia.com/gpu", Operator: "Exists", Effect: "NoSchedule"}}, Provider: "gke"}
				}),
				with(spot(od("cpu-spot", 0.5)), func(p *Pool) {
					p.Backend = BackendSlurm
					p.Nodes = NodeCount{} // read from the partition
					p.Billing = BillingSlurm
					p.Preemption = Preemption{Kind: PreemptRate, RatePerHour: 2.0 / 24, Outage: Duration(10 * time.Minute)}
					p.Warning = 0
					p.Slurm = &SlurmPool{Partition: "spot", QoS: "low", Account: "ml"}
				}),
				with(spot(od("never", 2)), func(p *Pool) {
					p.Price = Price{USDPerHour: 0.1}
					p.RestartOverhead = 90 * sec
				}),
				with(spot(od("replay", 2)), func(p *Pool) {
					p.Price = Price{Trace: &PriceTrace{Path: "history.tsv", Format: PriceAWSTSV, InstanceType: "p3.2xlarge",
						Zone: "use1-az6", Product: "Linux/UNIX (Amazon VPC)"}}
					p.Preemption = Preemption{Kind: PreemptTrace, Trace: "avail.json", Speed: 1, RandomOffset: true}
				}),
				with(spot(od("explicit-format", 2)), func(p *Pool) {
					p.Price = Price{Trace: &PriceTrace{Path: "prices.txt", Format: PriceAWSTSV, InstanceType: "p3.2xlarge",
						Zone: "use1-az6", Product: "Linux/UNIX"}}
					p.Preemption = Preemption{Kind: PreemptRate, RatePerHour: 2, Outage: Duration(time.Minute)}
				}),
			}},
		},
		{
			file: "minimal.yaml",
			want: &Capacity{File: "minimal.yaml", Pools: []Pool{od("local", 4)}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, data, err := LoadCapacity(filepath.Join("testdata/capacity/good", tt.file))
			if err != nil {
				t.Fatalf("LoadCapacity: %v", err)
			}
			if len(data) == 0 {
				t.Error("LoadCapacity returned no bytes")
			}
			got.File = filepath.Base(got.File)
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreTypes(Pos{}), cmpopts.IgnoreFields(Pool{}, "Given"), cmpopts.EquateApprox(1e-12, 0)); diff != "" {
				t.Errorf("parsed capacity mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCapacityPositions(t *testing.T) {
	c, err := ParseCapacity("c.yaml", []byte(`pools:
  - name: a
    node: {cpu: 1}
    market: spot
    price: {trace: p.csv, instance_type: x, zone: y}
    preemption: {trace: avail.json}
`))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Pool("a")
	if p == nil || c.Pool("b") != nil {
		t.Fatalf("Pool(a) = %v, Pool(b) = %v", p, c.Pool("b"))
	}
	if want := (Pos{Line: 2, Col: 5}); p.Pos != want {
		t.Errorf("pool Pos = %+v, want %+v", p.Pos, want)
	}
	if want := (Pos{Line: 5, Col: 20}); p.Price.Trace.Pos != want {
		t.Errorf("price trace Pos = %+v, want %+v", p.Price.Trace.Pos, want)
	}
	if want := (Pos{Line: 6, Col: 25}); p.Preemption.TracePos != want {
		t.Errorf("preemption trace Pos = %+v, want %+v", p.Preemption.TracePos, want)
	}
	if got := p.Path("price.trace"); got != "pools[a].price.trace" {
		t.Errorf("Path = %q", got)
	}
}

func TestCapacityRates(t *testing.T) {
	tests := []struct {
		rate string
		want float64 // per hour
	}{
		{"0.5", 0.5},
		{"2", 2},
		{"0.5/h", 0.5},
		{"3/hour", 3},
		{"1/m", 60},
		{"1/min", 60},
		{"36/s", 36 * 3600},
		{"12/d", 0.5},
		{"1/day", 1.0 / 24},
		{"1/30m", 2},
		{"2 / 4h", 0.5},
	}
	for _, tt := range tests {
		c, err := ParseCapacity("r.yaml", []byte("pools: [{name: a, node: {cpu: 1}, market: spot, price: 1, preemption: {rate: '"+
			tt.rate+"', outage: 1m}}]"))
		if err != nil {
			t.Errorf("rate %q: %v", tt.rate, err)
			continue
		}
		if got := c.Pools[0].Preemption.RatePerHour; got < tt.want*(1-1e-12) || got > tt.want*(1+1e-12) {
			t.Errorf("rate %q = %g per hour, want %g", tt.rate, got, tt.want)
		}
	}
}

func TestCapacityTooLarge(t *testing.T) {
	data := []byte("pools: [{name: a, node: {cpu: 1}, price: 0}]\n#" + strings.Repeat("x", MaxFileSize) + "\n")
	_, err := ParseCapacity("big.yaml", data)
	want := "big.yaml: file is over 1048576 bytes (1 MiB); a capacity file must be smaller"
	if err == nil || err.Error() != want {
		t.Errorf("error = %v, want %q", err, want)
	}
}

func TestLoadCapacityMissing(t *testing.T) {
	_, _, err := LoadCapacity(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("error = %v, want one wrapping os.ErrNotExist", err)
	}
}

// TestSlurmPoolFromPartition: a Slurm pool may name only its partition; the
// parser leaves what the partition tells for internal/backend/slurm, bills
// by the second without a minimum, and records what the file gives.
func TestSlurmPoolFromPartition(t *testing.T) {
	c, err := ParseCapacity("c.yaml", []byte(`pools:
  - name: spot
    backend: slurm
  - name: od
    backend: slurm
    slurm: {partition: ondemand}
    node: {memory: 2GiB}
    nodes: 2
    market: on-demand
`))
	if err != nil {
		t.Fatal(err)
	}
	spot, od := &c.Pools[0], &c.Pools[1]
	if spot.Node != (NodeShape{}) || spot.Nodes != (NodeCount{}) || spot.Market != OnDemand || spot.Warning != 0 ||
		spot.Price != (Price{}) || spot.Billing != BillingSlurm || spot.Slurm.Partition != "spot" || !spot.FromCluster() {
		t.Errorf("pool spot: %+v; want nothing but the partition, per-second billing without a minimum, FromCluster", spot)
	}
	if _, ok := spot.Gave("market"); ok {
		t.Error("pool spot: market given")
	}
	if pos, ok := od.Gave("node.memory"); !ok || pos != (Pos{Line: 7, Col: 20}) {
		t.Errorf("pool od: node.memory given at %+v, %v; want 7:20", pos, ok)
	}
	if _, ok := od.Gave("node.cpu"); ok || !od.FromCluster() || od.Node.MemoryMB != 2048 || od.Nodes != (NodeCount{Min: 2, Max: 2}) {
		t.Errorf("pool od: %+v; want memory and nodes as given, the CPUs from the cluster", od)
	}
}
