package sim

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/spec"
	"github.com/virga-ml/virga/internal/store"
)

// keptStore is a store whose Close leaves it open, for a test to read
// after RunLoop has returned.
type keptStore struct{ store.Store }

func (keptStore) Close() error { return nil }

// loopOutcome runs cfg on the control loop and digests everything it
// decided: the result (but the count of passes), and every trial, attempt (but its directory, which
// is under a temporary one) and event the store holds at the end.
func loopOutcome(t *testing.T, cfg ExperimentConfig) (*ExperimentResult, string) {
	t.Helper()
	var st store.Store
	open := OpenStore
	OpenStore = func(ctx context.Context, dir string) (store.Store, error) {
		s, err := open(ctx, dir)
		st = s
		return keptStore{s}, err
	}
	defer func() { OpenStore = open }()
	r, err := RunLoop(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	exps, err := st.Experiments(ctx, store.ExperimentFilter{})
	if err != nil || len(exps) != 1 {
		t.Fatalf("experiments %d, %v: want 1", len(exps), err)
	}
	id := exps[0].ID
	trials, err := st.Trials(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	attempts, err := st.ExperimentAttempts(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range attempts {
		a.Dir = ""
	}
	events, err := st.Events(ctx, store.EventFilter{ExperimentID: id})
	if err != nil {
		t.Fatal(err)
	}
	// Events of one instant come in the order the backend saw its starts
	// in, which goroutines decide: they are digested in an order of their
	// content, without their IDs.
	keys := make([]string, len(events))
	for i, ev := range events {
		ev.ID = 0
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		keys[i] = string(b)
	}
	slices.SortFunc(keys, func(a, b string) int { return strings.Compare(a, b) })
	// The driver's count of passes is left out: how many of the backend's
	// wake-ups one pass takes in depends on goroutine scheduling
	// (TestLoopOnDemandRun).
	res := *r
	res.Decisions = 0
	h := sha256.New()
	enc := json.NewEncoder(h)
	for _, v := range []any{&res, exps[0], trials, attempts, keys} {
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
	}
	if dump := os.Getenv("VIRGA_DIGEST_DUMP"); dump != "" {
		var b bytes.Buffer
		e := json.NewEncoder(&b)
		e.SetIndent("", " ")
		for _, v := range []any{&res, exps[0], trials, attempts, keys} {
			_ = e.Encode(v)
		}
		_ = os.WriteFile(dump+"-"+strings.ReplaceAll(t.Name(), "/", "-"), b.Bytes(), 0o644)
	}
	return r, hex.EncodeToString(h.Sum(nil))[:16]
}

// TestLoopOutcomeDigest pins what the control loop decides on a few
// simulated experiments, digest by digest: the scale run (BenchmarkScale)
// at 200 trials, with a budget it runs out of, with TPE, and population
// based training (trials that continue from their parents' checkpoints).
// Work that makes the loop cheaper must leave every decision as it was; a
// change of behaviour changes a digest here, on purpose, with the new
// digest and why in the same commit.
func TestLoopOutcomeDigest(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the loop on 200 trials")
	}
	variant := func(t *testing.T, from, to string) ExperimentConfig {
		cfg := scaleConfig(t, 200)
		if from == "" {
			return cfg
		}
		if !bytes.Contains(cfg.Data, []byte(from)) {
			t.Fatalf("testdata/scale.yaml: no %q", from)
		}
		data := bytes.Replace(cfg.Data, []byte(from), []byte(to), 1)
		e, err := spec.Parse("testdata/scale.yaml", data)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Spec, cfg.Data = e, data
		return cfg
	}
	const asha = "searcher: {sampler: random, stopper: asha, mode: promote, min_resource: 1, max_resource: 27, reduction_factor: 3}"
	for _, tc := range []struct {
		name     string
		from, to string // a change of the experiment file
		budget   float64
		want     string
	}{
		{name: "asha", want: "49c9c7e53ddc1f44"},
		{name: "asha budget", budget: 1500, want: "b1739959618bcdeb"},
		{name: "tpe", from: "sampler: random", to: "sampler: tpe", want: "b4c184e41e23a788"},
		{name: "pbt", from: asha, to: "searcher: {name: pbt, population: 20, interval: 3, max_resource: 27, quantile: 0.25}\ncheckpoints: {keep_last: 1}", want: "1be49581fa141054"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := variant(t, tc.from, tc.to)
			cfg.Budget = tc.budget
			r, got := loopOutcome(t, cfg)
			if got != tc.want {
				t.Errorf("outcome digest %s, want %s: the loop decided otherwise than it did (%s, %d trials, cost $%.2f, makespan %s, %d preemptions, %d moves, %d passes)",
					got, tc.want, r.End, r.Trials, r.Cost, r.Makespan.Round(time.Second), r.Preemptions, r.Moves, r.Decisions)
			}
		})
	}
}
