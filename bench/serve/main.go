// Command serve measures Virga's batching policies in virtual time: the
// goodput (requests answered within their latency objective) of deadline,
// Triton's dynamic batcher (fixed, with queue delays of 0, 1 ms and 5 ms and
// its defaults otherwise), Clipper's AIMD and no batching, against the
// offline bound (the most any schedule could have answered in time), at
// 50% to 95% of a model's capacity, on Poisson arrivals and on the Azure
// LLM inference trace's bursty arrivals scaled to the same rate, for
// latency profiles with and without batching gains.
//
//	go run ./bench/serve -data ../shared/data
//
// With "live" first it runs the open-loop load generator against a
// server's Open Inference Protocol endpoint instead (loadgen.Command):
//
//	go run ./bench/serve live -url http://localhost:8080 -model digits -body req.json -rate 500 -objective 20ms
//
// With "manymodels" it serves the Alibaba GenAI trace's most requested
// models under a memory budget through the real engine, its own policy
// against a static set pinned by popularity (manymodels.go); with
// "overhead", the ONNX digits model through REST, gRPC and the engine
// against ONNX Runtime called directly (overhead.go); with "runcost", an
// ONNX model's Run timed in the engine and called directly, in alternation
// (runcost.go). See the README.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/virga-ml/virga/internal/serve/batch"
	"github.com/virga-ml/virga/internal/serve/loadgen"
)

// model is a latency profile and the objective its requests are held to.
type model struct {
	name      string
	profile   batch.Profile
	objective time.Duration
	// source says where a profile of points comes from: "measured" (by
	// -repository) or "given" (by -profile).
	source string
}

// capacity is the most requests per second one instance can answer: the
// batch size with the most rows per second, back to back (a full batch for
// every profile but mlp1024's measured here).
func (m model) capacity() float64 {
	best := 0.0
	for r := 1; r <= m.profile.MaxRows(); r++ {
		best = max(best, float64(r)/m.profile.Latency(r).Seconds())
	}
	return best
}

type policy struct {
	name string
	make func(m model) batch.Policy
}

var policies = []policy{
	{"deadline", func(model) batch.Policy { return &batch.Deadline{} }},
	{"fixed-0", func(model) batch.Policy { return &batch.Fixed{} }},
	{"fixed-1ms", func(model) batch.Policy { return &batch.Fixed{MaxQueueDelay: time.Millisecond} }},
	{"fixed-5ms", func(model) batch.Policy { return &batch.Fixed{MaxQueueDelay: 5 * time.Millisecond} }},
	// Started at its steady state (the largest batch): a run is too short
	// for Clipper's growth from 1 not to decide the figure.
	{"aimd", func(m model) batch.Policy {
		return &batch.AIMD{Objective: m.objective, Initial: m.profile.MaxRows()}
	}},
	{"none", func(model) batch.Policy { return batch.None{} }},
}

// commands are the modes other than the policies' benchmark, by their
// first argument.
var commands = map[string]func(args []string) error{
	"live": func(args []string) error {
		return loadgen.Command(context.Background(), args, os.Stdout, os.Stderr)
	},
	"manymodels": func(args []string) error { return manyModels(args, os.Stdout) },
	"overhead":   func(args []string) error { return overhead(args, os.Stdout) },
	"runcost":    func(args []string) error { return runCost(args, os.Stdout) },
}

type result struct {
	Model    string  `json:"model"`
	Trace    string  `json:"trace"`
	Load     float64 `json:"load"`
	Rate     float64 `json:"rate_per_s"`
	Requests int     `json:"requests"`
	Policy   string  `json:"policy"`
	OnTime   int     `json:"on_time"`
	Late     int     `json:"late"`
	Refused  int     `json:"refused"`
	Bound    int     `json:"bound"`
	Exact    bool    `json:"bound_exact"`
	Seconds  float64 `json:"sim_seconds"`
}

func main() {
	if len(os.Args) > 1 {
		if cmd, ok := commands[os.Args[1]]; ok {
			if err := cmd(os.Args[2:]); err != nil {
				log.Fatal(err)
			}
			return
		}
	}
	data := flag.String("data", "../shared/data", "the shared traces directory")
	n := flag.Int("n", 20000, "requests per run")
	loadsFlag := flag.String("loads", "0.5,0.6,0.7,0.8,0.9,0.95", "loads as fractions of capacity")
	objectiveFlag := flag.String("objective", "4", "the latency objective: a multiple of a full batch's latency (2), or a duration (20ms)")
	repository := flag.String("repository", "", "measure the models of this repository (DIR/MODEL/VERSION/virga-model.json, ONNX Runtime) instead of the assumed profiles")
	profileRuns := flag.Int("profile-runs", 15, "with -repository: profiles measured per model (engine.Measure); each point is their median")
	profileFlag := flag.String("profile", "", "simulate one model with this profile instead, as rows:latency points (1:6.9us,2:6.9us,...,64:16.1us; the largest is the max batch), named by -models")
	seed := flag.Uint64("seed", 1, "the Poisson arrivals' seed")
	only := flag.String("models", "", "comma-separated models to run (default all)")
	out := flag.String("out", "", "write every run as JSON lines to this file")
	onlyPolicies := flag.String("policies", "", "comma-separated policies to run (default all; deadline is always run, for dl/bound)")
	flag.Parse()

	var loads []float64
	for _, s := range strings.Split(*loadsFlag, ",") {
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || f <= 0 {
			log.Fatalf("-loads: %q is not a fraction of capacity above 0", s)
		}
		loads = append(loads, f)
	}
	azurePath := filepath.Join(*data, "azure-llm-inference-trace-2023", "data", "AzureLLMInferenceTrace_conv.csv")
	f, err := os.Open(azurePath)
	if err != nil {
		log.Fatalf("the Azure trace (set -data to the shared traces directory): %v", err)
	}
	azure, err := loadgen.ReadAzure(f, azurePath)
	f.Close()
	if err != nil {
		log.Fatal(err)
	}

	objective, err := parseObjective(*objectiveFlag)
	if err != nil {
		log.Fatal(err)
	}
	var models []model
	if *profileFlag != "" {
		p, err := parseProfile(*profileFlag)
		if err != nil {
			log.Fatal(err)
		}
		name := *only
		if name == "" || strings.Contains(name, ",") {
			log.Fatalf("-profile: name the model it is with -models (one name), got %q", name)
		}
		models = []model{{name: name, profile: p, source: "given"}}
	} else if *repository != "" {
		if models, err = measured(context.Background(), *repository, *only, *profileRuns); err != nil {
			log.Fatal(err)
		}
	} else {
		// Profiles from the models measured on this machine's CPU
		// (SERVING.md, ONNX Runtime 1.30): a small MLP runs 1 to 64 rows in
		// about 5 us, a random forest costs about 6 us per row; and an
		// accelerator-like model whose batching pays: 1 ms + 0.1 ms per row.
		models = []model{
			{name: "mlp", profile: batch.Linear{Base: 5 * time.Microsecond, Max: 64}},
			{name: "forest", profile: batch.Linear{PerRow: 6 * time.Microsecond, Max: 64}},
			{name: "gpu", profile: batch.Linear{Base: time.Millisecond, PerRow: 100 * time.Microsecond, Max: 64}},
		}
	}
	for i := range models {
		models[i].objective = objective(models[i].profile)
	}

	var enc *json.Encoder
	if *out != "" {
		w, err := os.Create(*out)
		if err != nil {
			log.Fatal(err)
		}
		defer w.Close()
		enc = json.NewEncoder(w)
	}
	var run []policy
	for _, p := range policies {
		if *onlyPolicies == "" || p.name == "deadline" || strings.Contains(","+*onlyPolicies+",", ","+p.name+",") {
			run = append(run, p)
		}
	}
	traces := []string{"poisson", "azure"}
	for _, m := range models {
		if *only != "" && !strings.Contains(","+*only+",", ","+m.name+",") {
			continue
		}
		for _, tr := range traces {
			count := *n
			if tr == "azure" {
				count = min(count, len(azure))
			}
			fmt.Printf("\n%s (%v, objective %v, capacity %.0f/s), %s arrivals, %d requests: %% answered within the objective\n",
				m.name, describe(m), m.objective, m.capacity(), tr, count)
			fmt.Printf("%5s", "load")
			for _, p := range run {
				fmt.Printf(" %9s", p.name)
			}
			fmt.Printf(" %9s %9s\n", "bound", "dl/bound")
			for _, load := range loads {
				rate := load * m.capacity()
				var arr loadgen.Arrivals
				switch tr {
				case "poisson":
					arr = loadgen.Poisson(rand.New(rand.NewPCG(*seed, uint64(load*1000))), rate, *n)
				case "azure":
					a := azure
					if len(a) > *n {
						a = a[:*n]
					}
					arr = a.Scale(rate)
				}
				reqs := items(arr, m.objective)
				bound, exact, err := batch.Bound(reqs, m.profile)
				if err != nil {
					log.Fatal(err)
				}
				fmt.Printf("%4.0f%%", load*100)
				var dl int
				for _, p := range run {
					start := time.Now()
					res, err := batch.Simulate(reqs, m.profile, p.make(m), 1)
					if err != nil {
						log.Fatalf("%s %s %v %s: %v", m.name, tr, load, p.name, err)
					}
					if p.name == "deadline" {
						dl = res.OnTime
					}
					fmt.Printf(" %8.2f%%", pct(res.OnTime, len(reqs)))
					if enc != nil {
						enc.Encode(result{Model: m.name, Trace: tr, Load: load, Rate: rate, Requests: len(reqs), Policy: p.name,
							OnTime: res.OnTime, Late: res.Late, Refused: res.Refused, Bound: bound, Exact: exact,
							Seconds: time.Since(start).Seconds()})
					}
				}
				mark := ""
				if !exact {
					mark = "*"
				}
				fmt.Printf(" %8.2f%%%s %8.2f%%\n", pct(bound, len(reqs)), mark, pct(dl, bound))
			}
		}
	}
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// items turns arrivals into one-row requests due objective after they arrive.
func items(arr loadgen.Arrivals, objective time.Duration) []batch.Item {
	origin := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	reqs := make([]batch.Item, len(arr))
	for i, a := range arr {
		t := origin.Add(a)
		reqs[i] = batch.Item{Arrived: t, Deadline: t.Add(objective), Rows: 1}
	}
	return reqs
}
