package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
)

// TestKWOKGangReclaim runs a 4-node trial on the spot pool, its ranks as
// local processes: its 4 pods and its Service exist and all 4 pods run
// before the attempt is reported Started; the reclaim of one rank's node
// ends the whole gang, reported as a preemption once that rank's process
// ended, the other ranks' processes ending within the grace; the trial's
// next attempt runs 4 ranks again and completes.
func TestKWOKGangReclaim(t *testing.T) {
	admin, ns := kwokNamespace(t)
	roleClient := asServiceAccount(t, admin, ns)
	k := newKWOKKubelet(t, admin, ns)
	pools := karpenterPools(t, virga.Resources{CPU: 32, MemoryMB: 128 << 10}, 0, 100)
	b, err := New(roleClient, Config{Namespace: ns, Image: "virga:kwok", Instance: "gang", Pools: pools,
		FinishedTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	evs := collect(b)
	ctx := context.Background()
	wd := t.TempDir()
	const nodes = 4
	start := func(id int64) {
		t.Helper()
		sp := &backend.StartSpec{AttemptID: id, TrialID: 1, ExperimentID: 1,
			// Each rank waits for the file go (5 minutes at most).
			Argv:    []string{"sh", "-c", "i=0; until [ -e go ] || [ $((i += 1)) -gt 3000 ]; do sleep 0.1; done"},
			Workdir: wd, Dir: filepath.Join(wd, fmt.Sprint("attempt-", id)),
			Resources: virga.Resources{CPU: nodes, MemoryMB: 64 * nodes}, Nodes: nodes, ProcessesPerNode: 1, Pool: "spot",
			StopGrace: 2 * time.Second, Token: "gang",
			ReportURL: fmt.Sprintf("http://127.0.0.1:9/api/v1/attempts/%d/report", id)}
		if err := os.MkdirAll(sp.Dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := b.Start(ctx, sp); err != nil {
			t.Fatal(err)
		}
		evs.wait(t, id, backend.Started)
		// Started means all ranks run.
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: fmt.Sprintf("%s=%d", LabelAttempt, id)})
		if err != nil {
			t.Fatal(err)
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				running++
			}
		}
		if running != nodes {
			t.Errorf("attempt %d Started with %d of its %d pods running", id, running, nodes)
		}
		if _, err := admin.CoreV1().Services(ns).Get(ctx, fmt.Sprintf("gang-%d", id), metav1.GetOptions{}); err != nil {
			t.Errorf("attempt %d: the gang's Service: %v", id, err)
		}
	}
	ranks := func(attempt string) (n, ended int, last, first time.Time) {
		for _, r := range k.ran() {
			if r.attempt != attempt {
				continue
			}
			n++
			if !r.end.IsZero() {
				ended++
				if r.end.After(last) {
					last = r.end
				}
			}
			if first.IsZero() || r.start.Before(first) {
				first = r.start
			}
		}
		return n, ended, last, first
	}

	start(1)
	waitFor(t, "the 4 ranks' processes", func() bool { n, _, _, _ := ranks("1"); return n == nodes })
	var nodeName string
	for _, r := range k.ran() {
		if r.attempt == "1" && r.rank == "2" {
			nodeName = r.node
		}
	}
	if err := taint(ctx, admin, nodeName); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { untaint(t, admin, nodeName, reclaimTaint.Key) })
	if ev := evs.wait(t, 1, backend.Exited); !ev.Preempted || ev.Lost {
		t.Errorf("the gang, rank 2's node reclaimed: %+v, want a preemption", ev)
	}
	// The reclaimed rank's process ended before Exited; the others, which
	// the backend deletes with the attempt's grace then, end within it.
	for _, r := range k.ran() {
		if r.attempt == "1" && r.rank == "2" && r.end.IsZero() {
			t.Errorf("attempt 1 reported Exited while the reclaimed rank 2 still ran")
		}
	}
	waitFor(t, "every rank of attempt 1 to end", func() bool { n, ended, _, _ := ranks("1"); return n == nodes && ended == nodes })

	start(2)
	waitFor(t, "the 4 ranks' processes", func() bool { n, _, _, _ := ranks("2"); return n == nodes })
	if err := os.WriteFile(filepath.Join(wd, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if ev := evs.wait(t, 2, backend.Exited); ev.Preempted || ev.Lost || ev.ExitCode == nil || *ev.ExitCode != 0 {
		t.Errorf("attempt 2: %+v, want exit code 0", ev)
	}
	for id, c := range evs.counts() {
		if c != [2]int{1, 1} {
			t.Errorf("attempt %d: %d Started and %d Exited events, want one of each", id, c[0], c[1])
		}
	}
}
