package spec

import (
	"testing"
)

// FuzzParseCapacity checks that ParseCapacity never panics, that failures are
// always an *Error with well-formed problems, and that a parsed file keeps
// the invariants the runtime pools rely on. The seed corpus is every file
// under testdata/capacity and examples/capacity.
func FuzzParseCapacity(f *testing.F) {
	seedFiles(f, "testdata/capacity/good/*.yaml", "testdata/capacity/bad/*.yaml", "../../examples/capacity/*.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseCapacity("fuzz.yaml", data)
		if err != nil {
			checkProblems(t, err, data)
			return
		}
		if len(c.Pools) == 0 || c.File != "fuzz.yaml" {
			t.Fatalf("parsed capacity has no pools or no file: %+v", c)
		}
		names := map[string]bool{}
		for _, p := range c.Pools {
			if !namePattern.MatchString(p.Name) || names[p.Name] {
				t.Fatalf("pool name %q invalid or repeated", p.Name)
			}
			names[p.Name] = true
			// A Slurm pool leaves to its partition (internal/backend/slurm)
			// what the file does not give.
			_, cpuGiven := p.Given["node.cpu"]
			_, nodesGiven := p.Given["nodes"]
			fromCluster := p.Backend == BackendSlurm
			if p.FromCluster() != (fromCluster && (!cpuGiven || !nodesGiven || p.Given["market"] == (Pos{}) || p.Market == Spot && p.Given["warning"] == (Pos{}))) {
				t.Fatalf("pool %s: FromCluster %v with fields %v", p.Name, p.FromCluster(), p.Given)
			}
			if !(p.Node.CPU > 0 || fromCluster && !cpuGiven) || p.Node.GPU < 0 || p.Node.MemoryMB < 0 || p.Node.GPUType != "" && p.Node.GPU == 0 {
				t.Fatalf("pool %s: bad node %+v", p.Name, p.Node)
			}
			if p.Nodes.Min < 0 || p.Nodes.Max < 1 && !(fromCluster && !nodesGiven) || p.Nodes.Min > p.Nodes.Max {
				t.Fatalf("pool %s: bad nodes %+v", p.Name, p.Nodes)
			}
			if p.Market != Spot && p.Market != OnDemand {
				t.Fatalf("pool %s: market %q", p.Name, p.Market)
			}
			if p.Price.Trace == nil && !(p.Price.USDPerHour >= 0) {
				t.Fatalf("pool %s: price %+v", p.Name, p.Price)
			}
			if tr := p.Price.Trace; tr != nil && (tr.Path == "" || tr.InstanceType == "" || tr.Zone == "" || tr.Format == "") {
				t.Fatalf("pool %s: price trace %+v", p.Name, tr)
			}
			if p.Billing.Increment <= 0 || p.Billing.Minimum < 0 || p.Warning < 0 || p.RestartOverhead < 0 {
				t.Fatalf("pool %s: billing %+v, warning %v, restart %v", p.Name, p.Billing, p.Warning, p.RestartOverhead)
			}
			pr := p.Preemption
			if p.Market == OnDemand && (pr.Kind != PreemptNone || p.Warning != 0 || p.OnDemandPrice != 0) {
				t.Fatalf("on-demand pool %s has spot fields: %+v", p.Name, p)
			}
			switch pr.Kind {
			case PreemptNone:
			case PreemptTrace:
				if pr.Trace == "" || !(pr.Speed > 0) || pr.Offset < 0 {
					t.Fatalf("pool %s: trace preemption %+v", p.Name, pr)
				}
			case PreemptRate:
				if !(pr.RatePerHour > 0) || pr.Outage <= 0 {
					t.Fatalf("pool %s: rate preemption %+v", p.Name, pr)
				}
			case PreemptBid:
				if !(pr.Bid > 0) || p.Price.Trace == nil {
					t.Fatalf("pool %s: bid preemption %+v with price %+v", p.Name, pr, p.Price)
				}
			default:
				t.Fatalf("pool %s: preemption kind %q", p.Name, pr.Kind)
			}
		}
	})
}
