package kube

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// trialCalls runs one attempt of nodes pods through its life (created, run,
// exit 0, finished pods deleted) and returns the API calls it cost: the
// fake clientset's actions other than the informer's list and watch, which
// all attempts share.
func trialCalls(t *testing.T, nodes int) (calls map[string]int, total int) {
	c := newCluster(t)
	b := c.backend(Config{FinishedTTL: time.Millisecond})
	c.cs.ClearActions()
	s := startSpec(1)
	s.Nodes = nodes
	if err := b.Start(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	for r := range nodes {
		c.run(fmt.Sprintf("virga-1-%d", r))
	}
	next(t, b)
	for r := range nodes {
		c.exit(fmt.Sprintf("virga-1-%d", r), 0)
	}
	next(t, b)
	waitFor(t, "the finished pods to be deleted", func() bool { return !c.exists("virga-1-0") })
	for r := range nodes {
		name := fmt.Sprintf("virga-1-%d", r)
		waitFor(t, name+" to be deleted", func() bool { return !c.exists(name) })
	}
	calls = map[string]int{}
	for _, a := range c.cs.Actions() {
		if a.GetVerb() == "list" || a.GetVerb() == "watch" {
			continue
		}
		calls[a.GetVerb()+" "+a.GetResource().Resource]++
		total++
	}
	got := b.Calls()
	if int(got.Create+got.Delete) != total {
		t.Errorf("the backend counted %+v, the fake API server saw %d calls", got, total)
	}
	return calls, total
}

// TestAPICallsPerTrial measures the API calls of one attempt (the
// measurement "API calls per trial"): 2 for a single-node attempt (create
// the pod; delete it FinishedTTL after it ended), 2N+1 for a gang of N
// (N pods, the headless Service, N deletes; the Service goes with pod 0 by
// the garbage collector). The informer's list and watch are one per
// server, not per trial.
func TestAPICallsPerTrial(t *testing.T) {
	for _, tc := range []struct{ nodes, want int }{{1, 2}, {2, 5}} {
		calls, total := trialCalls(t, tc.nodes)
		t.Logf("API calls per trial, %d node(s): %d %v", tc.nodes, total, calls)
		if testing.Verbose() {
			fmt.Printf("API calls per trial, %d node(s): %d %v\n", tc.nodes, total, calls)
		}
		if total != tc.want {
			t.Errorf("%d node(s): %d API calls %v, want %d", tc.nodes, total, calls, tc.want)
		}
	}
}
