// Command gentable builds the tabular hyperparameter-search benchmarks of
// bench/search/tables: it trains every configuration of a table's grid to the
// last epoch, recording the validation loss and the wall time of each epoch,
// and writes the table in the layout of bench/search/FORMAT.md. It trains for
// real and never writes a table it did not finish.
//
// Run from the module root (about 3 minutes on 2 cores):
//
//	go run ./bench/search/gentable --table digits-mlp
//
// The xgboost table comes from bench/search/gentable_xgb.py; see
// bench/search/tables/README.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/virga-ml/virga/examples/digits-go/mlp"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are gentable's flags.
type options struct {
	table   string
	out     string
	data    string
	workers int
}

// builders are the tables this program can build, by name.
var builders = map[string]func(o options, progress io.Writer) (*Table, error){
	"digits-mlp":    buildDigits,
	"digits-mlp-e0": buildDigitsE0,
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gentable", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.table, "table", "digits-mlp", "the table to build: "+strings.Join(tableNames(), ", "))
	fs.StringVar(&o.out, "out", "", "where to write it (default bench/search/tables/<table>.json.gz)")
	fs.StringVar(&o.data, "data", mlp.DefaultDataPath, "the digits data set; the default is looked for in the working directory and its parents")
	fs.IntVar(&o.workers, "workers", 2, "configurations trained at once (1 or 2; each epoch's time is measured under this load)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	build, ok := builders[o.table]
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "gentable: unexpected argument %q (all settings are flags)\n", fs.Arg(0))
		return 2
	case !ok:
		fmt.Fprintf(stderr, "gentable: --table %q: want one of %s\n", o.table, strings.Join(tableNames(), ", "))
		return 2
	case o.workers < 1 || o.workers > 2:
		fmt.Fprintf(stderr, "gentable: --workers %d: want 1 or 2 (the tables are measured on 2 cores)\n", o.workers)
		return 2
	}
	if o.out == "" {
		o.out = "bench/search/tables/" + o.table + ".json.gz"
	}

	began := time.Now()
	t, err := build(o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "gentable: %v\n", err)
		return 1
	}
	if err := t.WriteFile(o.out); err != nil {
		fmt.Fprintf(stderr, "gentable: %v\n", err)
		return 1
	}
	best, bestAt := bestFinal(t)
	info, _ := os.Stat(o.out)
	fmt.Fprintf(stdout, "%s: %d configurations x %d epochs in %s; best final %s %.5g (config %d: %v); wrote %s (%d bytes)\n",
		t.Name, len(t.Configs), t.Epochs, time.Since(began).Round(time.Second), t.Metric, best, bestAt,
		formatHParams(t.Configs[bestAt].HParams), o.out, info.Size())
	return 0
}

func tableNames() []string {
	var names []string
	for n := range builders {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// buildDigits trains the digits-mlp grid.
func buildDigits(o options, progress io.Writer) (*Table, error) {
	return buildDigitsTable(o, progress, false)
}

// buildDigitsE0 trains the digits-mlp-e0 grid: the digits-mlp grid whose
// first reported epoch is the untrained network (the trainer validates
// before its first training pass and reports it as step 1), followed by 26
// training epochs, as trainers that log "epoch 0" do.
func buildDigitsE0(o options, progress io.Writer) (*Table, error) {
	return buildDigitsTable(o, progress, true)
}

func buildDigitsTable(o options, progress io.Writer, untrainedFirst bool) (*Table, error) {
	load := mlp.LoadDefault
	if o.data != mlp.DefaultDataPath {
		load = func() (*mlp.Dataset, error) { return mlp.LoadDataset(o.data) }
	}
	ds, err := load()
	if err != nil {
		return nil, err
	}
	t := &Table{
		Name:      o.table,
		Model:     "one-hidden-layer MLP (examples/digits-go), SGD with momentum 0.9, seed 1",
		Dataset:   fmt.Sprintf("digits (examples/data/digits.csv.gz, a copy of ../shared/data/digits/digits.csv.gz), fixed split seed 42: %d train / %d val", len(ds.TrainX), len(ds.ValX)),
		Command:   "go run ./bench/search/gentable --table " + o.table + " --workers " + fmt.Sprint(o.workers),
		Metric:    "val_loss",
		Direction: "minimize",
		Epochs:    digitsEpochs,
		Notes: fmt.Sprintf("Each configuration is `go run ./examples/digits-go --lr LR --hidden H --l2 L2 --batch B --momentum %g --seed %d --epochs %d`; "+
			"val_loss is the mean validation cross-entropy after each epoch, a diverged run's (NaN, or above %g) recorded as %g. "+
			"seconds: wall time of the epoch's training pass plus validation, %d configurations trained at once on a 2-core machine.",
			digitsMomentum, digitsSeed, digitsEpochs, lossCap, lossCap, o.workers),
		Space: digitsSpace(),
	}
	if untrainedFirst {
		t.Model += "; epoch 1 is the untrained network"
		t.Notes += fmt.Sprintf(" Epoch 1 is the untrained network (validation only, before any training pass); epochs 2..%d follow %d training passes.", digitsEpochs, digitsEpochs-1)
	}
	grid := Grid(t.Space)
	t.Configs = make([]Config, len(grid))
	forEach(len(grid), o.workers, progress, func(i int) {
		curve, secs := trainDigits(ds, digitsSettings(grid[i]), t.Epochs, untrainedFirst)
		t.Configs[i] = Config{HParams: grid[i], Curve: curve, Seconds: secs}
	})
	return t, nil
}

// forEach calls do(0..n-1) on workers goroutines, printing a progress line
// to progress about every 5% of the way.
func forEach(n, workers int, progress io.Writer, do func(i int)) {
	began := time.Now()
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for range workers {
		wg.Go(func() {
			for i := range next {
				do(i)
				mu.Lock()
				done++
				if step := max(n/20, 1); done%step == 0 || done == n {
					el := time.Since(began)
					eta := time.Duration(float64(el) / float64(done) * float64(n-done))
					fmt.Fprintf(progress, "%4d/%d configurations  %s elapsed  ~%s left\n",
						done, n, el.Round(time.Second), eta.Round(time.Second))
				}
				mu.Unlock()
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// bestFinal returns the best last-epoch value of t and its configuration's index.
func bestFinal(t *Table) (best float64, at int) {
	for i, c := range t.Configs {
		v := float64(c.Curve[len(c.Curve)-1])
		if t.Direction == "maximize" {
			v = -v
		}
		if i == 0 || v < best {
			best, at = v, i
		}
	}
	if t.Direction == "maximize" {
		best = -best
	}
	return best, at
}

// formatHParams writes hp as name=value pairs in name order.
func formatHParams(hp map[string]any) string {
	var parts []string
	for k, v := range hp {
		parts = append(parts, fmt.Sprintf("%s=%v", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
