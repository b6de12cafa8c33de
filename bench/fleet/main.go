// Command fleet compares fleet policies on a day of simulated serving: cost
// per million requests, share of requests answered within the objective and
// availability, for fleets of several sizes at the peak, on the Azure LLM
// inference trace (scaled and tiled to a day under a diurnal envelope) and
// on Poisson arrivals, with spot availability replayed from real traces.
//
//	go run ./bench/fleet -data ../shared/data
//
// README.md describes the setup and records the figures.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/capacity/trace"
	"github.com/virga-ml/virga/internal/fleet"
	"github.com/virga-ml/virga/internal/fleet/sim"
	"github.com/virga-ml/virga/internal/serve/loadgen"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench/fleet:", err)
		os.Exit(1)
	}
}

type options struct {
	data, capacityFile, zonesDir string
	sizes                        []int
	seeds, from                  int
	hours                        float64
	service, objective           time.Duration
	slots                        int
	set                          string
	virga                        fleet.Virga
	workers                      int
	traces                       []string
	policies                     []string
}

func parse(args []string) (*options, error) {
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	o := &options{}
	fs.StringVar(&o.data, "data", "../shared/data", "the shared traces directory")
	fs.StringVar(&o.capacityFile, "capacity", "examples/capacity/aws-p3.yaml", "capacity file whose spot and on-demand pools give the prices, the reclaim warning and the start-up time")
	fs.StringVar(&o.zonesDir, "zones", "skypilot-spot-traces/availability/1-node/aws-02-15-2023", "directory of spot availability traces (one zone each), under -data")
	sizes := fs.String("sizes", "10,25,50", "fleet sizes at the peak (replicas)")
	fs.IntVar(&o.seeds, "seeds", 3, "seeds per size and trace (each with its own start offset in the spot traces)")
	fs.IntVar(&o.from, "from", 1, "first seed of the set to run (-set heldout -from 4: seeds 104 on)")
	fs.StringVar(&o.set, "set", "heldout", "seed set: tune (seeds 1..N, the ones Virga's defaults were chosen on) or heldout (seeds 101..100+N)")
	fs.Float64Var(&o.hours, "hours", 24, "measured hours per run (after one hour of warm-up)")
	fs.DurationVar(&o.service, "service", 2*time.Second, "one request's service time on a replica")
	fs.IntVar(&o.slots, "slots", 4, "requests a replica serves at once")
	fs.DurationVar(&o.objective, "objective", 5*time.Second, "latency objective")
	fs.DurationVar(&o.virga.DownHold, "virga-hold", 0, "Virga's DownHold (0: its default)")
	fs.DurationVar(&o.virga.StableAfter, "virga-stable", 0, "Virga's StableAfter (0: every available zone counts; positive: only zones up that long)")
	fs.DurationVar(&o.virga.Burst, "virga-burst", 0, "Virga's Burst window (0: its default)")
	fs.Float64Var(&o.virga.Headroom, "virga-headroom", 0, "Virga's Headroom (fraction added to the forecast)")
	fs.BoolVar(&o.virga.Even, "virga-even", false, "Virga spreads spot evenly over the zones (reclaim rate breaks ties) rather than by risk")
	fs.Float64Var(&o.virga.Budget, "virga-budget", 0, "Virga's Budget, the expected share of the load lost to reclaims (0: its default; negative: survive losing the largest zone)")
	fs.IntVar(&o.workers, "workers", 2, "runs simulated at once")
	traces := fs.String("traces", "azure,poisson", "arrival processes: azure, poisson")
	policies := fs.String("policies", "fixed,reactive,spothedge,spothedge+2/od,spothedge+6,spothedge+12,virga",
		"policies to run: fixed, reactive, virga, spothedge+E (N_extra = E; spothedge is spothedge+2), spothedge+E/od (on-demand also covers the N_extra, as sky/serve's dynamic fallback)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-sizes: %q is not a positive number of replicas", s)
		}
		o.sizes = append(o.sizes, n)
	}
	o.traces = strings.Split(*traces, ",")
	for _, t := range o.traces {
		if t != "azure" && t != "poisson" {
			return nil, fmt.Errorf("-traces: %q is not azure or poisson", t)
		}
	}
	o.policies = strings.Split(*policies, ",")
	for _, p := range o.policies {
		if _, err := policyFor(p, o); err != nil {
			return nil, err
		}
	}
	if o.set != "tune" && o.set != "heldout" {
		return nil, fmt.Errorf("-set: %q is not tune or heldout", o.set)
	}
	if o.seeds < 1 || o.from < 1 || o.hours <= 0 || o.workers < 1 {
		return nil, errors.New("-seeds, -from, -hours and -workers must be positive")
	}
	return o, nil
}

// policyFor returns the policy named name (fixed is sized per run, so its N
// is left 0 here).
func policyFor(name string, o *options) (fleet.Policy, error) {
	switch name {
	case "fixed":
		return fleet.Fixed{}, nil
	case "reactive":
		return fleet.Reactive{}, nil
	case "virga":
		return o.virga, nil
	case "spothedge":
		return fleet.SpotHedge{Extra: 2}, nil
	}
	rest, ok := strings.CutPrefix(name, "spothedge+")
	if ok {
		h := fleet.SpotHedge{}
		rest, h.FallbackExtra = strings.CutSuffix(rest, "/od")
		n, err := strconv.Atoi(rest)
		if err == nil && n >= 0 {
			h.Extra = n
			return h, nil
		}
	}
	return nil, fmt.Errorf("-policies: %q is not fixed, reactive, virga, spothedge, spothedge+E or spothedge+E/od", name)
}

// seedsOf returns n seed numbers of a set from its from-th: the tuning set
// is 1, 2, ..., the held-out set 101, 102, ....
func seedsOf(set string, from, n int) []int {
	base := 0
	if set == "heldout" {
		base = 100
	}
	out := make([]int, n)
	for i := range out {
		out[i] = base + from + i
	}
	return out
}

// offsetOf is where seed starts in the spot traces: the same for every size,
// trace and policy of that seed.
func offsetOf(seed int, tick, room time.Duration) time.Duration {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x0ff5e7))
	return time.Duration(rng.Int64N(int64(room/tick))) * tick
}

// setup is what every run shares.
type setup struct {
	spotPrice, odPrice float64
	warning, startUp   time.Duration
	zones              map[string]*trace.Availability
	zoneNames          []string
	azure              loadgen.Arrivals
	capacity           float64
}

func load(o *options) (*setup, error) {
	set, err := capacity.LoadFile(o.capacityFile)
	if err != nil {
		return nil, err
	}
	st := &setup{zones: map[string]*trace.Availability{}}
	for _, p := range set.Pools {
		if p.Spot() && st.spotPrice == 0 {
			st.spotPrice, st.warning, st.startUp = p.Price(time.Time{}), p.Warning, p.RestartOverhead
		}
		if !p.Spot() && st.odPrice == 0 {
			st.odPrice = p.Price(time.Time{})
		}
	}
	if st.spotPrice == 0 || st.odPrice == 0 {
		return nil, fmt.Errorf("%s: want a spot and an on-demand pool with prices", o.capacityFile)
	}
	files, err := filepath.Glob(filepath.Join(o.data, o.zonesDir, "*.json"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no availability traces in %s", filepath.Join(o.data, o.zonesDir))
	}
	sort.Strings(files)
	for _, f := range files {
		a, err := trace.ReadAvailability(f)
		if err != nil {
			return nil, err
		}
		st.zones[a.Zone] = a
		st.zoneNames = append(st.zoneNames, a.Zone)
	}
	for _, name := range []string{"AzureLLMInferenceTrace_code.csv", "AzureLLMInferenceTrace_conv.csv"} {
		path := filepath.Join(o.data, "azure-llm-inference-trace-2023", "data", name)
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		a, err := loadgen.ReadAzure(f, path)
		f.Close()
		if err != nil {
			return nil, err
		}
		st.azure = append(st.azure, a...)
	}
	// The two files start within two minutes of each other; merged, they
	// are the hour's whole arrival process.
	slices.Sort(st.azure)
	st.capacity, err = sim.MeasureCapacity(o.service, o.slots, o.objective, 0.999, 4*time.Hour, 1)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// envelope is the diurnal shape of the load: 0.2 of the peak at midnight,
// the peak at noon.
func envelope(t time.Duration) float64 {
	return 0.6 - 0.4*math.Cos(2*math.Pi*t.Hours()/24)
}

// arrivals returns the run's arrivals: peak requests/s at the envelope's
// top, thinned under the envelope. Azure's hour is first compressed to that
// peak rate (bursts kept, the clock faster) and tiled.
func arrivals(kind string, st *setup, peak float64, span time.Duration, rng *rand.Rand) []time.Duration {
	var base []time.Duration
	switch kind {
	case "azure":
		hour := st.azure.Scale(peak)
		period := hour[len(hour)-1] + time.Duration(float64(time.Second)/peak)
		for off := time.Duration(0); off < span; off += period {
			for _, a := range hour {
				if off+a < span {
					base = append(base, off+a)
				}
			}
		}
	default:
		base = loadgen.Poisson(rng, peak, int(peak*span.Seconds()*1.01))
	}
	out := base[:0]
	for _, a := range base {
		if a < span && rng.Float64() < envelope(a) {
			out = append(out, a)
		}
	}
	return out
}

// peakMinute is the highest arrival rate over a one-minute window.
func peakMinute(arr []time.Duration) float64 {
	best, j := 0, 0
	for i := range arr {
		for arr[i]-arr[j] >= time.Minute {
			j++
		}
		best = max(best, i-j+1)
	}
	return float64(best) / 60
}

type job struct {
	size   int
	kind   string
	seed   int
	policy string
}

type outcome struct {
	job
	res *sim.Result
	err error
}

func run(args []string, w io.Writer) error {
	o, err := parse(args)
	if err != nil {
		return err
	}
	st, err := load(o)
	if err != nil {
		return err
	}
	warm := time.Hour
	span := warm + time.Duration(o.hours*float64(time.Hour))
	traceSpan := time.Duration(math.MaxInt64)
	for _, a := range st.zones {
		traceSpan = min(traceSpan, a.Duration())
	}
	fmt.Fprintf(w, "replica: %d slots x %v per request, objective %v; measured capacity %.3f requests/s at 99.9%% within the objective (one replica, Poisson)\n",
		o.slots, o.service, o.objective, st.capacity)
	fmt.Fprintf(w, "prices (%s): spot $%.3f/h, on-demand $%.3f/h; start-up %v; reclaim warning %v; %d spot zones (%s)\n",
		o.capacityFile, st.spotPrice, st.odPrice, st.startUp, st.warning, len(st.zoneNames), o.zonesDir)
	fmt.Fprintf(w, "%v measured after %v warm-up; %d seeds per size and trace\n", span-warm, warm, o.seeds)
	tick := st.zones[st.zoneNames[0]].Tick
	for _, set := range []string{"tune", "heldout"} {
		var parts []string
		for _, seed := range seedsOf(set, o.from, o.seeds) {
			parts = append(parts, fmt.Sprintf("%d (day %.1f)", seed, offsetOf(seed, tick, traceSpan-span).Hours()/24))
		}
		label := map[string]string{"tune": "tuning set", "heldout": "held-out set"}[set]
		mark := ""
		if set == o.set {
			mark = "  <- this run"
		}
		fmt.Fprintf(w, "%s: seeds (start in the spot traces) %s%s\n", label, strings.Join(parts, ", "), mark)
	}
	fmt.Fprintln(w)

	var jobs []job
	for _, size := range o.sizes {
		for _, kind := range o.traces {
			for _, seed := range seedsOf(o.set, o.from, o.seeds) {
				for _, p := range o.policies {
					jobs = append(jobs, job{size, kind, seed, p})
				}
			}
		}
	}
	results := make([]outcome, len(jobs))
	var wg sync.WaitGroup
	next := make(chan int)
	for range o.workers {
		wg.Go(func() {
			for i := range next {
				res, err := simulate(o, st, jobs[i], span, warm, traceSpan)
				results[i] = outcome{jobs[i], res, err}
			}
		})
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, r := range results {
		if r.err != nil {
			return r.err
		}
	}
	report(w, o, results)
	return nil
}

func simulate(o *options, st *setup, j job, span, warm, traceSpan time.Duration) (*sim.Result, error) {
	seed := uint64(j.size)*1000 + uint64(j.seed)
	if j.kind == "poisson" {
		seed += 500
	}
	rng := rand.New(rand.NewPCG(seed, 0xa771))
	peak := float64(j.size) * st.capacity
	arr := arrivals(j.kind, st, peak, span, rng)
	offset := offsetOf(j.seed, st.zones[st.zoneNames[0]].Tick, traceSpan-span)
	p, err := policyFor(j.policy, o)
	if err != nil {
		return nil, err
	}
	if j.policy == "fixed" {
		p = fleet.Fixed{N: int(math.Ceil(peakMinute(arr) / st.capacity))}
	}
	pools := []fleet.Pool{{Name: "on-demand", Price: st.odPrice}}
	for _, z := range st.zoneNames {
		pools = append(pools, fleet.Pool{Name: "spot-" + z, Zone: z, Spot: true, Price: st.spotPrice})
	}
	return sim.Run(sim.Config{
		Arrivals: arr, Duration: span, WarmUp: warm,
		Pools: pools, Zones: st.zones, Offset: offset, Warning: st.warning,
		StartUp: st.startUp, Service: o.service, Slots: o.slots, Objective: o.objective,
		Capacity: st.capacity, Policy: p, Seed: seed,
		Epoch: time.Date(2023, 2, 15, 0, 0, 0, 0, time.UTC).Add(offset),
	})
}

// objective is the share within the latency objective a policy must reach
// to count as meeting it.
const objective = 0.999

func report(w io.Writer, o *options, results []outcome) {
	type key struct {
		size   int
		kind   string
		policy string
	}
	type agg struct {
		cost, share, avail, od, minShare float64
		preempt, n                       int
	}
	aggs := map[key]*agg{}
	for _, r := range results {
		k := key{r.size, r.kind, r.policy}
		a := aggs[k]
		if a == nil {
			a = &agg{minShare: 1}
			aggs[k] = a
		}
		a.cost += r.res.CostPerMillion()
		a.share += r.res.Share()
		a.minShare = math.Min(a.minShare, r.res.Share())
		a.avail += r.res.Availability()
		a.od += r.res.OnDemandShare
		a.preempt += r.res.Preemptions
		a.n++
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "peak\ttrace\tpolicy\t$/M req\twithin objective\t(worst seed)\tavailability\ton-demand $\tpreemptions\t")
	for _, size := range o.sizes {
		for _, kind := range o.traces {
			for _, p := range o.policies {
				a := aggs[key{size, kind, p}]
				n := float64(a.n)
				fmt.Fprintf(tw, "%d\t%s\t%s\t%.2f\t%.4f%%\t%.4f%%\t%.2f%%\t%.0f%%\t%.1f\t\n", size, kind, p,
					a.cost/n, 100*a.share/n, 100*a.minShare, 100*a.avail/n, 100*a.od/n, float64(a.preempt)/n)
			}
			a := aggs[key{size, kind, "virga"}]
			if a == nil {
				continue
			}
			// SpotHedge's strongest variant: the cheapest meeting the
			// objective, else the one answering most in time.
			base, other := "", ""
			for _, p := range o.policies {
				b := aggs[key{size, kind, p}]
				meets := b.share/float64(b.n) >= objective
				if strings.HasPrefix(p, "spothedge") {
					if bb := aggs[key{size, kind, base}]; base == "" || meets && (bb.share/float64(bb.n) < objective || b.cost < bb.cost) ||
						!meets && bb.share/float64(bb.n) < objective && b.share > bb.share {
						base = p
					}
				}
				if p != "virga" && meets {
					if ob := aggs[key{size, kind, other}]; other == "" || b.cost < ob.cost {
						other = p
					}
				}
			}
			var cmps []string
			if base != "" {
				cmps = append(cmps, base)
			}
			if other != "" && other != base {
				cmps = append(cmps, other)
			}
			for _, cmp := range cmps {
				b := aggs[key{size, kind, cmp}]
				fmt.Fprintf(tw, "\t\tvirga vs %s\t%+.1f%%\t%+.4f pts\t\t\t\t\t\n", cmp, 100*(a.cost/b.cost-1), 100*(a.share-b.share)/float64(a.n))
			}
		}
	}
	tw.Flush()
}
