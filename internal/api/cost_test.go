package api

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/clock"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/sqlite"
)

// TestLiveCost reads an experiment whose trial has a preempted attempt and a
// running one, and another trial that completed on another pool: the
// running attempt is priced up to the clock at every read (and its stored
// row is left alone), and the trial, trial list, experiment and experiment
// list add up the costs, lost costs and pools.
func TestLiveCost(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "virga.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := clock.NewFake(t0.Add(time.Hour))
	// A trial takes 2 of a node's 8 cores: a quarter of $36 an hour, $9 an hour.
	pricer := &capacity.Pricer{Pools: map[string]capacity.PricedPool{
		"spot":     {Price: capacity.Constant(36), Node: virga.Resources{CPU: 8}},
		"ondemand": {Price: capacity.Constant(100), Node: virga.Resources{CPU: 8}},
	}}

	spec := "name: cost\nentrypoint: [sh, -c, 'exit 0']\nobjective: {metric: loss, direction: minimize}\n" +
		"resources: {cpu: 2}\n"
	e := &virga.Experiment{Name: "cost", State: virga.ExperimentActive, Spec: []byte(spec), SpecFile: "cost.yaml", CreatedAt: t0}
	if err := st.Apply(ctx, &store.Batch{Experiments: []*virga.Experiment{e}}); err != nil {
		t.Fatal(err)
	}
	t1 := &virga.Trial{ExperimentID: e.ID, Seq: 1, State: virga.TrialRunning, Attempts: 2, CreatedAt: t0}
	t2 := &virga.Trial{ExperimentID: e.ID, Seq: 2, State: virga.TrialCompleted, Attempts: 1, CreatedAt: t0}
	if err := st.Apply(ctx, &store.Batch{Trials: []*virga.Trial{t1, t2}}); err != nil {
		t.Fatal(err)
	}
	preempted := &virga.Attempt{TrialID: t1.ID, Number: 1, State: virga.AttemptExited, Outcome: virga.OutcomePreempted,
		Backend: "local", Pool: "spot", Cost: 1.5, LostCost: 0.5, CreatedAt: t0, StartedAt: t0, EndedAt: t0.Add(10 * time.Minute)}
	running := &virga.Attempt{TrialID: t1.ID, Number: 2, State: virga.AttemptRunning, Backend: "local", Pool: "spot",
		CreatedAt: t0.Add(30 * time.Minute), StartedAt: t0.Add(30 * time.Minute)}
	done := &virga.Attempt{TrialID: t2.ID, Number: 1, State: virga.AttemptExited, Outcome: virga.OutcomeSucceeded,
		Backend: "local", Pool: "ondemand", Cost: 4, CreatedAt: t0, StartedAt: t0, EndedAt: t0.Add(time.Hour)}
	if err := st.Apply(ctx, &store.Batch{Attempts: []*virga.Attempt{preempted, running, done}}); err != nil {
		t.Fatal(err)
	}

	// A read-only API (no controller) over the store, as the CLI runs it.
	srv := httptest.NewServer(New(Config{Store: st, Pricer: pricer, Clock: clk}))
	t.Cleanup(srv.Close)
	get := func(path string, out any) {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: HTTP %d", path, resp.StatusCode)
		}
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	approx := cmpopts.EquateApprox(0, 1e-9)

	for _, tc := range []struct {
		name    string
		advance time.Duration
		// wantLive is the running attempt's cost at the read: $9 an hour
		// since t0+30m.
		wantLive float64
	}{
		{"after 30 minutes", 0, 4.5},
		{"after 50 minutes", 20 * time.Minute, 7.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk.Advance(tc.advance)
			var tv wire.TrialView
			get(fmt.Sprintf("/api/v1/trials/%d", t1.ID), &tv)
			if len(tv.AttemptList) != 2 {
				t.Fatalf("trial has %d attempts, want 2", len(tv.AttemptList))
			}
			gotAttempts := []float64{tv.AttemptList[0].Cost, tv.AttemptList[0].LostCost, tv.AttemptList[1].Cost, tv.AttemptList[1].LostCost}
			if d := cmp.Diff([]float64{1.5, 0.5, tc.wantLive, 0}, gotAttempts, approx); d != "" {
				t.Errorf("attempts' cost and lost cost (-want +got):\n%s", d)
			}
			if d := cmp.Diff(wire.Spend{Cost: 1.5 + tc.wantLive, LostCost: 0.5}, tv.Spend, approx); d != "" {
				t.Errorf("trial's spend (-want +got):\n%s", d)
			}

			var list []wire.TrialSummary
			get(fmt.Sprintf("/api/v1/experiments/%d/trials", e.ID), &list)
			var gotList []wire.Spend
			for _, ts := range list {
				gotList = append(gotList, ts.Spend)
			}
			if d := cmp.Diff([]wire.Spend{{Cost: 1.5 + tc.wantLive, LostCost: 0.5}, {Cost: 4}}, gotList, approx); d != "" {
				t.Errorf("trial list's spend (-want +got):\n%s", d)
			}

			var v wire.ExperimentView
			get(fmt.Sprintf("/api/v1/experiments/%d", e.ID), &v)
			wantV := struct {
				Spend wire.Spend
				Pools []wire.PoolSpend
			}{
				wire.Spend{Cost: 5.5 + tc.wantLive, LostCost: 0.5},
				[]wire.PoolSpend{{Pool: "ondemand", Attempts: 1, Spend: wire.Spend{Cost: 4}},
					{Pool: "spot", Attempts: 2, Spend: wire.Spend{Cost: 1.5 + tc.wantLive, LostCost: 0.5}}},
			}
			gotV := struct {
				Spend wire.Spend
				Pools []wire.PoolSpend
			}{v.Spend, v.Pools}
			if d := cmp.Diff(wantV, gotV, approx); d != "" {
				t.Errorf("experiment's spend (-want +got):\n%s", d)
			}
			var vs []wire.ExperimentView
			get("/api/v1/experiments", &vs)
			if len(vs) != 1 || math.Abs(vs[0].Cost-wantV.Spend.Cost) > 1e-9 {
				t.Errorf("experiment list: %d experiments, first costing %v; want 1 costing %v", len(vs), vs[0].Cost, wantV.Spend.Cost)
			}
		})
	}

	// Reads never write the running attempt's cost.
	as, err := st.Attempts(ctx, t1.ID)
	if err != nil {
		t.Fatal(err)
	}
	if as[1].Cost != 0 {
		t.Errorf("the running attempt's stored cost is %v after reads, want 0", as[1].Cost)
	}

	// Without a pricer, a running attempt costs what is stored (nothing yet).
	plain := httptest.NewServer(New(Config{Store: st}))
	t.Cleanup(plain.Close)
	srv = plain
	var tv wire.TrialView
	get(fmt.Sprintf("/api/v1/trials/%d", t1.ID), &tv)
	if d := cmp.Diff(wire.Spend{Cost: 1.5, LostCost: 0.5}, tv.Spend, approx); d != "" {
		t.Errorf("trial's spend without a pricer (-want +got):\n%s", d)
	}
}
