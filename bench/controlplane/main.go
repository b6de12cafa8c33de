// Command controlplane measures Virga's control plane (issue 2) and prints its
// figures:
//
//   - e2e: an experiment of trivial trial processes (a prebuilt Go program
//     that reports one metric and exits) through an in-process server with
//     the local backend: trials per second from submit to COMPLETED, and the
//     delay from a trial's creation to its attempt's start (p50/p99/max).
//   - api: an API-driven experiment (no entrypoint) and N client goroutines
//     each looping ask -> report -> complete over loopback HTTP: trials per second.
//   - ingest: 32 asked trials whose 32 reporters send steps 0, 1, 2, ... as
//     fast as they can for a fixed time: acknowledged reports per second, on
//     SQLite and (with --postgres or VIRGA_TEST_POSTGRES) PostgreSQL, then a
//     durability check that the reopened store holds every acknowledged report.
//
// Run from the module root: go run ./bench/controlplane [flags]. See bench/README.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/virga-ml/virga/internal/backend/local"
)

// sqliteURL is the store URL of a SQLite database in dataDir with the chosen durability.
func (o *options) sqliteURL(dataDir string) string {
	return "sqlite://" + filepath.Join(dataDir, "virga.db") + "?synchronous=" + o.sqliteSync
}

type options struct {
	sqliteSync  string
	parts       map[string]bool
	repeat      int
	jsonOut     bool
	timeout     time.Duration
	e2eTrials   int
	e2eConc     int
	e2eStdout   bool
	e2eHTTP     bool
	apiTrials   int
	apiClients  int
	apiComplete bool
	ingTrials   int
	ingDur      time.Duration
	postgres    string
	noSQLite    bool
	keep        bool
	verbose     bool
}

// Result is one measured run of one part.
type Result struct {
	Part    string  `json:"part"`              // e2e, api or ingest
	Variant string  `json:"variant,omitempty"` // e2e: http or stdout
	Store   string  `json:"store"`             // sqlite or postgres
	Run     int     `json:"run"`
	Trials  int     `json:"trials,omitempty"`
	Seconds float64 `json:"seconds"`
	// Rate is trials/s (e2e, api) or acknowledged reports/s (ingest).
	Rate     float64 `json:"rate"`
	Unit     string  `json:"unit"`
	Target   float64 `json:"target"`
	P50ms    float64 `json:"start_p50_ms,omitempty"`
	P99ms    float64 `json:"start_p99_ms,omitempty"`
	MaxMs    float64 `json:"start_max_ms,omitempty"`
	TargetP  float64 `json:"start_p99_target_ms,omitempty"`
	Acked    int64   `json:"acked,omitempty"`
	Stored   int64   `json:"stored,omitempty"`
	Errors   int64   `json:"errors"`
	Failed   int     `json:"failed_trials,omitempty"`
	Met      bool    `json:"target_met"`
	Durable  *bool   `json:"durable,omitempty"`
	Problems string  `json:"problems,omitempty"`
	// Phases (e2e) splits each trial's life, from the store's timestamps:
	// trial created, attempt started (the process runs), first metric
	// committed, attempt exited (as the backend saw it).
	Phases map[string]Quantiles `json:"phases_ms,omitempty"`
	// CPU (e2e) is the CPU time each trial cost, from the submit to the
	// server's close.
	CPU *CPUPerTrial `json:"cpu_per_trial,omitempty"`
}

// Quantiles are the p50, p99 and max of a duration, in ms.
type Quantiles struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func quantiles(d []time.Duration) Quantiles {
	slices.Sort(d)
	return Quantiles{percentile(d, 0.50), percentile(d, 0.99), percentile(d, 1)}
}

func init() {
	if len(os.Args) > 1 && os.Args[1] == "shim" {
		local.ShimThread() // main, and the trial's fork, on the main thread
	}
}

func main() {
	// The local backend runs `<this executable> shim` to supervise each trial,
	// as `virga run` does with the virga binary.
	if len(os.Args) > 1 && os.Args[1] == "shim" {
		os.Exit(local.ShimMain(os.Args[2:]))
	}
	os.Exit(run())
}

func run() int {
	var o options
	parts := flag.String("parts", "e2e,api,ingest", "comma-separated parts to run: e2e, api, ingest")
	flag.IntVar(&o.repeat, "repeat", 1, "runs of each part (each on a fresh server and data directory)")
	flag.BoolVar(&o.jsonOut, "json", false, "print the results as JSON")
	flag.DurationVar(&o.timeout, "timeout", 3*time.Minute, "bound on each run of a part")
	flag.IntVar(&o.e2eTrials, "e2e-trials", 2000, "e2e: trials in the experiment")
	flag.IntVar(&o.e2eConc, "cpu", 8, "e2e: the backend's CPU capacity and the experiment's max_concurrent (trials take cpu 1)")
	flag.BoolVar(&o.e2eHTTP, "e2e-http", true, "e2e: run the variant whose trials report over HTTP")
	flag.BoolVar(&o.e2eStdout, "e2e-stdout", false, "e2e: also run the variant whose trials print a VIRGA_METRIC line")
	flag.IntVar(&o.apiTrials, "api-trials", 2000, "api: max_trials of the API-driven experiment")
	flag.IntVar(&o.apiClients, "api-clients", 8, "api: client goroutines looping ask -> report -> complete")
	flag.BoolVar(&o.apiComplete, "api-complete", true, "api: end each trial with complete (false: ask -> report only; the trials stay running)")
	flag.IntVar(&o.ingTrials, "ingest-trials", 32, "ingest: asked trials, one reporting goroutine each")
	flag.DurationVar(&o.ingDur, "ingest-duration", 10*time.Second, "ingest: how long the reporters send")
	flag.StringVar(&o.postgres, "postgres", os.Getenv("VIRGA_TEST_POSTGRES"), "ingest: PostgreSQL URL (a fresh schema is created in it and dropped); empty skips PostgreSQL")
	flag.BoolVar(&o.noSQLite, "no-sqlite", false, "ingest: skip the SQLite run")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of this process (server and clients; trial processes excluded) to this file")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary directories")
	flag.StringVar(&o.sqliteSync, "sqlite-sync", "full", "SQLite durability: full (fsync per commit) or normal (WAL without fsync per commit: survives kill -9, not power loss)")
	flag.BoolVar(&o.verbose, "v", false, "log the server's messages at info level")
	flag.Parse()
	o.parts = map[string]bool{}
	for _, p := range strings.Split(*parts, ",") {
		p = strings.TrimSpace(p)
		switch p {
		case "e2e", "api", "ingest":
			o.parts[p] = true
		case "":
		default:
			fmt.Fprintf(os.Stderr, "controlplane: unknown part %q (want e2e, api, ingest)\n", p)
			return 2
		}
	}
	if o.repeat < 1 {
		o.repeat = 1
	}

	tmp, err := os.MkdirTemp("", "virga-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "controlplane:", err)
		return 1
	}
	if o.keep {
		fmt.Fprintln(os.Stderr, "temporary directory:", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	var trialBin string
	if o.parts["e2e"] {
		trialBin = filepath.Join(tmp, "trivialtrial")
		if err := buildTrial(trialBin); err != nil {
			fmt.Fprintln(os.Stderr, "controlplane: building the trial:", err)
			return 1
		}
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "controlplane:", err)
			return 1
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "controlplane:", err)
			return 1
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}

	var results []Result
	report := func(r Result) {
		results = append(results, r)
		if !o.jsonOut {
			printResult(os.Stdout, r)
		}
	}
	failed := false
	step := 0
	runPart := func(name string, fn func(ctx context.Context, dir string, runNo int) (Result, error)) {
		for i := 1; i <= o.repeat; i++ {
			step++
			dir := filepath.Join(tmp, fmt.Sprintf("%02d-%s", step, name))
			ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
			r, err := fn(ctx, dir, i)
			cancel()
			if err != nil {
				fmt.Fprintf(os.Stderr, "controlplane: %s (run %d): %v\n", name, i, err)
				failed = true
				continue
			}
			report(r)
		}
	}
	if o.parts["e2e"] {
		if o.e2eHTTP {
			runPart("e2e-http", func(ctx context.Context, dir string, n int) (Result, error) {
				return runE2E(ctx, &o, logger, dir, trialBin, false, n)
			})
		}
		if o.e2eStdout {
			runPart("e2e-stdout", func(ctx context.Context, dir string, n int) (Result, error) {
				return runE2E(ctx, &o, logger, dir, trialBin, true, n)
			})
		}
	}
	if o.parts["api"] {
		runPart("api", func(ctx context.Context, dir string, n int) (Result, error) {
			return runAPI(ctx, &o, logger, dir, n)
		})
	}
	if o.parts["ingest"] {
		if !o.noSQLite {
			runPart("ingest-sqlite", func(ctx context.Context, dir string, n int) (Result, error) {
				return runIngest(ctx, &o, logger, dir, "", n)
			})
		}
		if o.postgres != "" {
			runPart("ingest-postgres", func(ctx context.Context, dir string, n int) (Result, error) {
				return runIngest(ctx, &o, logger, dir, o.postgres, n)
			})
		} else if !o.jsonOut {
			fmt.Println("ingest postgres: skipped (set --postgres or VIRGA_TEST_POSTGRES; scripts/postgres.sh start prints a URL)")
		}
	}
	if o.jsonOut {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(results)
	} else if o.repeat > 1 {
		printSummary(os.Stdout, results)
	}
	if failed {
		return 1
	}
	return 0
}

// buildTrial builds bench/controlplane/trivialtrial into path.
func buildTrial(path string) error {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return fmt.Errorf("run from inside the Virga module (go run ./bench/controlplane)")
	}
	cmd := exec.Command("go", "build", "-o", path, "./bench/controlplane/trivialtrial")
	cmd.Dir = filepath.Dir(mod)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

func printResult(w io.Writer, r Result) {
	name := r.Part
	if r.Variant != "" {
		name += " " + r.Variant
	}
	name += " " + r.Store
	mark := func(ok bool) string {
		if ok {
			return "meets"
		}
		return "MISSES"
	}
	switch r.Part {
	case "e2e":
		fmt.Fprintf(w, "%-18s run %d: %d trials in %.2fs = %.1f trials/s (target >= %.0f); start delay p50 %.2f ms, p99 %.2f ms, max %.2f ms (target p99 < %.0f ms); %s; errors %d, failed trials %d\n",
			name, r.Run, r.Trials, r.Seconds, r.Rate, r.Target, r.P50ms, r.P99ms, r.MaxMs, r.TargetP, mark(r.Met), r.Errors, r.Failed)
		for _, k := range []string{"created->started", "started->reported", "reported->exited", "created->exited"} {
			if q, ok := r.Phases[k]; ok {
				fmt.Fprintf(w, "%-18s        %-18s p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms\n", "", k, q.P50, q.P99, q.Max)
			}
		}
		if c := r.CPU; c != nil {
			fmt.Fprintf(w, "%-18s        CPU per trial      %.2f ms: server %.2f ms, shims and trials %.2f ms; %.0f%% system\n",
				"", c.ServerMs+c.ChildMs, c.ServerMs, c.ChildMs, 100*c.SysShare)
		}
	case "api":
		fmt.Fprintf(w, "%-18s run %d: %d trials in %.2fs = %.1f trials/s (target >= %.0f); %s; errors %d\n",
			name, r.Run, r.Trials, r.Seconds, r.Rate, r.Target, mark(r.Met), r.Errors)
	case "ingest":
		d := "durable"
		if r.Durable != nil && !*r.Durable {
			d = "NOT DURABLE"
		}
		target := fmt.Sprintf("target >= %.0f; %s", r.Target, mark(r.Met))
		if r.Target == 0 {
			target = "no rate target"
		}
		fmt.Fprintf(w, "%-18s run %d: %d acknowledged reports in %.2fs = %.0f reports/s (%s); stored after reopen %d of %d acknowledged: %s; errors %d\n",
			name, r.Run, r.Acked, r.Seconds, r.Rate, target, r.Stored, r.Acked, d, r.Errors)
	}
	if r.Problems != "" {
		fmt.Fprintf(w, "%-18s run %d: problems: %s\n", name, r.Run, r.Problems)
	}
}

// printSummary prints the best and the spread of each part over its runs.
func printSummary(w io.Writer, rs []Result) {
	type key struct{ part, variant, store string }
	var order []key
	groups := map[key][]Result{}
	for _, r := range rs {
		k := key{r.Part, r.Variant, r.Store}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	fmt.Fprintln(w, "summary (best, worst over runs):")
	for _, k := range order {
		g := groups[k]
		rates := make([]float64, len(g))
		p99 := make([]float64, len(g))
		for i, r := range g {
			rates[i], p99[i] = r.Rate, r.P99ms
		}
		name := strings.Join(slices.DeleteFunc([]string{k.part, k.variant, k.store}, func(s string) bool { return s == "" }), " ")
		fmt.Fprintf(w, "  %-20s %s best %.1f, worst %.1f (spread %.0f%%)", name, g[0].Unit, slices.Max(rates), slices.Min(rates), spread(rates))
		if k.part == "e2e" {
			fmt.Fprintf(w, "; start p99 ms best %.2f, worst %.2f", slices.Min(p99), slices.Max(p99))
		}
		fmt.Fprintln(w)
	}
}

// spread is (max-min)/max in percent.
func spread(v []float64) float64 {
	hi, lo := slices.Max(v), slices.Min(v)
	if hi == 0 {
		return 0
	}
	return 100 * (hi - lo) / hi
}

// percentile returns the p-quantile (0..1) of sorted durations, in ms, by the
// nearest-rank method.
func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	i = max(0, min(len(sorted)-1, i))
	return float64(sorted[i]) / float64(time.Millisecond)
}
