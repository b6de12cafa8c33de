package search_test

import (
	"testing"

	"github.com/virga-ml/virga/internal/search"
	"github.com/virga-ml/virga/internal/search/replay"
)

// FuzzRestore feeds arbitrary snapshots to every searcher: Restore must
// return an error or a state the searcher can go on from, never panic, and
// a failed Restore must leave the searcher as it was.
func FuzzRestore(f *testing.F) {
	tb := synthTable(1)
	for _, sc := range searchers {
		s, err := search.New(tb.Experiment(sc.s, 30), 1)
		if err != nil {
			f.Fatal(err)
		}
		res, err := replay.Run(tb, s, replay.Options{Workers: 3, BudgetEpochs: 200})
		if err != nil || res.Trials == 0 {
			f.Fatal(err)
		}
		snap, err := s.Snapshot()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(snap)
	}
	f.Add([]byte(`{"searcher":"tpe","limit":30,"records":[null]}`))
	f.Add([]byte(`{"searcher":"pbt","limit":30,"state":{"members":[{"p":"r1","h":{}}]}}`))
	f.Fuzz(func(t *testing.T, snap []byte) {
		for _, sc := range searchers {
			s, err := search.New(tb.Experiment(sc.s, 30), 1)
			if err != nil {
				t.Fatal(err)
			}
			before, _ := s.Snapshot()
			if err := s.Restore(snap); err != nil {
				after, _ := s.Snapshot()
				if string(before) != string(after) {
					t.Fatalf("%s: a failed Restore changed the state", sc.name)
				}
				continue
			}
			// A restored searcher goes on without panicking.
			_, _ = replay.Run(tb, s, replay.Options{Workers: 2, BudgetEpochs: 50})
		}
	})
}
