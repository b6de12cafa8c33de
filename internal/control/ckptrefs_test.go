package control

import (
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/spec"
)

// checkpointSharedScan is checkpointShared as a visit of every trial in
// memory: the reference the counted one is checked against.
func checkpointSharedScan(c *Controller, self *trialState, id string) bool {
	for _, ck := range self.ckpts {
		if ck.ID == id {
			return true
		}
	}
	for _, ts := range c.trials {
		if ts == self {
			continue
		}
		if ts.t.Checkpoint == id {
			return true
		}
		for _, ck := range ts.ckpts {
			if ck.ID == id {
				return true
			}
		}
	}
	return false
}

// TestCheckpointRefs changes trials' checkpoints at random, as the loop
// does (new trials continuing from a parent's checkpoint, reports that save
// one and retention that drops old ones, experiments that end), and checks
// after each change that checkpointShared, which counts references as they
// change (ckptrefs.go), answers as a visit of every trial does for each
// trial and checkpoint ID tried, and that the counts are a recount's.
func TestCheckpointRefs(t *testing.T) {
	sp, err := spec.Parse("e.yaml", []byte(`name: s
entrypoint: [train]
hyperparameters: {lr: {type: float, min: 0.1, max: 1}}
searcher: {sampler: random}
objective: {metric: loss, direction: minimize}
max_trials: 40
checkpoints: {keep_last: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	c := &Controller{log: slog.New(slog.NewTextHandler(io.Discard, nil)), met: newMetrics(), trials: map[int64]*trialState{}, ckptRefs: map[string]int{}}
	rng := rand.New(rand.NewPCG(5, 6))
	var exps []*expState
	var all []*trialState
	var nextID, nextCk int64
	ids := func() []string { // every ID seen, and one never seen
		out := []string{"", "none"}
		for i := range nextCk {
			out = append(out, fmt.Sprint("ck", i+1))
		}
		return out
	}
	for i := range 1500 {
		switch r := rng.IntN(20); {
		case r == 0 || len(exps) == 0:
			exps = append(exps, &expState{exp: &virga.Experiment{ID: int64(len(exps) + 1)}, spec: sp})
		case r == 1:
			// An experiment ends: its trials leave memory.
			es := exps[rng.IntN(len(exps))]
			for _, ts := range es.trials {
				c.untrack(ts)
			}
		case r < 6:
			// A new trial, maybe continuing from another's checkpoint;
			// it enters memory once committed.
			es := exps[rng.IntN(len(exps))]
			nextID++
			ts := &trialState{exp: es, t: &virga.Trial{ID: nextID}}
			if len(all) > 0 && rng.IntN(2) == 0 {
				if p := all[rng.IntN(len(all))]; p.t.Checkpoint != "" {
					ts.t.ParentCheckpoint = p.t.Checkpoint
					c.setCheckpoint(ts, p.t.Checkpoint)
				}
			}
			es.addTrial(ts)
			all = append(all, ts)
			c.track(ts)
		case len(all) > 0:
			// A report that saved a checkpoint (sometimes one it saved
			// before), then retention.
			ts := all[rng.IntN(len(all))]
			id := fmt.Sprint("ck", nextCk+1)
			if nextCk > 0 && rng.IntN(5) == 0 {
				id = fmt.Sprint("ck", rng.Int64N(nextCk)+1)
			} else {
				nextCk++
			}
			ck := virga.Checkpoint{ID: id, TrialID: ts.t.ID, Step: int64(len(ts.ckpts) + 1)}
			c.setCheckpoint(ts, ck.ID)
			c.keepCheckpoint(ts, ck)
			c.retain(newIteration(), ts)
		}
		recount := map[string]int{}
		for _, ts := range c.trials {
			recount[ts.t.Checkpoint]++
			for _, ck := range ts.ckpts {
				recount[ck.ID]++
			}
		}
		if !maps.Equal(recount, c.ckptRefs) {
			t.Fatalf("change %d: counts %v, a recount gives %v", i, c.ckptRefs, recount)
		}
		if len(all) == 0 {
			continue
		}
		known := ids()
		for range 40 {
			ts, id := all[rng.IntN(len(all))], known[rng.IntN(len(known))]
			if got, want := c.checkpointShared(ts, id), checkpointSharedScan(c, ts, id); got != want {
				t.Fatalf("change %d: checkpointShared(trial %d, %q) = %v, a visit of every trial says %v", i, ts.t.ID, id, got, want)
			}
		}
	}
}
