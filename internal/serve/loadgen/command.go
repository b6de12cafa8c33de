package loadgen

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"time"
)

// Command runs the load generator from command-line arguments and prints
// its table to stdout: what `virga bench serve` runs.
//
//	-url http://localhost:8080 -model digits -body request.json
//	-rate 200 -n 2000 -objective 50ms [-arrivals poisson|azure=FILE] [-seed 1]
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := fs.String("url", "http://localhost:8080", "the server's base URL")
	model := fs.String("model", "", "the model to send requests to")
	version := fs.String("version", "", "the model version (default: the one its name serves)")
	bodyPath := fs.String("body", "", "a file holding the JSON inference request to send")
	rate := fs.Float64("rate", 100, "requests per second (the mean, for a trace)")
	n := fs.Int("n", 1000, "requests to send")
	objective := fs.Duration("objective", 100*time.Millisecond, "the latency objective")
	arrivals := fs.String("arrivals", "poisson", "poisson, or azure=FILE for an Azure LLM inference trace's arrivals scaled to -rate")
	seed := fs.Uint64("seed", 1, "the Poisson arrivals' seed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *model == "" || *bodyPath == "" {
		return fmt.Errorf("-model and -body are needed")
	}
	if *rate <= 0 || *n <= 0 {
		return fmt.Errorf("-rate %v, -n %d: want both above 0", *rate, *n)
	}
	body, err := os.ReadFile(*bodyPath)
	if err != nil {
		return fmt.Errorf("-body: %w", err)
	}
	var arr Arrivals
	switch {
	case *arrivals == "poisson":
		arr = Poisson(rand.New(rand.NewPCG(*seed, 0)), *rate, *n)
	case strings.HasPrefix(*arrivals, "azure="):
		path := strings.TrimPrefix(*arrivals, "azure=")
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("-arrivals: %w", err)
		}
		a, err := ReadAzure(f, path)
		f.Close()
		if err != nil {
			return fmt.Errorf("-arrivals: %w", err)
		}
		if len(a) > *n {
			a = a[:*n]
		}
		arr = a.Scale(*rate)
	default:
		return fmt.Errorf("-arrivals %q: want poisson or azure=FILE", *arrivals)
	}
	rep, err := Run(ctx, Config{URL: strings.TrimRight(*base, "/"), Model: *model, Version: *version, Body: body, Arrivals: arr, Objective: *objective})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %d requests, %s arrivals at %.1f/s\n", *model, len(arr), strings.SplitN(*arrivals, "=", 2)[0], *rate)
	rep.Print(stdout)
	return nil
}
