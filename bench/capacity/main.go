// Command capacity measures Virga's single-job deadline policies against
// Can't Be Late's baselines on real spot availability traces: training jobs
// of 12, 24 and 48 hours of on-demand work, deadlines of 1.25x, 1.5x and 2x
// that, started at evenly spaced offsets of every trace, all billed the same
// way. It prints the cost relative to on-demand only and the fraction of
// deadlines met, and writes every run as JSON lines for plotting.
//
//	go run ./bench/capacity -data ../shared/data/skypilot-spot-traces/availability -out bench/capacity/results
package main

import (
	"flag"
	"fmt"
	"log"
	"math"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/virga-ml/virga/bench/capacity/benchio"
	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/schedule"
	"github.com/virga-ml/virga/internal/sim"
)

type run struct {
	Trace    string  `json:"trace"`
	Work     float64 `json:"work_h"`
	Factor   float64 `json:"deadline_x"`
	Offset   int     `json:"offset"`
	Policy   string  `json:"policy"`
	Cost     float64 `json:"cost"`
	Relative float64 `json:"relative"` // cost / on-demand-only cost
	Met      bool    `json:"met"`
	Finish   float64 `json:"finish_h"`
	Preempt  int     `json:"preemptions"`
	LostH    float64 `json:"lost_h"`
}

func main() {
	data := flag.String("data", "../shared/data/skypilot-spot-traces/availability", "directory of availability traces (searched recursively)")
	out := flag.String("out", "", "directory for runs.jsonl and results.md (empty: print only)")
	offsets := flag.Int("offsets", 100, "start offsets per trace")
	overhead := flag.Duration("overhead", 12*time.Minute, "restart overhead")
	ckpt := flag.Duration("checkpoint", 0, "checkpoint interval in work (0: work kept at a reclaim)")
	spot := flag.Float64("spot-price", 0.918, "spot price per node-hour (p3.2xlarge us-east-1)")
	od := flag.Float64("on-demand-price", 3.06, "on-demand price per node-hour (p3.2xlarge)")
	holdout := flag.Bool("holdout", false, "measure each pool's statistics on the first half of its trace and start jobs only in the second half")
	billing := flag.String("billing", "second", "how nodes are billed: second (per second, one-minute minimum) or tick (every trace tick a node is held billed in full, as Can't Be Late's simulator does)")
	startsFlag := flag.String("starts", "", "comma-separated start offsets into every trace (durations such as 0s,36h,100h, rounded up to a tick; counted from the middle with -holdout), instead of -offsets evenly spaced ones")
	flag.Parse()

	starts, err := parseStarts(*startsFlag)
	if err != nil {
		log.Fatalf("-starts: %v", err)
	}
	if *billing != "second" && *billing != "tick" {
		log.Fatalf("-billing %q: want second or tick", *billing)
	}

	traces, err := load(*data, *holdout)
	if err != nil {
		log.Fatal(err)
	}
	planned := &schedule.Planned{}
	policies := []schedule.Policy{schedule.OnDemandOnly{}, schedule.Greedy{}, schedule.UniformProgress{}, schedule.UniformProgress{Plain: true}, planned}
	works := []float64{12, 24, 48}
	factors := []float64{1.25, 1.5, 2}

	type job struct {
		tr     *loaded
		work   float64
		factor float64
		offset int
	}
	var jobs []job
	skipped := 0 // explicit starts too late in a trace for the job's window
	for _, tr := range traces {
		for _, w := range works {
			for _, f := range factors {
				window := int(math.Ceil(w * f * float64(time.Hour) / float64(tr.tick)))
				if window >= len(tr.up)-tr.first {
					continue
				}
				if starts != nil {
					for _, d := range starts {
						at := tr.first + int((d+tr.tick-1)/tr.tick)
						if at+window < len(tr.up) {
							jobs = append(jobs, job{tr, w, f, at})
						} else {
							skipped++
						}
					}
					continue
				}
				for k := 0; k < *offsets; k++ {
					jobs = append(jobs, job{tr, w, f, tr.first + k*(len(tr.up)-tr.first-window)/max(*offsets-1, 1)})
				}
			}
		}
	}
	started := time.Now()
	runs := make([][]run, len(jobs))
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				jb := jobs[i]
				cfg := sim.JobConfig{
					Work: time.Duration(jb.work * float64(time.Hour)), Deadline: time.Duration(jb.work * jb.factor * float64(time.Hour)),
					Overhead: *overhead, Checkpoint: *ckpt, SpotPrice: *spot, OnDemandPrice: *od,
					Billing: capacity.PerSecond, Pool: jb.tr.stats,
				}
				if *billing == "tick" {
					cfg.Billing = capacity.PerTick(jb.tr.tick)
				}
				var base float64
				for _, p := range policies {
					r, err := sim.RunJob(p, jb.tr.up, jb.tr.tick, jb.offset, cfg)
					if err != nil {
						log.Fatal(err)
					}
					if p.Name() == "on-demand" {
						base = r.Cost
					}
					runs[i] = append(runs[i], run{Trace: jb.tr.name, Work: jb.work, Factor: jb.factor, Offset: jb.offset, Policy: p.Name(),
						Cost: r.Cost, Relative: r.Cost / base, Met: r.Met, Finish: r.Finish.Hours(), Preempt: r.Preemptions, LostH: r.Lost.Hours()})
				}
			}
		}()
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(started)

	var all []run
	for _, rs := range runs {
		all = append(all, rs...)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d traces, %d jobs x %d policies in %s; overhead %s, checkpoint %s, spot $%.3f/h, on-demand $%.2f/h, billing per %s, holdout %v",
		len(traces), len(jobs), len(policies), elapsed.Round(time.Millisecond), *overhead, *ckpt, *spot, *od, *billing, *holdout)
	if starts != nil {
		fmt.Fprintf(&b, ", starts %s (%d jobs past a trace's end left out)", *startsFlag, skipped)
	}
	fmt.Fprintf(&b, "\n\n")
	fmt.Fprintf(&b, "Mean cost relative to on-demand only (fraction of deadlines met)\n\n")
	fmt.Fprintf(&b, "| job | deadline |")
	for _, p := range policies {
		fmt.Fprintf(&b, " %s |", p.Name())
	}
	fmt.Fprintf(&b, " best baseline | Virga vs best |\n|---|---|")
	for range policies {
		fmt.Fprintf(&b, "---|")
	}
	fmt.Fprintf(&b, "---|---|\n")
	for _, w := range works {
		for _, f := range factors {
			fmt.Fprintf(&b, "| %gh | %gx |", w, f)
			best, virga := math.Inf(1), 0.0
			for _, p := range policies {
				sum, met, n := 0.0, 0, 0
				for _, r := range all {
					if r.Work == w && r.Factor == f && r.Policy == p.Name() {
						sum += r.Relative
						n++
						if r.Met {
							met++
						}
					}
				}
				mean := sum / float64(n)
				fmt.Fprintf(&b, " %.3f (%.1f%%) |", mean, 100*float64(met)/float64(n))
				if p == schedule.Policy(planned) {
					virga = mean
				} else {
					best = min(best, mean)
				}
			}
			fmt.Fprintf(&b, " %.3f | %+.1f%% |\n", best, 100*(virga-best)/best)
		}
	}
	fmt.Print(b.String())
	if *out == "" {
		return
	}
	if err := benchio.Write(*out, all, b.String()); err != nil {
		log.Fatal(err)
	}
}

// parseStarts reads a comma-separated list of non-negative durations (nil
// for an empty list).
func parseStarts(list string) ([]time.Duration, error) {
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	var out []time.Duration
	for _, f := range strings.Split(list, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%q: want a duration such as 36h: %w", f, err)
		}
		if d < 0 {
			return nil, fmt.Errorf("%q: want a non-negative offset", f)
		}
		out = append(out, d)
	}
	return out, nil
}

type loaded struct {
	first int // first tick a job may start at
	name  string
	up    []bool
	tick  time.Duration
	stats schedule.PoolStats
}

func load(dir string, holdout bool) ([]*loaded, error) {
	traces, err := benchio.Traces(dir)
	if err != nil {
		return nil, err
	}
	out := make([]*loaded, 0, len(traces))
	for _, a := range traces {
		up := make([]bool, a.Len())
		for i := range up {
			up[i] = a.Up(i)
		}
		l := &loaded{name: a.Name, up: up, tick: a.Tick, stats: sim.StatsOf(up, a.Tick)}
		if holdout {
			l.first = len(up) / 2
			l.stats = sim.StatsOf(up[:l.first], a.Tick)
		}
		out = append(out, l)
	}
	return out, nil
}
