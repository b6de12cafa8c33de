package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/batch"
	"github.com/virga-ml/virga/internal/serve/engine"
	"github.com/virga-ml/virga/internal/serve/loadgen"
	"github.com/virga-ml/virga/internal/serve/runtime/mlp"
)

// mmModel is one model of the many-models benchmark.
type mmModel struct {
	name     string
	requests int // in the trace
	share    float64
	hidden   int
	memory   int64 // as the engine accounts it
	static   bool  // in the static baseline's set
}

// mmRequest is one request of the run: its model and its arrival.
type mmRequest struct {
	model string
	at    time.Duration
}

// mmOutcome is what became of one request.
type mmOutcome struct {
	latency time.Duration // from its arrival to its answer
	ok      bool
	reason  string // why it was not answered: a refusal's reason, "Unavailable" or "Error"
}

type mmResult struct {
	Policy      string         `json:"policy"`
	Arrivals    string         `json:"arrivals"`
	Models      int            `json:"models"`
	Requests    int            `json:"requests"`
	Objective   string         `json:"objective"`
	OnTime      int            `json:"on_time"`
	Late        int            `json:"late"`
	NotAnswered map[string]int `json:"not_answered"`
	P50ms       float64        `json:"p50_ms"`
	P99ms       float64        `json:"p99_ms"`
	Loads       int            `json:"loads"`
	LoadsPerMin float64        `json:"loads_per_minute"`
	MeanLoadMs  float64        `json:"mean_load_ms"`
	Evictions   int            `json:"evictions"`
	// The requests for the static set's models, and those answered on time.
	StaticSetRequests int     `json:"static_set_requests"`
	StaticSetOnTime   int     `json:"static_set_on_time"`
	MaxMemory         int64   `json:"max_memory_bytes"`
	Budget            int64   `json:"budget_bytes"`
	Seconds           float64 `json:"seconds"`
}

// manyModels runs the many-models benchmark (see the README): the Alibaba
// GenAI trace's most requested models as real model directories, an engine
// whose memory budget holds about a sixth of them, the trace's requests
// driven through engine.Infer in real time, for the engine's own policy
// (loads on demand, LRU eviction of idle models) and for the static
// baseline (the most popular models that fit, loaded up front; every other
// request refused).
func manyModels(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("manymodels", flag.ContinueOnError)
	data := fs.String("data", "../shared/data", "the shared traces directory")
	count := fs.Int("models", 36, "the most requested models of the trace to serve")
	n := fs.Int("n", 0, "requests: the first n of the trace's requests for those models (0: all)")
	span := fs.Duration("duration", 60*time.Second, "the arrivals' span: the trace's three weeks compressed, or Poisson at the same mean rate")
	arrivals := fs.String("arrivals", "trace", "arrival times: trace (the trace's own timestamps, compressed) or poisson")
	objective := fs.Duration("objective", 100*time.Millisecond, "each request's latency objective (its deadline after arrival)")
	fraction := fs.Float64("budget", 1.0/6, "the memory budget as a fraction of all the models' memory")
	seed := fs.Uint64("seed", 1, "the Poisson arrivals' and the models' weights' seed")
	policies := fs.String("policies", "engine,admit,cost,static", "policies to run: engine (loads on demand, LRU eviction), admit (the same with frequency admission), cost (cost-aware admission and eviction, virga serve's default) and static (the baseline)")
	dir := fs.String("dir", "", "where to write the model repository (default: a new temporary directory, removed after)")
	out := fs.String("out", "", "write each run as a JSON line to this file")
	hiddenFlag := fs.String("hidden", "256,512,1024,2048", "the models' hidden layer sizes, given in turn in popularity order")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var hidden []int
	for _, s := range strings.Split(*hiddenFlag, ",") {
		h, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || h < 1 || h > 1<<16 {
			return fmt.Errorf("-hidden: %q is not a layer size from 1 to 65536", s)
		}
		hidden = append(hidden, h)
	}
	if *arrivals != "trace" && *arrivals != "poisson" {
		return fmt.Errorf("-arrivals %q: want trace or poisson", *arrivals)
	}
	if *fraction <= 0 || *fraction > 1 {
		return fmt.Errorf("-budget %v: want a fraction of the models' memory in (0, 1]", *fraction)
	}

	// 1. The trace: the most requested models, their requests in time order.
	path := filepath.Join(*data, "alibaba-clusterdata", "cluster-trace-v2026-GenAI", "lora_request_trace.csv")
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("the Alibaba GenAI trace (set -data to the shared traces directory): %w", err)
	}
	trace, err := loadgen.ReadAlibabaLoRA(f, path)
	f.Close()
	if err != nil {
		return err
	}
	pops := loadgen.Popularities(trace)
	if len(pops) < *count {
		return fmt.Errorf("-models %d: the trace names %d models", *count, len(pops))
	}
	pops = pops[:*count]
	chosen := map[string]bool{}
	for _, p := range pops {
		chosen[p.Model] = true
	}
	var kept []loadgen.LoRARequest
	for _, r := range trace {
		if chosen[r.Model] {
			kept = append(kept, r)
		}
	}
	sort.SliceStable(kept, func(i, j int) bool { return kept[i].At.Before(kept[j].At) })
	if *n > 0 && *n < len(kept) {
		kept = kept[:*n]
	}
	reqs := make([]mmRequest, len(kept))
	var offsets loadgen.Arrivals
	switch *arrivals {
	case "trace":
		offsets = loadgen.LoRAArrivals(kept, nil)
		total := offsets[len(offsets)-1]
		for i := range offsets {
			offsets[i] = time.Duration(float64(offsets[i]) / float64(total) * float64(*span))
		}
	case "poisson":
		offsets = loadgen.Poisson(rand.New(rand.NewPCG(*seed, 2)), float64(len(kept))/span.Seconds(), len(kept))
	}
	for i, r := range kept {
		reqs[i] = mmRequest{model: r.Model, at: offsets[i]}
	}

	// 2. The models, the budget and the static set.
	root := *dir
	if root == "" {
		if root, err = os.MkdirTemp("", "virga-manymodels-"); err != nil {
			return err
		}
		defer os.RemoveAll(root)
	}
	models := make([]mmModel, len(pops))
	var total int64
	for i, p := range pops {
		m := mmModel{name: p.Model, requests: p.Requests, share: p.Share, hidden: hidden[i%len(hidden)]}
		if m.memory, err = writeMLPModel(root, m.name, m.hidden, *seed+uint64(i)); err != nil {
			return err
		}
		total += m.memory
		models[i] = m
	}
	budget := int64(float64(total) * *fraction)
	var static []string
	var staticBytes int64
	var staticShare float64
	for i := range models { // the most popular first; each that still fits
		if staticBytes+models[i].memory <= budget {
			models[i].static = true
			staticBytes += models[i].memory
			staticShare += models[i].share
			static = append(static, models[i].name)
		}
	}
	var inRun float64
	for _, r := range reqs {
		if slices.Contains(static, r.model) {
			inRun++
		}
	}
	fmt.Fprintf(stdout, "%d models (the trace's %d most requested, %.1f%% of its requests), hidden sizes %v in turn by popularity, %s in all; budget %s (%.3g of it)\n",
		len(models), len(models), 100*sumShare(pops), hidden, mib(total), mib(budget), *fraction)
	fmt.Fprintf(stdout, "static set: %d models holding %s, %.1f%% of the run's requests: %s\n",
		len(static), mib(staticBytes), 100*inRun/float64(len(reqs)), strings.Join(static, " "))
	hits, misses := lruHits(reqs, models, budget)
	fmt.Fprintf(stdout, "an LRU cache of the same budget with instant loads would hit %.1f%% of the run's requests (%d loads); the trace switches model %d times\n",
		pct(hits, len(reqs)), misses, switches(reqs))
	fmt.Fprintf(stdout, "%d requests, %s arrivals over %v (%.0f/s mean), objective %v, one row each, goroutine per request (open loop)\n\n",
		len(reqs), *arrivals, *span, float64(len(reqs))/span.Seconds(), *objective)

	cold, warm, err := probeLoads(root, models[:min(len(models), len(hidden))])
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "one cold load alone (read, decode, warm up, profile) by size:")
	for i, t := range cold {
		fmt.Fprintf(stdout, " hidden %d %s %.0fms;", models[i].hidden, mib(models[i].memory), ms(t))
	}
	fmt.Fprintf(stdout, "\na reload (read, decode, warm up; the profile kept):")
	for i, t := range warm {
		fmt.Fprintf(stdout, " hidden %d %.0fms;", models[i].hidden, ms(t))
	}
	fmt.Fprintln(stdout)

	var enc *json.Encoder
	if *out != "" {
		w, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer w.Close()
		enc = json.NewEncoder(w)
	}
	var results []mmResult
	for _, pol := range strings.Split(*policies, ",") {
		if pol != "engine" && pol != "admit" && pol != "cost" && pol != "static" {
			return fmt.Errorf("-policies: %q: want engine, admit, cost or static", pol)
		}
		res, err := runManyModels(pol, root, static, reqs, budget, *objective)
		if err != nil {
			return fmt.Errorf("%s: %w", pol, err)
		}
		res.Arrivals, res.Models = *arrivals, len(models)
		results = append(results, res)
		if enc != nil {
			if err := enc.Encode(res); err != nil {
				return err
			}
		}
	}
	printManyModels(stdout, results)
	return nil
}

// probeLoads times one load of each of models (the first, one of each
// size), alone in an engine, before the runs, and a second load after an
// unload (the profile reused: decode and warm-up).
func probeLoads(root string, models []mmModel) (cold, warm []time.Duration, err error) {
	e, err := engine.New(engine.Options{Source: engine.DirSource{Root: root}, Registry: prometheus.NewRegistry()})
	if err != nil {
		return nil, nil, err
	}
	defer e.Close()
	for i := range models {
		start := time.Now()
		if err := e.Load(context.Background(), models[i].name); err != nil {
			return nil, nil, err
		}
		cold = append(cold, time.Since(start))
		if err := e.Unload(context.Background(), models[i].name); err != nil {
			return nil, nil, err
		}
		start = time.Now()
		if err := e.Load(context.Background(), models[i].name); err != nil {
			return nil, nil, err
		}
		warm = append(warm, time.Since(start))
	}
	return cold, warm, nil
}

// lruHits replays the requests through an LRU cache of the models under
// the budget whose loads take no time: the requests it finds loaded, and
// the loads it makes.
func lruHits(reqs []mmRequest, models []mmModel, budget int64) (hits, loads int) {
	size := map[string]int64{}
	for _, m := range models {
		size[m.name] = m.memory
	}
	var cache []string // least recently used first
	var used int64
	for _, r := range reqs {
		if i := slices.Index(cache, r.model); i >= 0 {
			hits++
			cache = append(slices.Delete(cache, i, i+1), r.model)
			continue
		}
		loads++
		for used+size[r.model] > budget && len(cache) > 0 {
			used -= size[cache[0]]
			cache = cache[1:]
		}
		cache = append(cache, r.model)
		used += size[r.model]
	}
	return hits, loads
}

// switches counts the requests for another model than the one before.
func switches(reqs []mmRequest) int {
	n := 0
	for i := 1; i < len(reqs); i++ {
		if reqs[i].model != reqs[i-1].model {
			n++
		}
	}
	return n
}

func sumShare(ps []loadgen.Popularity) float64 {
	s := 0.0
	for _, p := range ps {
		s += p.Share
	}
	return s
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// writeMLPModel writes a virga.mlp/v1 model directory root/name/1 with a
// hidden layer of hidden units and seeded weights, and returns the memory
// the engine accounts for it once loaded.
func writeMLPModel(root, name string, hidden int, seed uint64) (int64, error) {
	dir := filepath.Join(root, name, "1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	f := mlp.File{Inputs: 64, Hidden: hidden, Classes: 10, InputScale: 1.0 / 16}
	rng := rand.New(rand.NewPCG(seed, 1))
	f.Params = make([]float64, hidden*64+hidden+10*hidden+10)
	for i := range f.Params {
		f.Params[i] = rng.Float64()*0.2 - 0.1
	}
	man := serve.Manifest{Format: mlp.Format, File: "mlp.json", MaxBatch: 64, Signature: f.Signature()}
	for file, v := range map[string]any{"mlp.json": f, serve.ManifestFile: man} {
		data, err := json.Marshal(v)
		if err != nil {
			return 0, err
		}
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
			return 0, err
		}
	}
	m, err := mlp.Loader{}.Load(dir, man)
	if err != nil {
		return 0, err
	}
	return m.Memory(), nil
}

// staticService is the baseline "load what fits, refuse the rest": the
// engine with the static set pinned, and every request for another model
// refused at once, as a server without automatic loading answers a model
// it has not loaded.
type staticService struct {
	*engine.Engine
	set map[string]bool
}

func (s staticService) Infer(ctx context.Context, r *serve.Request) (*serve.Response, error) {
	if !s.set[r.Model] {
		return nil, &serve.RefusedError{Reason: "NotLoaded", Msg: fmt.Sprintf("model %s is not loaded", r.Model)}
	}
	return s.Engine.Infer(ctx, r)
}

// runManyModels runs the requests against one policy's engine in real
// time and measures them.
func runManyModels(policy, root string, static []string, reqs []mmRequest, budget int64, objective time.Duration) (mmResult, error) {
	reg := prometheus.NewRegistry()
	opts := engine.Options{
		Source:       engine.DirSource{Root: root},
		MemoryBudget: budget,
		Objective:    objective,
		Policy:       func(string, string) batch.Policy { return &batch.Deadline{} },
		Registry:     reg,
	}
	if policy == "static" {
		opts.Pinned = static
	}
	opts.Admission = policy == "admit"
	opts.CostAware = policy == "cost"
	e, err := engine.New(opts)
	if err != nil {
		return mmResult{}, err
	}
	defer e.Close()
	// Both start warm with the static set loaded: the baseline's pins, and
	// the same models loaded (not pinned) for the engine's own policy.
	for _, name := range static {
		if err := e.Load(context.Background(), name); err != nil {
			return mmResult{}, fmt.Errorf("loading %s before the run: %w", name, err)
		}
	}
	before, err := gatherSums(reg)
	if err != nil {
		return mmResult{}, err
	}
	var svc serve.Service = e
	if policy == "static" {
		set := map[string]bool{}
		for _, name := range static {
			set[name] = true
		}
		svc = staticService{Engine: e, set: set}
	}

	// The memory metric, sampled through the run.
	stopSampling := make(chan struct{})
	sampled := make(chan float64)
	go func() {
		peak := 0.0
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				sampled <- peak
				return
			case <-tick.C:
				if s, err := gatherSums(reg); err == nil {
					peak = max(peak, s["virga_serve_memory_bytes"])
				}
			}
		}
	}()

	outcomes := make([]mmOutcome, len(reqs))
	var wg sync.WaitGroup
	rng := rand.New(rand.NewPCG(7, 7))
	start := time.Now()
	for i, r := range reqs {
		due := start.Add(r.at)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		x := make([]float32, 64)
		for j := range x {
			x[j] = float32(rng.IntN(17))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := &serve.Request{Model: r.model, Arrived: due, Timeout: objective,
				Inputs: []serve.Tensor{{Name: "pixels", Datatype: serve.FP32, Shape: []int64{1, 64}, Data: x}}}
			_, err := svc.Infer(context.Background(), req)
			o := mmOutcome{latency: time.Since(due), ok: err == nil}
			var refused *serve.RefusedError
			switch {
			case err == nil:
			case errors.As(err, &refused):
				o.reason = refused.Reason
			case errors.Is(err, serve.ErrUnavailable):
				o.reason = "Unavailable"
			default:
				o.reason = "Error: " + err.Error()
			}
			outcomes[i] = o
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stopSampling)
	peak := <-sampled
	after, err := gatherSums(reg)
	if err != nil {
		return mmResult{}, err
	}

	res := mmResult{Policy: policy, Requests: len(reqs), Objective: objective.String(), NotAnswered: map[string]int{},
		Budget: budget, MaxMemory: int64(peak), Seconds: elapsed.Seconds()}
	set := map[string]bool{}
	for _, name := range static {
		set[name] = true
	}
	var lat []time.Duration
	for i, o := range outcomes {
		if set[reqs[i].model] {
			res.StaticSetRequests++
			if o.ok && o.latency <= objective {
				res.StaticSetOnTime++
			}
		}
		switch {
		case !o.ok:
			res.NotAnswered[o.reason]++
		case o.latency <= objective:
			res.OnTime++
			lat = append(lat, o.latency)
		default:
			res.Late++
			lat = append(lat, o.latency)
		}
	}
	slices.Sort(lat)
	res.P50ms = ms(quantile(lat, 0.5))
	res.P99ms = ms(quantile(lat, 0.99))
	loads := after["virga_serve_loads_total{outcome=ok}"] - before["virga_serve_loads_total{outcome=ok}"]
	res.Loads = int(loads)
	res.LoadsPerMin = loads / elapsed.Minutes()
	if c := after["virga_serve_load_seconds_count"] - before["virga_serve_load_seconds_count"]; c > 0 {
		res.MeanLoadMs = 1000 * (after["virga_serve_load_seconds_sum"] - before["virga_serve_load_seconds_sum"]) / c
	}
	res.Evictions = int(after["virga_serve_evictions_total"] - before["virga_serve_evictions_total"])
	return res, nil
}

// gatherSums sums each metric of reg over its labels (a histogram as
// NAME_count and NAME_sum; a counter also by its outcome label, as
// NAME{outcome=VALUE}).
func gatherSums(reg *prometheus.Registry) (map[string]float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				out[mf.GetName()] += m.GetCounter().GetValue()
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" {
						out[mf.GetName()+"{outcome="+l.GetValue()+"}"] += m.GetCounter().GetValue()
					}
				}
			case m.GetGauge() != nil:
				out[mf.GetName()] += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				out[mf.GetName()+"_count"] += float64(m.GetHistogram().GetSampleCount())
				out[mf.GetName()+"_sum"] += m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out, nil
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func printManyModels(w io.Writer, results []mmResult) {
	fmt.Fprintf(w, "%-7s %8s %8s %6s %8s %8s %8s %6s %9s %8s %9s %10s %10s\n",
		"policy", "requests", "on-time", "late", "refused", "p50", "p99", "loads", "loads/min", "load", "evictions", "max-memory", "budget")
	for _, r := range results {
		refused := 0
		for _, c := range r.NotAnswered {
			refused += c
		}
		fmt.Fprintf(w, "%-7s %8d %7.2f%% %6d %8d %6.2fms %6.2fms %6d %9.1f %6.1fms %9d %10s %10s\n",
			r.Policy, r.Requests, pct(r.OnTime, r.Requests), r.Late, refused, r.P50ms, r.P99ms, r.Loads, r.LoadsPerMin,
			r.MeanLoadMs, r.Evictions, mib(r.MaxMemory), mib(r.Budget))
	}
	fmt.Fprintln(w, "\nrequests for the static set's models answered on time:")
	for _, r := range results {
		fmt.Fprintf(w, "%-7s %.2f%% of %d\n", r.Policy, pct(r.StaticSetOnTime, r.StaticSetRequests), r.StaticSetRequests)
	}
	fmt.Fprintln(w, "\nnot answered, by reason:")
	for _, r := range results {
		var reasons []string
		for k := range r.NotAnswered {
			reasons = append(reasons, k)
		}
		sort.Strings(reasons)
		var parts []string
		for _, k := range reasons {
			parts = append(parts, fmt.Sprintf("%s %d (%.2f%%)", k, r.NotAnswered[k], pct(r.NotAnswered[k], r.Requests)))
		}
		if len(parts) == 0 {
			parts = []string{"none"}
		}
		fmt.Fprintf(w, "%-7s %s\n", r.Policy, strings.Join(parts, ", "))
	}
}
