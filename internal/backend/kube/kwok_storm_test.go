package kube

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
)

// stormTrial is the storm's trial: it resumes from its checkpoint (the
// step it reached, in ckpt), notes the step it starts from in starts,
// takes $STEPS steps of 0.2 s, checkpointing each, and ends once the file
// ../release exists (when the storm is over; or after 5 minutes, should
// the test be killed).
const stormTrial = `n=$(cat ckpt 2>/dev/null || echo 0); echo "$n" >>starts
while [ "$n" -lt "$STEPS" ]; do sleep 0.2; n=$((n+1)); echo "$n" >ckpt.tmp; mv ckpt.tmp ckpt; done
i=0; until [ -e ../release ] || [ $((i += 1)) -gt 300 ]; do sleep 1; done`

// TestKWOKSpotStorm runs trials on the spot pool of scripts/kube.sh's
// cluster, as local processes (kwokKubelet), while the provider reclaims
// spot nodes at random moments: a NoExecute taint on a node where a trial
// runs has the taint manager evict its pods. The test plays the control
// loop: a preempted attempt's trial starts again as a new attempt, which
// resumes from the trial's checkpoint. Every trial completes; every
// attempt ends either in success or reported Preempted (none failed, none
// lost), each reclaim preempting at least one (the trials end only once the
// storm is over and as many preemptions as reclaims were seen); no attempt
// starts twice, and no two processes of one trial
// run at once.
func TestKWOKSpotStorm(t *testing.T) {
	admin, ns := kwokNamespace(t)
	roleClient := asServiceAccount(t, admin, ns)
	k := newKWOKKubelet(t, admin, ns)
	pools := karpenterPools(t, virga.Resources{CPU: 32, MemoryMB: 128 << 10}, 0, 100)
	b, err := New(roleClient, Config{Namespace: ns, Image: "virga:kwok", Instance: "storm", Pools: pools,
		FinishedTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()

	const trials, steps, reclaims = 100, 10, 40
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	ctx := context.Background()
	dir := t.TempDir()
	trialOf := map[int64]int{}
	var nextID int64
	start := func(trial int) {
		t.Helper()
		nextID++
		wd := filepath.Join(dir, strconv.Itoa(trial))
		sp := &backend.StartSpec{AttemptID: nextID, TrialID: int64(trial) + 1, ExperimentID: 1,
			Argv: []string{"sh", "-c", stormTrial}, Env: map[string]string{"STEPS": strconv.Itoa(steps)},
			Workdir: wd, Dir: filepath.Join(wd, "attempt-"+strconv.FormatInt(nextID, 10)),
			Resources: virga.Resources{CPU: 1, MemoryMB: 64}, Nodes: 1, ProcessesPerNode: 1, Pool: "spot",
			StopGrace: 2 * time.Second, Token: "storm",
			ReportURL: fmt.Sprintf("http://127.0.0.1:9/api/v1/attempts/%d/report", nextID)}
		if err := os.MkdirAll(sp.Dir, 0o755); err != nil {
			t.Fatal(err)
		}
		trialOf[sp.AttemptID] = trial
		if err := b.Start(ctx, sp); err != nil {
			t.Fatalf("start attempt %d of trial %d: %v", sp.AttemptID, trial, err)
		}
	}
	for i := range trials {
		start(i)
	}

	// The storm: every 20 to 200 ms, a spot node where a trial's process
	// runs is reclaimed.
	stormDone, stormStop := make(chan int, 1), make(chan struct{})
	defer close(stormStop)
	go func() {
		tainted := map[string]bool{}
		defer func() { stormDone <- len(tainted) }()
		for len(tainted) < reclaims {
			select {
			case <-stormStop:
				return
			case <-time.After(time.Duration(20+rng.IntN(180)) * time.Millisecond):
			}
			var nodes []string
			for _, r := range k.ran() {
				if r.end.IsZero() && !tainted[r.node] && !slices.Contains(nodes, r.node) {
					nodes = append(nodes, r.node)
				}
			}
			if len(nodes) == 0 {
				continue
			}
			name := nodes[rng.IntN(len(nodes))]
			tainted[name] = true
			if err := taint(ctx, admin, name); err != nil {
				t.Errorf("reclaim %s: %v", name, err)
				return
			}
			t.Cleanup(func() { untaint(t, admin, name, reclaimTaint.Key) })
		}
	}()

	started, exited := map[int64]bool{}, map[int64]bool{}
	done := map[int]bool{}
	preemptions := 0
	nodes := 0
	// The trials end once the storm is over and every reclaim has taken
	// effect: the taint manager evicts a tainted node's pods a little
	// later, and a trial let go at once could end first.
	stormOver, released := false, false
	release := func() {
		if released || !stormOver || preemptions < reclaims {
			return
		}
		released = true
		if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.After(3 * time.Minute)
	for len(done) < trials {
		select {
		case nodes = <-stormDone:
			stormDone, stormOver = nil, true
			release()
		case ev := <-b.Events():
			trial, ok := trialOf[ev.AttemptID]
			if !ok {
				t.Fatalf("event of an attempt never started: %+v", ev)
			}
			switch ev.Kind {
			case backend.Started:
				if started[ev.AttemptID] || exited[ev.AttemptID] {
					t.Errorf("attempt %d started again: %+v", ev.AttemptID, ev)
				}
				started[ev.AttemptID] = true
			case backend.Exited:
				if exited[ev.AttemptID] {
					t.Errorf("attempt %d exited again: %+v", ev.AttemptID, ev)
				}
				exited[ev.AttemptID] = true
				switch {
				case ev.Preempted && !ev.Lost:
					preemptions++
					start(trial)
					release()
				case !ev.Preempted && !ev.Lost && ev.ExitCode != nil && *ev.ExitCode == 0:
					done[trial] = true
				default:
					t.Fatalf("attempt %d of trial %d: %+v (exit code %v), want a success or a preemption",
						ev.AttemptID, trial, ev, ev.ExitCode)
				}
			}
		case <-deadline:
			t.Fatalf("%d of %d trials completed within 3 minutes (storm over %v, %d preemptions of %d reclaims)", len(done), trials, stormOver, preemptions, reclaims)
		}
	}
	t.Logf("%d trials, %d attempts, %d spot nodes reclaimed, %d preemptions", trials, nextID, nodes, preemptions)
	if nodes < reclaims {
		t.Errorf("%d spot nodes reclaimed, want %d", nodes, reclaims)
	}
	// Each reclaim hit a node where a trial ran.
	if preemptions < reclaims {
		t.Errorf("%d preemptions of %d reclaims", preemptions, reclaims)
	}

	// The processes: at most one per attempt (a pod evicted before KWOK
	// marked it Running has none), never two of a trial at once.
	runs := k.ran()
	if len(runs) > int(nextID) || len(runs) < trials {
		t.Errorf("%d processes ran for %d attempts of %d trials", len(runs), nextID, trials)
	}
	seen := map[string]bool{}
	last := map[string]kwokRun{}
	for _, r := range runs {
		if seen[r.attempt] {
			t.Errorf("attempt %s: a second process", r.attempt)
		}
		seen[r.attempt] = true
		if prev, ok := last[r.trial]; ok && (prev.end.IsZero() || r.start.Before(prev.end)) {
			t.Errorf("trial %s: attempt %s started at %s, while attempt %s ran (until %s)", r.trial, r.attempt,
				r.start.Format(time.StampMicro), prev.attempt, prev.end.Format(time.StampMicro))
		}
		last[r.trial] = r
	}

	// The trials: each finished its steps, each attempt resuming where the
	// one before left off.
	resumed := 0
	for i := range trials {
		wd := filepath.Join(dir, strconv.Itoa(i))
		ckpt, err := os.ReadFile(filepath.Join(wd, "ckpt"))
		if err != nil || strings.TrimSpace(string(ckpt)) != strconv.Itoa(steps) {
			t.Errorf("trial %d: checkpoint %q (%v), want %d", i, ckpt, err, steps)
		}
		data, err := os.ReadFile(filepath.Join(wd, "starts"))
		if err != nil {
			t.Fatal(err)
		}
		from := strings.Fields(string(data))
		prev := -1
		for _, f := range from {
			n, _ := strconv.Atoi(f)
			if n < prev {
				t.Errorf("trial %d: started from steps %v: went back", i, from)
			}
			if n > 0 {
				resumed++
			}
			prev = n
		}
	}
	if resumed == 0 {
		t.Errorf("no attempt resumed from a checkpoint")
	}
	t.Logf("%d attempts resumed from a checkpoint", resumed)
}

// reclaimTaint is the provider's reclaim of a spot node: a NoExecute taint
// no pod of Virga's tolerates.
var reclaimTaint = corev1.Taint{Key: "virga.dev/reclaimed", Value: "true", Effect: corev1.TaintEffectNoExecute}

// taint puts reclaimTaint on node name.
func taint(ctx context.Context, client *Client, name string) error {
	var err error
	for range 5 {
		var n *corev1.Node
		if n, err = client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		n.Spec.Taints = append(n.Spec.Taints, reclaimTaint)
		if _, err = client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err == nil {
			return nil
		}
	}
	return err
}
