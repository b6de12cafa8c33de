package search_test

import (
	"testing"

	"github.com/virga-ml/virga/internal/search"
	"github.com/virga-ml/virga/internal/search/replay"
	"github.com/virga-ml/virga/internal/spec"
)

// BenchmarkSearcherAt1000Trials measures what a searcher costs the control
// loop once 1,000 trials have run (TPE with ASHA on the synthetic table):
// a proposal, a report's decision, and the snapshot written with each
// commit that changed the searcher (its size is reported as bytes/snapshot).
func BenchmarkSearcherAt1000Trials(b *testing.B) {
	tb := synthTable(1)
	s := spec.Searcher{Name: "tpe+asha", Sampler: "tpe", Stopper: "asha"}
	e := tb.Experiment(s, 3000)
	sr, err := search.New(e, 1)
	if err != nil {
		b.Fatal(err)
	}
	res, err := replay.Run(tb, sr, replay.Options{Workers: 4, BudgetEpochs: 4000})
	if err != nil || res.Trials < 1000 {
		b.Fatalf("replay made %d trials (%v)", res.Trials, err)
	}
	snap, _ := sr.Snapshot()
	// Propose includes a Restore to keep the state at 1,000 trials; restore
	// alone is measured below.
	b.Run("propose+restore", func(b *testing.B) {
		for b.Loop() {
			p, err := sr.Propose()
			if err != nil {
				b.Skip("search exhausted")
			}
			_ = p
			if err := sr.Restore(snap); err != nil { // keep the state at 1,000 trials
				b.Fatal(err)
			}
		}
	})
	b.Run("snapshot", func(b *testing.B) {
		var n int
		for b.Loop() {
			out, err := sr.Snapshot()
			if err != nil {
				b.Fatal(err)
			}
			n = len(out)
		}
		b.ReportMetric(float64(n), "bytes/snapshot")
	})
	b.Run("restore", func(b *testing.B) {
		for b.Loop() {
			if err := sr.Restore(snap); err != nil {
				b.Fatal(err)
			}
		}
	})
}
