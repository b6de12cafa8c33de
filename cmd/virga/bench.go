package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/loadgen"
)

func newBenchCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks of a running Virga: load on an inference server",
	}
	cmd.AddCommand(newBenchServeCmd(g))
	return cmd
}

type benchServeFlags struct {
	url, model, version, body, arrivals string
	rate                                float64
	n                                   int
	duration                            time.Duration
	slo                                 time.Duration
	seed                                uint64
}

func newBenchServeCmd(g *globals) *cobra.Command {
	var f benchServeFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Send open-loop load to an Open Inference Protocol server and print latency and goodput at the objective",
		Long: `Send inference requests to a model at their arrival times (open loop: a slow answer never delays the next
request), then print how many were answered within --slo, late, refused (429) or failed, with latency
percentiles measured from when each request was due.

Arrivals: poisson (at --rate), or trace:FILE, the Azure LLM inference trace's timestamps (CSV with a
TIMESTAMP column) scaled to a mean of --rate. The request body is --body FILE (a JSON inference request), or,
by default, one row of zeros shaped from the model's metadata.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBenchServe(cmd.Context(), g, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.url, "url", "http://127.0.0.1:8000", "the inference server's REST base URL")
	fl.StringVar(&f.model, "model", "", "the model to send requests to (required)")
	fl.StringVar(&f.version, "version", "", "the model version (default: the one its name serves)")
	fl.StringVar(&f.body, "body", "", "a file holding the JSON inference request to send (default: one row of zeros from the model's metadata)")
	fl.StringVar(&f.arrivals, "arrivals", "poisson", "poisson, or trace:FILE (Azure LLM inference trace CSV) scaled to --rate")
	fl.Float64Var(&f.rate, "rate", 100, "requests per second (the mean, for a trace)")
	fl.IntVar(&f.n, "n", 0, "requests to send (default: --duration worth at --rate)")
	fl.DurationVar(&f.duration, "duration", 10*time.Second, "how long to send for, when -n is not given")
	fl.DurationVar(&f.slo, "slo", 100*time.Millisecond, "the latency objective: an answer later than this is late")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the Poisson arrivals")
	_ = cmd.MarkFlagRequired("model")
	return cmd
}

func runBenchServe(ctx context.Context, g *globals, f benchServeFlags) error {
	if f.rate <= 0 || f.slo <= 0 || f.n < 0 || f.duration <= 0 {
		return usageError{errors.New("--rate, --slo and --duration must be above 0, -n at least 0")}
	}
	base := strings.TrimRight(f.url, "/")
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageError{fmt.Errorf("--url %q: want a URL like http://HOST:PORT", f.url)}
	}
	n := f.n
	if n == 0 {
		n = max(1, int(f.rate*f.duration.Seconds()))
	}
	var arr loadgen.Arrivals
	switch {
	case f.arrivals == "poisson":
		arr = loadgen.Poisson(rand.New(rand.NewPCG(f.seed, 0)), f.rate, n)
	case strings.HasPrefix(f.arrivals, "trace:"):
		path := strings.TrimPrefix(f.arrivals, "trace:")
		file, err := os.Open(path)
		if err != nil {
			return usageError{fmt.Errorf("--arrivals: %w", err)}
		}
		a, err := loadgen.ReadAzure(file, path)
		file.Close()
		if err != nil {
			return usageError{fmt.Errorf("--arrivals: %w", err)}
		}
		if len(a) > n {
			a = a[:n]
		}
		arr = a.Scale(f.rate)
	default:
		return usageError{fmt.Errorf("--arrivals %q: want poisson or trace:FILE", f.arrivals)}
	}
	var body []byte
	var err error
	if f.body != "" {
		if body, err = os.ReadFile(f.body); err != nil {
			return usageError{fmt.Errorf("--body: %w", err)}
		}
	} else if body, err = zeroRequest(ctx, base, f.model, f.version); err != nil {
		return err
	}
	rep, err := loadgen.Run(ctx, loadgen.Config{URL: base, Model: f.model, Version: f.version, Body: body, Arrivals: arr, Objective: f.slo})
	if err != nil {
		return err
	}
	if g.json {
		return g.printJSON(map[string]any{
			"model": f.model, "requests": len(arr), "rate": f.rate, "arrivals": f.arrivals, "slo_ms": f.slo.Seconds() * 1e3,
			"on_time": rep.Count(loadgen.OnTime), "late": rep.Count(loadgen.Late), "refused": rep.Count(loadgen.Refused),
			"failed": rep.Count(loadgen.Failed), "elapsed_s": rep.Elapsed.Seconds(),
			"p50_ms": rep.Percentile(0.5).Seconds() * 1e3, "p99_ms": rep.Percentile(0.99).Seconds() * 1e3,
		})
	}
	fmt.Fprintf(g.stdout, "%s: %d requests, %s arrivals at %.1f/s, objective %s\n", f.model, len(arr), strings.SplitN(f.arrivals, ":", 2)[0], f.rate, f.slo)
	rep.Print(g.stdout)
	if rep.Count(loadgen.Failed) == len(arr) {
		return fmt.Errorf("every request failed (first: %s)", rep.Samples[0].Err)
	}
	return nil
}

// zeroRequest builds an inference request of one row of zeros for each of
// the model's inputs, from its metadata.
func zeroRequest(ctx context.Context, base, model, version string) ([]byte, error) {
	u := base + "/v2/models/" + url.PathEscape(model)
	if version != "" {
		u += "/versions/" + url.PathEscape(version)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("model metadata: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("model metadata of %s: %s: %s", model, resp.Status, strings.TrimSpace(string(b)))
	}
	var md serve.ModelMetadata
	if err := json.Unmarshal(b, &md); err != nil {
		return nil, fmt.Errorf("model metadata of %s: %w", model, err)
	}
	type input struct {
		Name     string  `json:"name"`
		Shape    []int64 `json:"shape"`
		Datatype string  `json:"datatype"`
		Data     []any   `json:"data"`
	}
	var ins []input
	for _, in := range md.Inputs {
		shape := make([]int64, len(in.Shape))
		count := int64(1)
		for i, d := range in.Shape {
			if d < 0 {
				d = 1
			}
			shape[i] = d
			count *= d
		}
		if count > 1<<20 {
			return nil, fmt.Errorf("input %s: %d values in one row: pass --body", in.Name, count)
		}
		data := make([]any, count)
		for i := range data {
			switch in.Datatype {
			case serve.Bool:
				data[i] = false
			case serve.Bytes:
				data[i] = ""
			default:
				data[i] = 0
			}
		}
		ins = append(ins, input{Name: in.Name, Shape: shape, Datatype: string(in.Datatype), Data: data})
	}
	return json.Marshal(map[string]any{"inputs": ins})
}
