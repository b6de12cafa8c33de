// Command replay runs Virga's searchers against a tabular benchmark in
// virtual time and writes one JSON line per run (bench/search/FORMAT.md):
//
//	go run ./bench/search/replay --table bench/search/tables/digits-mlp.json.gz \
//	    --seeds 20 --workers 4 --out bench/search/results/virga-digits-mlp.jsonl
//
// Each method is a searcher as an experiment file would write it; the
// searcher code is the one the server runs.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/virga-ml/virga/internal/search"
	"github.com/virga-ml/virga/internal/search/replay"
	"github.com/virga-ml/virga/internal/spec"
)

// methods are the searchers compared, by the name results carry. ASHA and
// Hyperband use reduction_factor 3 and min_resource 1 (the "-r9" variants
// min_resource epochs/9, which is the default min_resource for these
// tables), as an experiment file would set them; tpe+median-w0 sets
// warmup_steps 0 (Optuna's default); auto is `searcher: {name: auto,
// max_resource: EPOCHS}`; the rest are defaults.
func methods(epochs int64) map[string]spec.Searcher {
	rungs := func(sampler, stopper, mode string) spec.Searcher {
		s := spec.Searcher{Name: sampler + "+" + stopper, Sampler: sampler, Stopper: stopper,
			Settings: map[string]any{"max_resource": epochs, "reduction_factor": int64(3), "min_resource": int64(1), "mode": mode}}
		return s
	}
	minR := max(1, epochs/9) // two halvings below the end
	return map[string]spec.Searcher{
		"virga random":            {Name: "random", Sampler: "random"},
		"virga tpe":               {Name: "tpe", Sampler: "tpe"},
		"virga random+asha":       rungs("random", "asha", "stop"),
		"virga random+asha-promo": rungs("random", "asha", "promote"),
		"virga random+asha-r9":    withSetting(rungs("random", "asha", "stop"), "min_resource", minR),
		"virga tpe+asha":          rungs("tpe", "asha", "stop"),
		"virga tpe+asha-promote":  rungs("tpe", "asha", "promote"),
		"virga tpe+asha-r9":       withSetting(rungs("tpe", "asha", "stop"), "min_resource", minR),
		"virga random+hyperband":  rungs("random", "hyperband", "stop"),
		"virga tpe+hyperband":     rungs("tpe", "hyperband", "stop"),
		"virga tpe+median":        {Name: "tpe+median", Sampler: "tpe", Stopper: "median"},
		"virga tpe+median-w0":     {Name: "tpe+median", Sampler: "tpe", Stopper: "median", Settings: map[string]any{"warmup_steps": int64(0)}},
		"virga auto":              spec.AutoSearcher(epochs),
		"virga random+curve":      {Name: "random+curve", Sampler: "random", Stopper: "curve", Settings: map[string]any{"max_resource": epochs}},
		"virga tpe+curve":         {Name: "tpe+curve", Sampler: "tpe", Stopper: "curve", Settings: map[string]any{"max_resource": epochs}},
	}
}

func withSetting(s spec.Searcher, k string, v any) spec.Searcher {
	s.Settings[k] = v
	return s
}

// record is one run, as FORMAT.md defines it.
type record struct {
	Table        string       `json:"table"`
	Method       string       `json:"method"`
	Seed         int          `json:"seed"`
	Workers      int          `json:"workers"`
	BudgetEpochs int          `json:"budget_epochs"`
	Trace        [][3]float64 `json:"trace"`
	Trials       int          `json:"trials"`
	// Repeats counts the trials whose configuration (after snapping, with
	// --suggest float) an earlier trial of the run had already been given.
	Repeats int     `json:"repeats"`
	Seconds float64 `json:"replay_seconds"` // real time the replay took

	epochs []replay.Epoch
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "replay:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tablePath := fs.String("table", "", "table file (.json.gz)")
	seeds := fs.Int("seeds", 20, "runs per method, seeds 0..n-1")
	workers := fs.Int("workers", 4, "trials trained at once")
	budget := fs.Int("budget-epochs", 0, "epochs per run (default 50 x the table's epochs)")
	list := fs.String("methods", "", "comma-separated methods (default all)")
	var extra []string
	fs.Func("searcher", "`NAME=SEARCHER`: also run method NAME, the searcher field of an experiment file (e.g. 'tpe+curve3={sampler: tpe, stopper: curve, max_resource: 27, min_steps: 3}'); repeatable", func(v string) error {
		extra = append(extra, v)
		return nil
	})
	suggest := fs.String("suggest", "index", "index: numeric dimensions as grid indices; float: as floats over their range, snapped to the nearest grid value (a continuous space)")
	out := fs.String("out", "", "output file (default stdout)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tablePath == "" {
		return fmt.Errorf("--table is required")
	}
	t, err := replay.Load(*tablePath)
	if err != nil {
		return err
	}
	switch *suggest {
	case "index":
	case "float":
		t.Continuous = true
	default:
		return fmt.Errorf("--suggest %q: want index or float", *suggest)
	}
	if *budget == 0 {
		*budget = 50 * t.Epochs
	}
	all := methods(int64(t.Epochs))
	for _, x := range extra {
		name, text, ok := strings.Cut(x, "=")
		if !ok || name == "" {
			return fmt.Errorf("--searcher %q: want NAME=SEARCHER", x)
		}
		s, err := parseSearcher(text)
		if err != nil {
			return fmt.Errorf("--searcher %s: %w", name, err)
		}
		all["virga "+strings.TrimPrefix(name, "virga ")] = s
	}
	extras := len(extra) > 0 && *list == ""
	var names []string
	if extras {
		for _, x := range extra {
			name, _, _ := strings.Cut(x, "=")
			names = append(names, "virga "+strings.TrimPrefix(name, "virga "))
		}
	} else if *list == "" {
		for n := range all {
			names = append(names, n)
		}
	} else {
		names = strings.Split(*list, ",")
	}
	slices.Sort(names)
	w := stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	bw := bufio.NewWriter(w)
	for _, name := range names {
		s, ok := all[strings.TrimSpace(name)]
		if !ok {
			return fmt.Errorf("unknown method %q", name)
		}
		began := time.Now()
		at := []float64{0.1, 0.25, 0.5, 0.75, 1}
		mean := make([]float64, len(at))
		trials, repeats := 0, 0
		for seed := range *seeds {
			rec, err := runOne(t, name, s, seed, *workers, *budget)
			if err != nil {
				return fmt.Errorf("%s, seed %d: %w", name, seed, err)
			}
			trials += rec.Trials
			repeats += rec.Repeats
			reg := t.Regret(rec.epochs)
			for i, f := range at {
				if k := int(f*float64(*budget)) - 1; k < len(reg) {
					mean[i] += reg[k] / float64(*seeds)
				} else if len(reg) > 0 {
					mean[i] += reg[len(reg)-1] / float64(*seeds)
				}
			}
			b, err := json.Marshal(rec)
			if err != nil {
				return err
			}
			bw.Write(b)
			bw.WriteByte('\n')
		}
		fmt.Fprintf(stderr, "%-26s %d seeds in %8v; mean regret at 10/25/50/75/100%% of the budget: %.4f %.4f %.4f %.4f %.4f; repeats %.1f%% of %d trials\n",
			name, *seeds, time.Since(began).Round(time.Millisecond), mean[0], mean[1], mean[2], mean[3], mean[4],
			100*float64(repeats)/float64(max(trials, 1)), trials)
	}
	return bw.Flush()
}

func runOne(t *replay.Table, name string, s spec.Searcher, seed, workers, budget int) (*record, error) {
	began := time.Now()
	sr, err := search.New(t.Experiment(s, budget), uint64(seed))
	if err != nil {
		return nil, err
	}
	res, err := replay.Run(t, sr, replay.Options{Workers: workers, BudgetEpochs: budget})
	if err != nil {
		return nil, err
	}
	rec := &record{Table: t.Name, Method: name, Seed: seed, Workers: workers, BudgetEpochs: budget, Trials: res.Trials}
	rec.epochs = res.Trace
	configOf := map[int64]int{}
	for _, e := range res.Trace {
		configOf[e.Trial] = e.Config
	}
	seen := map[int]bool{}
	for id := int64(1); id <= int64(res.Trials); id++ {
		c, ok := configOf[id]
		if !ok {
			continue // created but never trained an epoch within the budget
		}
		if seen[c] {
			rec.Repeats++
		}
		seen[c] = true
	}
	for _, e := range res.Trace {
		rec.Trace = append(rec.Trace, [3]float64{float64(e.Config), float64(e.Epoch), e.Time})
	}
	rec.Seconds = time.Since(began).Seconds()
	return rec, nil
}

// parseSearcher reads a searcher as an experiment file's searcher field, by
// the parser the server uses (so that defaults and checks are the same).
func parseSearcher(text string) (spec.Searcher, error) {
	file := "name: m\nobjective: loss\nhyperparameters: {x: {type: float, min: 0, max: 1}}\nsearcher: " + text + "\n"
	e, err := spec.Parse("--searcher", []byte(file))
	if err != nil {
		return spec.Searcher{}, err
	}
	return e.Searcher, nil
}
