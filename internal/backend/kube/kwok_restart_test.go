package kube

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
)

// TestKWOKWatchSurvivesRestarts kills kube-apiserver and then etcd with
// SIGKILL (scripts/kube.sh restart) while attempts run, and checks that the
// backend's watch goes on: an attempt that ends right after the API server
// is back, one whose spot node is reclaimed after etcd's restart, and one
// started after both are each reported once, as what they are, and no
// attempt is reported Started twice.
func TestKWOKWatchSurvivesRestarts(t *testing.T) {
	admin, ns := kwokNamespace(t)
	roleClient := asServiceAccount(t, admin, ns)
	k := newKWOKKubelet(t, admin, ns)
	pools := karpenterPools(t, virga.Resources{CPU: 32, MemoryMB: 128 << 10}, 100, 100)
	b, err := New(roleClient, Config{Namespace: ns, Image: "virga:kwok", Instance: "restart", Pools: pools,
		FinishedTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	evs := collect(b)

	ctx := context.Background()
	dir := t.TempDir()
	// Each attempt's trial waits for the file go in its directory (5
	// minutes at most, should the test be killed).
	start := func(id int64, pool string) string {
		t.Helper()
		wd := filepath.Join(dir, strconv.FormatInt(id, 10))
		sp := &backend.StartSpec{AttemptID: id, TrialID: id, ExperimentID: 1,
			Argv: []string{"sh", "-c", "i=0; until [ -e go ] || [ $((i += 1)) -gt 3000 ]; do sleep 0.1; done"}, Workdir: wd, Dir: filepath.Join(wd, "attempt"),
			Resources: virga.Resources{CPU: 1, MemoryMB: 64}, Nodes: 1, ProcessesPerNode: 1, Pool: pool,
			StopGrace: 2 * time.Second, Token: "restart",
			ReportURL: fmt.Sprintf("http://127.0.0.1:9/api/v1/attempts/%d/report", id)}
		if err := os.MkdirAll(sp.Dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := b.Start(ctx, sp); err != nil {
			t.Fatal(err)
		}
		evs.wait(t, id, backend.Started)
		return wd
	}
	release := func(wd string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(wd, "go"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	restart := func(daemon string) {
		t.Helper()
		began := time.Now()
		out, err := exec.Command("../../../scripts/kube.sh", "restart", daemon).CombinedOutput()
		if err != nil {
			t.Fatalf("scripts/kube.sh restart %s: %v\n%s", daemon, err, out)
		}
		t.Logf("%s killed and back in %s", daemon, time.Since(began).Round(time.Millisecond))
	}

	a := start(1, "on-demand")
	start(2, "spot")
	restart("kube-apiserver")
	// The backend's watch may not be back yet: the end must still be seen.
	release(a)
	if ev := evs.wait(t, 1, backend.Exited); ev.Preempted || ev.Lost || ev.ExitCode == nil || *ev.ExitCode != 0 {
		t.Errorf("attempt 1 after the API server's restart: %+v, want exit code 0", ev)
	}

	restart("etcd")
	var nodeName string
	for _, r := range k.ran() {
		if r.attempt == "2" {
			nodeName = r.node
		}
	}
	if err := taint(ctx, admin, nodeName); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { untaint(t, admin, nodeName, reclaimTaint.Key) })
	if ev := evs.wait(t, 2, backend.Exited); !ev.Preempted || ev.Lost {
		t.Errorf("attempt 2, its spot node reclaimed after etcd's restart: %+v, want a preemption", ev)
	}

	c := start(3, "on-demand")
	release(c)
	if ev := evs.wait(t, 3, backend.Exited); ev.Preempted || ev.Lost || ev.ExitCode == nil || *ev.ExitCode != 0 {
		t.Errorf("attempt 3, started after both restarts: %+v, want exit code 0", ev)
	}
	// Pods deleted after their FinishedTTL must not bring any event either.
	waitFor(t, "the finished pods' deletion", func() bool {
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0
	})
	for id, n := range evs.counts() {
		if n != [2]int{1, 1} {
			t.Errorf("attempt %d: %d Started and %d Exited events, want one of each", id, n[0], n[1])
		}
	}
}

// events collects a backend's events.
type events struct {
	mu      sync.Mutex
	all     []backend.Event
	changed chan struct{} // closed and replaced at each event
}

func collect(b backend.Backend) *events {
	e := &events{changed: make(chan struct{})}
	go func() {
		for ev := range b.Events() {
			e.mu.Lock()
			e.all = append(e.all, ev)
			close(e.changed)
			e.changed = make(chan struct{})
			e.mu.Unlock()
		}
	}()
	return e
}

// wait returns the first event of kind for attempt id, waiting up to two
// minutes for it.
func (e *events) wait(t *testing.T, id int64, kind backend.EventKind) backend.Event {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		e.mu.Lock()
		for _, ev := range e.all {
			if ev.AttemptID == id && ev.Kind == kind {
				e.mu.Unlock()
				return ev
			}
		}
		changed := e.changed
		e.mu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("attempt %d: no %s event within 2 minutes", id, kind)
		}
	}
}

// counts returns how many Started and Exited events each attempt got.
func (e *events) counts() map[int64][2]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := map[int64][2]int{}
	for _, ev := range e.all {
		c := n[ev.AttemptID]
		if ev.Kind == backend.Started {
			c[0]++
		} else if ev.Kind == backend.Exited {
			c[1]++
		}
		n[ev.AttemptID] = c
	}
	return n
}
