// Command search measures Virga's experiment policies on a search: an
// experiment of 200 trials, TPE with ASHA in promote mode, on the
// digits-mlp learning-curve table (bench/search/tables), run by the
// simulator (internal/sim) on a spot pool replaying each real availability
// trace plus an on-demand pool, from evenly spaced start offsets of every
// trace, with deadlines of 1.25x, 1.5x and 2x the on-demand-only makespan.
// It prints the cost relative to on-demand only and the fraction of
// deadlines met per policy as a markdown table, and writes every run as
// JSON lines.
//
//	go run ./bench/capacity/search -data ../shared/data/skypilot-spot-traces/availability -out bench/capacity/results/search
//
// -phase and -seed-base give a held-out set of runs (other start offsets,
// other searcher seeds); -policies runs only some of the policies.
//
// Time scale: the table's median epoch (13 ms on the machine that made it)
// lasts -epoch (2 minutes) on a p3.2xlarge, every epoch scaled by the same
// factor, so the search is about 90 node-hours of on-demand work (7-8 hours
// on 16 nodes).
package main

import (
	"flag"
	"fmt"
	"log"
	"math"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/bench/capacity/benchio"
	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/capacity/trace"
	"github.com/virga-ml/virga/internal/schedule"
	"github.com/virga-ml/virga/internal/search/replay"
	"github.com/virga-ml/virga/internal/sim"
	"github.com/virga-ml/virga/internal/spec"
)

type run struct {
	Trace     string  `json:"trace"`
	Offset    float64 `json:"offset_h"`
	Seed      uint64  `json:"seed"`
	Factor    float64 `json:"deadline_x"`
	Policy    string  `json:"policy"`
	Cost      float64 `json:"cost"`
	Relative  float64 `json:"relative"` // cost / on-demand-only cost
	Met       bool    `json:"met"`
	Makespan  float64 `json:"makespan_h"`
	Deadline  float64 `json:"deadline_h"`
	Preempt   int     `json:"preemptions"`
	LostH     float64 `json:"lost_h"`
	SpotH     float64 `json:"spot_node_h"`
	OnDemandH float64 `json:"on_demand_node_h"`
	Best      float64 `json:"best"`
	Trials    int     `json:"trials"`
}

func main() {
	data := flag.String("data", "../shared/data/skypilot-spot-traces/availability", "directory of availability traces (searched recursively)")
	expFile := flag.String("experiment", "bench/search/tables/digits-mlp.yaml", "experiment file")
	tableFile := flag.String("table", "bench/search/tables/digits-mlp.json.gz", "learning-curve table")
	out := flag.String("out", "", "directory for runs.jsonl and results.md (empty: print only)")
	offsets := flag.Int("offsets", 10, "start offsets per trace")
	epoch := flag.Duration("epoch", 2*time.Minute, "time of the table's median epoch on a node")
	nodes := flag.Int("nodes", 16, "nodes of each pool")
	overhead := flag.Duration("overhead", 3*time.Minute, "restart overhead")
	spot := flag.Float64("spot-price", 0.918, "spot price per node-hour (p3.2xlarge us-east-1)")
	od := flag.Float64("on-demand-price", 3.06, "on-demand price per node-hour (p3.2xlarge)")
	margin := flag.Float64("margin", 0, "share of the on-demand time still needed the safety net keeps in hand (0: the default)")
	factorList := flag.String("factors", "1.25,1.5,2", "deadlines as multiples of the on-demand-only makespan")
	phase := flag.Float64("phase", 0, "shift of the start offsets, as a fraction of their spacing (0: the offsets Virga's policy was tuned on; 0.5: halfway between them)")
	seedBase := flag.Uint64("seed-base", 0, "the searcher's seed at offset k is seed-base+k+1")
	policyList := flag.String("policies", "", "comma-separated policies to run besides on-demand (empty: all)")
	engine := flag.String("engine", "legacy", "what runs each experiment: legacy (the simulator's own lifecycle) or loop (Virga's control loop, sim.RunLoop)")
	flag.Parse()
	runExperiment := sim.RunExperiment
	switch *engine {
	case "legacy":
	case "loop":
		runExperiment = sim.RunLoop
	default:
		log.Fatalf("-engine %q: want legacy or loop", *engine)
	}

	e, src, err := spec.Load(*expFile)
	if err != nil {
		log.Fatal(err)
	}
	tb, err := replay.Load(*tableFile)
	if err != nil {
		log.Fatal(err)
	}
	curves, err := sim.NewCurves(tb, e, *expFile, src)
	if err != nil {
		log.Fatal(err)
	}
	curves.ScaleTo(*epoch)
	var factors []float64
	for _, f := range strings.Split(*factorList, ",") {
		x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(x > 0) {
			log.Fatalf("-factors: %q is not a positive number", f)
		}
		factors = append(factors, x)
	}
	traces, err := load(*data)
	if err != nil {
		log.Fatal(err)
	}
	node := virga.Resources{CPU: 8, MemoryMB: 61 * 1024, GPU: 1}
	onDemand := &capacity.Pool{Name: "on-demand", Node: node, MaxNodes: *nodes, Market: spec.OnDemand,
		Billing: capacity.PerSecond, RestartOverhead: *overhead, PriceSeries: capacity.Constant(*od), OnDemandSeries: capacity.Constant(*od)}
	policies := func() []schedule.ExperimentPolicy {
		all := []schedule.ExperimentPolicy{schedule.ExpOnDemandOnly{}, schedule.ExpGreedy{}, schedule.ExpUniformProgress{}, schedule.ExpUniformProgress{Plain: true}, &schedule.ExpPlanned{}}
		if *policyList == "" {
			return all
		}
		keep := all[:1]
		for _, p := range all[1:] {
			for _, n := range strings.Split(*policyList, ",") {
				if strings.TrimSpace(n) == p.Name() {
					keep = append(keep, p)
				}
			}
		}
		return keep
	}
	names := []string{}
	for _, p := range policies() {
		names = append(names, p.Name())
	}

	type job struct {
		tr     *loaded
		offset time.Duration
		seed   uint64
	}
	var jobs []job
	for _, tr := range traces {
		span := time.Duration(len(tr.a.Count)) * tr.a.Tick
		for k := range *offsets {
			at := time.Duration((float64(k) + *phase) / float64(*offsets) * float64(span))
			jobs = append(jobs, job{tr, at, *seedBase + uint64(k+1)})
		}
	}
	started := time.Now()
	runs := make([][]run, len(jobs))
	var wg sync.WaitGroup
	next := make(chan int)
	var failed error
	var mu sync.Mutex
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ps := policies()
			for i := range next {
				jb := jobs[i]
				pools := []*capacity.Pool{{Name: "spot", Node: node, MaxNodes: *nodes, Market: spec.Spot, Billing: capacity.PerSecond,
					Warning: 2 * time.Minute, RestartOverhead: *overhead, PriceSeries: capacity.Constant(*spot),
					OnDemandSeries: capacity.Constant(*od), Preemption: jb.tr.model}, onDemand}
				// The reference: on-demand capacity only, without a deadline
				// (placed on the first pool with room: the on-demand pool
				// alone).
				cfg := sim.ExperimentConfig{Spec: e, File: *expFile, Data: src, Seed: jb.seed, Curves: curves, Pools: []*capacity.Pool{onDemand},
					TraceOffset: jb.offset, Deadline: -1, Margin: *margin, Policy: schedule.ExpOnDemandOnly{}}
				base, err := runExperiment(cfg)
				cfg.Pools = pools
				if err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
					continue
				}
				for _, f := range factors {
					cfg.Deadline = time.Duration(f * float64(base.Makespan))
					for _, p := range ps {
						cfg.Policy = p
						r, err := runExperiment(cfg)
						if err != nil {
							mu.Lock()
							failed = err
							mu.Unlock()
							continue
						}
						rr := run{Trace: jb.tr.name, Offset: jb.offset.Hours(), Seed: jb.seed, Factor: f, Policy: p.Name(), Cost: r.Cost,
							Relative: r.Cost / base.Cost, Met: r.Met, Makespan: r.Makespan.Hours(), Deadline: r.Deadline.Hours(),
							Preempt: r.Preemptions, LostH: r.Lost.Hours(), Trials: r.Trials}
						for _, u := range r.Pools {
							if u.Spot {
								rr.SpotH += u.NodeHours
							} else {
								rr.OnDemandH += u.NodeHours
							}
						}
						if r.Best != nil {
							rr.Best = r.Best.Value
						}
						runs[i] = append(runs[i], rr)
					}
				}
			}
		}()
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	if failed != nil {
		log.Fatal(failed)
	}
	elapsed := time.Since(started)

	var all []run
	for _, rs := range runs {
		all = append(all, rs...)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s, %d trials, %d at a time) on %s, median epoch %s; %d traces x %d offsets, %d spot + %d on-demand nodes,"+
		" offsets at phase %g, seeds %d+k; overhead %s, spot $%.3f/h, on-demand $%.2f/h; %d runs in %s\n\n",
		e.Name, e.Searcher.Name, e.MaxTrials, e.MaxConcurrent, tb.Name, *epoch, len(traces), *offsets, *nodes, *nodes,
		*phase, *seedBase+1, *overhead, *spot, *od, len(all), elapsed.Round(time.Second))
	fmt.Fprintf(&b, "Mean cost relative to on-demand only (fraction of deadlines met)\n\n| deadline |")
	for _, n := range names {
		fmt.Fprintf(&b, " %s |", n)
	}
	fmt.Fprintf(&b, " best baseline | Virga vs best |\n|---|")
	for range names {
		fmt.Fprintf(&b, "---|")
	}
	fmt.Fprintf(&b, "---|---|\n")
	for _, f := range factors {
		fmt.Fprintf(&b, "| %gx |", f)
		best, virga := math.Inf(1), 0.0
		for _, name := range names {
			sum, met, n := 0.0, 0, 0
			for _, r := range all {
				if r.Factor == f && r.Policy == name {
					sum += r.Relative
					n++
					if r.Met {
						met++
					}
				}
			}
			mean := sum / float64(max(n, 1))
			fmt.Fprintf(&b, " %.3f (%.1f%%) |", mean, 100*float64(met)/float64(max(n, 1)))
			if name == "virga" {
				virga = mean
			} else {
				best = min(best, mean)
			}
		}
		fmt.Fprintf(&b, " %.3f | %+.1f%% |\n", best, 100*(virga-best)/best)
	}
	// What the search found, and what on-demand only took: a policy that
	// runs fewer trials at once changes the path of an asynchronous search
	// (it promotes fewer trials), so cost and quality go together.
	fmt.Fprintf(&b, "\nMean best %s found (the table's best final value: %.4f; lower is better) and mean node-hours (spot + on-demand)\n\n| deadline |", tb.Metric, tb.BestFinal())
	for _, n := range names {
		fmt.Fprintf(&b, " %s |", n)
	}
	fmt.Fprintf(&b, "\n|---|")
	for range names {
		fmt.Fprintf(&b, "---|")
	}
	fmt.Fprintf(&b, "\n")
	for _, f := range factors {
		fmt.Fprintf(&b, "| %gx |", f)
		for _, name := range names {
			sum, hours, n := 0.0, 0.0, 0
			for _, r := range all {
				if r.Factor == f && r.Policy == name {
					sum += r.Best
					hours += r.SpotH + r.OnDemandH
					n++
				}
			}
			fmt.Fprintf(&b, " %.4f, %.0f h |", sum/float64(max(n, 1)), hours/float64(max(n, 1)))
		}
		fmt.Fprintf(&b, "\n")
	}
	var spans []float64
	for _, r := range all {
		if r.Policy == "on-demand" && r.Factor == factors[0] {
			spans = append(spans, r.Makespan)
		}
	}
	sort.Float64s(spans)
	if len(spans) > 0 {
		fmt.Fprintf(&b, "\nOn-demand only: makespan %.1f-%.1f h (median %.1f h) over the seeds.\n", spans[0], spans[len(spans)-1], spans[len(spans)/2])
	}
	fmt.Print(b.String())
	if *out == "" {
		return
	}
	if err := benchio.Write(*out, all, b.String()); err != nil {
		log.Fatal(err)
	}
}

type loaded struct {
	name  string
	a     *trace.Availability
	model *capacity.Preemption
}

func load(dir string) ([]*loaded, error) {
	traces, err := benchio.Traces(dir)
	if err != nil {
		return nil, err
	}
	out := make([]*loaded, 0, len(traces))
	for _, a := range traces {
		m, err := capacity.ReplayTrace(a.Availability, 1, 0, false)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a.Name, err)
		}
		out = append(out, &loaded{name: a.Name, a: a.Availability, model: m})
	}
	return out, nil
}
