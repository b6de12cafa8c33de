package slurm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The files in testdata/scontrol were recorded on the test cluster of
// scripts/slurm.sh (Slurm 22.05.8): `scontrol -o show partition`, `scontrol
// show partition`, `scontrol -o show node virga[1-2]`, `scontrol show node`
// and `scontrol show config`.

func readTestdata(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata/scontrol", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// recordedCluster is the test cluster as the recorded output describes it.
func recordedCluster(t testing.TB) *Cluster {
	t.Helper()
	cfg, err := ParseConfig(readTestdata(t, "config.txt"))
	if err != nil {
		t.Fatal(err)
	}
	parts, err := ParsePartitions(readTestdata(t, "partition-o.txt"))
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := ParseNodes(readTestdata(t, "node-o.txt"))
	if err != nil {
		t.Fatal(err)
	}
	return &Cluster{Preempt: cfg, Partitions: parts, Nodes: map[string][]Node{"spot": nodes, "ondemand": nodes}}
}

func TestParseRecordedScontrol(t *testing.T) {
	wantParts := []Partition{
		{Name: "spot", Nodes: "virga[1-2]", TotalNodes: 2, TotalCPUs: 4, PriorityTier: 1, PreemptMode: "REQUEUE", GraceTime: 15 * time.Second, State: "UP"},
		{Name: "ondemand", Nodes: "virga[1-2]", TotalNodes: 2, TotalCPUs: 4, PriorityTier: 10, PreemptMode: "OFF", State: "UP"},
	}
	wantNodes := []Node{
		{Name: "virga1", CPUs: 2, MemoryMB: 4000, Partitions: []string{"spot", "ondemand"}},
		{Name: "virga2", CPUs: 2, MemoryMB: 4000, Partitions: []string{"spot", "ondemand"}},
	}
	for _, file := range []string{"partition-o.txt", "partition.txt"} {
		got, err := ParsePartitions(readTestdata(t, file))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if diff := cmp.Diff(wantParts, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", file, diff)
		}
	}
	for _, file := range []string{"node-o.txt", "node.txt"} {
		got, err := ParseNodes(readTestdata(t, file))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for i := range got {
			if got[i].State == "" || strings.Contains(got[i].State, " ") {
				t.Errorf("%s: node %s state %q", file, got[i].Name, got[i].State)
			}
			got[i].State = "" // idle or busy, as other tests left the nodes
		}
		if diff := cmp.Diff(wantNodes, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", file, diff)
		}
	}
	cfg, err := ParseConfig(readTestdata(t, "config.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (PreemptConfig{PreemptType: "preempt/partition_prio", PreemptMode: "REQUEUE"}); cfg != want {
		t.Errorf("config %+v, want %+v", cfg, want)
	}
}

// TestParseScontrolForms: values with spaces, GPUs in Gres, time limits, an
// empty partition, and output that is not scontrol's.
func TestParseScontrolForms(t *testing.T) {
	nodes, err := ParseNodes("NodeName=g1 CPUTot=64 CPUEfctv=62 RealMemory=515000 Gres=gpu:a100:4(S:0-1),mps:400 OS=Linux 6.1.0 #1 SMP Partitions=gpu State=MIXED\n" +
		"NodeName=g2 CPUTot=32 RealMemory=1 Gres=gpu:2,gpu:v100:2 Partitions=gpu,debug State=DOWN+DRAIN Reason=Not responding [root@2026-01-01T00:00:00]\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []Node{
		{Name: "g1", CPUs: 62, MemoryMB: 515000, GPUs: 4, GPUType: "a100", Partitions: []string{"gpu"}, State: "MIXED"},
		{Name: "g2", CPUs: 32, MemoryMB: 1, GPUs: 4, Partitions: []string{"gpu", "debug"}, State: "DOWN+DRAIN"},
	}
	if diff := cmp.Diff(want, nodes); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
	parts, err := ParsePartitions("PartitionName=empty Nodes=(null) TotalNodes=0 TotalCPUs=0 PriorityTier=1 MaxTime=1-12:30:00 GraceTime=0 State=UP\n")
	if err != nil {
		t.Fatal(err)
	}
	if p := parts[0]; p.Nodes != "" || p.MaxTime != 36*time.Hour+30*time.Minute || p.PreemptMode != "" {
		t.Errorf("partition %+v", p)
	}
	if parts, err := ParsePartitions("No partitions in the system\n"); err != nil || len(parts) != 0 {
		t.Errorf("no partitions: %v, %v", parts, err)
	}
	for _, tt := range []struct {
		in   string
		want time.Duration
	}{
		{"UNLIMITED", 0}, {"30", 30 * time.Minute}, {"05:30", 5*time.Minute + 30*time.Second},
		{"02:00:00", 2 * time.Hour}, {"2-00", 48 * time.Hour}, {"1-01:02", 25*time.Hour + 2*time.Minute},
	} {
		if got, err := parseLimit(tt.in); err != nil || got != tt.want {
			t.Errorf("parseLimit(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{
		"Gres=x NodeName=n1",                     // a field before the record
		"NodeName=n1 CPUTot=two",                 // not a count
		"NodeName=n1 Gres=gpu:a100:many",         // not a count
		"NodeName=n1 RealMemory=-5",              // negative
		"junk before NodeName=n1",                // not scontrol's output
		"NodeName= CPUTot=2",                     // no name
		"NodeName=n1 Gres=gpu:a:b:c:4 CPUTot=1",  // too many parts
		"NodeName=n1 Gres=gpu:a100:99999999999G", // too many
	} {
		if nodes, err := ParseNodes(bad); err == nil {
			t.Errorf("ParseNodes(%q) = %+v; want an error", bad, nodes)
		}
	}
	for _, bad := range []string{"PartitionName=p GraceTime=soon", "PartitionName=p MaxTime=1:2:3:4", "PartitionName=p PriorityTier=-1"} {
		if parts, err := ParsePartitions(bad); err == nil {
			t.Errorf("ParsePartitions(%q) = %+v; want an error", bad, parts)
		}
	}
	if _, err := ParseConfig("Configuration data as of 2026-11-26T13:04:11\nClusterName = x\n"); err == nil {
		t.Error("ParseConfig without PreemptType: no error")
	}
}

// FuzzParseScontrol: the parsers of scontrol's output never panic, and what
// they return holds no negative counts.
func FuzzParseScontrol(f *testing.F) {
	for _, name := range []string{"partition-o.txt", "partition.txt", "node-o.txt", "node.txt", "config.txt"} {
		f.Add(readTestdata(f, name))
	}
	f.Add("NodeName=g1 CPUTot=64 CPUEfctv=62 RealMemory=515000 Gres=gpu:a100:4(S:0-1),mps:400 Partitions=gpu")
	f.Add("PartitionName=p Nodes=(null) MaxTime=1-12:30:00 GraceTime=0")
	f.Fuzz(func(t *testing.T, out string) {
		if parts, err := ParsePartitions(out); err == nil {
			for _, p := range parts {
				if p.Name == "" || p.TotalNodes < 0 || p.TotalCPUs < 0 || p.PriorityTier < 0 || p.GraceTime < 0 || p.MaxTime < 0 {
					t.Fatalf("partition %+v", p)
				}
			}
		}
		if nodes, err := ParseNodes(out); err == nil {
			for _, n := range nodes {
				if n.Name == "" || n.CPUs < 0 || n.MemoryMB < 0 || n.GPUs < 0 || n.GPUType != "" && n.GPUs == 0 {
					t.Fatalf("node %+v", n)
				}
			}
		}
		_, _ = ParseConfig(out)
	})
}
