package kube

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
)

// TestEndToEnd runs attempts on a real cluster: the one KUBECONFIG names,
// in VIRGA_TEST_NAMESPACE (default: the kubeconfig context's namespace).
// The pods run VIRGA_TEST_IMAGE, which must hold the virga binary as
// `virga` on PATH and a shell (e.g. a trainer image built as in
// deploy/Dockerfile on a base with /bin/sh): a stand-in such as busybox
// would only show that pods start, not that `virga agent` runs the trial.
// The server URL handed to the agent is VIRGA_TEST_SERVER (default
// http://virga.virga.svc:7070); reports the agent cannot deliver do not
// change how the attempt ends.
//
//	KUBECONFIG=~/.kube/config VIRGA_TEST_IMAGE=registry/virga:dev go test -run EndToEnd -v ./internal/backend/kube
func TestEndToEnd(t *testing.T) {
	if os.Getenv("KUBECONFIG") == "" {
		t.Skip("end-to-end Kubernetes suite skipped: KUBECONFIG is not set (set it, and VIRGA_TEST_IMAGE to an image with the virga binary, to run it against a cluster)")
	}
	if os.Getenv("VIRGA_TEST_KWOK") != "" {
		t.Skip("end-to-end Kubernetes suite skipped: VIRGA_TEST_KWOK is set, and pods on KWOK nodes run no containers (TestKWOK runs these cases there)")
	}
	image := os.Getenv("VIRGA_TEST_IMAGE")
	if image == "" {
		t.Fatal("KUBECONFIG is set but VIRGA_TEST_IMAGE is not: give an image with the virga binary (deploy/Dockerfile) and /bin/sh")
	}
	client, err := NewClient("")
	if err != nil {
		t.Fatal(err)
	}
	ns := os.Getenv("VIRGA_TEST_NAMESPACE")
	if ns == "" {
		ns = client.Namespace
	}
	server := os.Getenv("VIRGA_TEST_SERVER")
	if server == "" {
		server = "http://virga.virga.svc:7070"
	}
	instance := fmt.Sprintf("e2e%d", time.Now().Unix()%100000)
	cfg := Config{Namespace: ns, Image: image, Instance: instance, Capacity: virga.Resources{CPU: 4, MemoryMB: 4096},
		FinishedTTL: time.Second}
	b, err := New(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	base := time.Now().UnixMilli() % 1_000_000_000
	start := func(id int64, nodes int, script string) *backend.StartSpec {
		s := &backend.StartSpec{AttemptID: id, TrialID: id, ExperimentID: 1, Argv: []string{"sh", "-c", script},
			Resources: virga.Resources{CPU: 0.1 * float64(nodes), MemoryMB: 64 * int64(nodes)}, Nodes: nodes, ProcessesPerNode: 1,
			StopGrace: 5 * time.Second, ReportURL: fmt.Sprintf("%s/api/v1/attempts/%d/report", server, id), Token: "e2e"}
		if err := b.Start(ctx, s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	wait := func(b *Backend, id int64, kind backend.EventKind) backend.Event {
		t.Helper()
		deadline := time.After(5 * time.Minute)
		for {
			select {
			case ev := <-b.Events():
				t.Logf("event %+v", ev)
				if ev.AttemptID == id && ev.Kind == kind {
					return ev
				}
				if ev.AttemptID == id && ev.Kind == backend.Exited {
					t.Fatalf("attempt %d exited before %s: %+v", id, kind, ev)
				}
			case <-deadline:
				t.Fatalf("attempt %d: no %s within 5 minutes (is the image pullable, does a node fit 100m CPU?)", id, kind)
			}
		}
	}

	t.Run("exit code", func(t *testing.T) {
		id := base + 1
		start(id, 1, "sleep 5; exit 7")
		wait(b, id, backend.Started)
		ev := wait(b, id, backend.Exited)
		if ev.Lost || ev.Preempted {
			t.Errorf("got %+v", ev)
		}
		if ev.ExitCode == nil || *ev.ExitCode != 7 {
			t.Logf("exit status %v/%q: the agent's own status for the trial's exit 7 (check internal/agent)", ev.ExitCode, ev.Signal)
		}
	})
	t.Run("stop", func(t *testing.T) {
		id := base + 2
		start(id, 1, "sleep 600")
		wait(b, id, backend.Started)
		if err := b.Stop(id, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		ev := wait(b, id, backend.Exited)
		if ev.Preempted || ev.Lost {
			t.Errorf("got %+v", ev)
		}
	})
	t.Run("gang of 2 and adopt", func(t *testing.T) {
		id := base + 3
		start(id, 2, "sleep 600")
		wait(b, id, backend.Started)
		// The server restarts: a new backend adopts the running gang.
		_ = b.Close()
		b2, err := New(client, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer b2.Close()
		if err := b2.Adopt(ctx, &virga.Attempt{ID: id}, virga.Resources{}); err != nil {
			t.Fatal(err)
		}
		wait(b2, id, backend.Started)
		if err := b2.Stop(id, 2*time.Second); err != nil {
			t.Fatal(err)
		}
		ev := wait(b2, id, backend.Exited)
		if ev.Preempted || ev.Lost {
			t.Errorf("got %+v", ev)
		}
	})
}
