package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/batch"
	"github.com/virga-ml/virga/internal/serve/engine"
	"github.com/virga-ml/virga/internal/serve/oip"
	pb "github.com/virga-ml/virga/internal/serve/oip/inferencepb"
	"github.com/virga-ml/virga/internal/serve/runtime/onnx"
)

type ohLatency struct {
	Path  string  `json:"path"`
	Rows  int     `json:"rows"`
	N     int     `json:"n"`
	P50us float64 `json:"p50_us"`
	P99us float64 `json:"p99_us"`
}

type ohThroughput struct {
	Path    string  `json:"path"`
	Rows    int     `json:"rows_per_request"`
	Clients int     `json:"clients"`
	RowsPS  float64 `json:"rows_per_s"`
	Seconds float64 `json:"seconds"`
}

// overhead measures what Virga's front ends and engine add to ONNX Runtime
// for the digits model (see the README): latency of one request at a time
// through REST and gRPC against the model's Run called directly, and
// throughput at saturation against Run called in a loop.
func overhead(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("overhead", flag.ContinueOnError)
	modelDir := fs.String("model", "", "an ONNX digits model directory (default: train and export one with examples/digits-torch/train.py)")
	n := fs.Int("n", 2000, "requests per latency measurement")
	seconds := fs.Duration("duration", 8*time.Second, "each throughput measurement's length")
	clients := fs.Int("clients", 32, "concurrent clients at saturation")
	rows := fs.Int("rows", 64, "rows per request at saturation")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the saturation runs through the engine to this file")
	out := fs.String("out", "", "write the measurements as JSON lines to this file")
	batching := fs.String("batching", "deadline", "the engine's batching policy: deadline (virga serve's default) or greedy (the engine's own default: run what is queued)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var policy func(string, string) batch.Policy
	switch *batching {
	case "deadline":
		policy = func(string, string) batch.Policy { return &batch.Deadline{} }
	case "greedy":
		policy = func(string, string) batch.Policy { return engine.Greedy{} }
	default:
		return fmt.Errorf("-batching %q: want deadline or greedy", *batching)
	}
	lib, err := onnx.Library()
	if err != nil {
		return err
	}

	// 1. The model, in a repository as digits/1.
	root, err := os.MkdirTemp("", "virga-overhead-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	dir := filepath.Join(root, "digits", "1")
	if *modelDir == "" {
		work, err := os.MkdirTemp("", "virga-overhead-train-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(work)
		ckpt := filepath.Join(work, "train")
		cmd := exec.Command("/usr/bin/python3", "examples/digits-torch/train.py", "--epochs", "5", "--hidden", "64", "--checkpoint-dir", ckpt)
		if outp, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("training and exporting the digits model (run from the repository root): %v\n%s", err, outp)
		}
		*modelDir = filepath.Join(ckpt, "model")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	abs, err := filepath.Abs(*modelDir)
	if err != nil {
		return err
	}
	for _, file := range []string{serve.ManifestFile, "model.onnx"} {
		data, err := os.ReadFile(filepath.Join(abs, file))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
			return err
		}
	}
	man, err := engine.ReadManifest(dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ONNX digits model %s (max_batch %d), ONNX Runtime %s, one intra-op thread; engine batching %s, one instance\n\n", abs, man.MaxBatch, lib, *batching)

	// 2. ONNX Runtime alone: the model's Run called directly.
	loader := &onnx.Loader{Settings: onnx.Settings{Library: lib}}
	model, err := loader.Load(dir, man)
	if err != nil {
		return err
	}
	defer model.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	direct := map[int]ohLatency{}
	var lats []ohLatency
	for _, b := range []int{1, 64} {
		in := []serve.Tensor{pixelRows(rng, b)}
		l, err := timeCalls("direct", b, *n, func() error { _, err := model.Run(context.Background(), in); return err })
		if err != nil {
			return err
		}
		direct[b] = l
		lats = append(lats, l)
	}
	var best ohThroughput
	var thr []ohThroughput
	for _, b := range []int{64, 256, 1024} {
		if man.MaxBatch > 0 && b > man.MaxBatch {
			continue
		}
		in := []serve.Tensor{pixelRows(rng, b)}
		t, err := saturate("direct", b, 1, *seconds/2, func() error { _, err := model.Run(context.Background(), in); return err })
		if err != nil {
			return err
		}
		thr = append(thr, t)
		if t.RowsPS > best.RowsPS {
			best = t
		}
	}

	// 3. The engine behind a real REST handler and gRPC server on loopback.
	e, err := engine.New(engine.Options{
		Source:    engine.DirSource{Root: root},
		Runtimes:  engine.DefaultRuntimes(onnx.Settings{Library: lib}),
		Objective: 10 * time.Second,
		Policy:    policy,
		Registry:  prometheus.NewRegistry(),
	})
	if err != nil {
		return err
	}
	defer e.Close()
	if err := e.Load(context.Background(), "digits"); err != nil {
		return err
	}
	restLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: oip.NewHandler(e, oip.Options{})}
	go hs.Serve(restLn)
	defer hs.Close()
	grpcLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	gs := oip.NewGRPCServer(e, oip.Options{})
	go gs.Serve(grpcLn)
	defer gs.Stop()

	httpClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *clients * 2, MaxConnsPerHost: *clients * 2}}
	url := "http://" + restLn.Addr().String() + "/v2/models/digits/infer"
	conn, err := grpc.NewClient(grpcLn.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	grpcClient := pb.NewGRPCInferenceServiceClient(conn)

	restCall := func(b int) func() error {
		body := restBody(rng, b)
		return func() error {
			resp, err := httpClient.Post(url, "application/json", bytes.NewReader(body))
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			data, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("REST: %s: %s", resp.Status, data)
			}
			return nil
		}
	}
	grpcCall := func(b int) func() error {
		req := &pb.ModelInferRequest{ModelName: "digits", Inputs: []*pb.ModelInferRequest_InferInputTensor{{
			Name: "pixels", Datatype: "FP32", Shape: []int64{int64(b), 64},
			Contents: &pb.InferTensorContents{Fp32Contents: pixelRows(rng, b).Data.([]float32)},
		}}}
		return func() error {
			resp, err := grpcClient.ModelInfer(context.Background(), req)
			if err != nil {
				return err
			}
			if len(resp.Outputs) != 2 {
				return fmt.Errorf("gRPC: %d outputs, want 2", len(resp.Outputs))
			}
			return nil
		}
	}
	// The engine alone, in process: no protocol, no connection.
	engineCall := func(b int) func() error {
		x := pixelRows(rng, b)
		return func() error {
			_, err := e.Infer(context.Background(), &serve.Request{Model: "digits", Inputs: []serve.Tensor{x}})
			return err
		}
	}
	paths := []struct {
		name string
		call func(b int) func() error
	}{{"engine", engineCall}, {"REST", restCall}, {"gRPC", grpcCall}}

	for _, p := range paths {
		for _, b := range []int{1, 64} {
			l, err := timeCalls(p.name, b, *n, p.call(b))
			if err != nil {
				return err
			}
			lats = append(lats, l)
		}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	for _, p := range paths {
		t, err := saturate(p.name, *rows, *clients, *seconds, p.call(*rows))
		if err != nil {
			return err
		}
		thr = append(thr, t)
	}
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}

	// 4. The tables.
	fmt.Fprintf(stdout, "latency, one request at a time (closed loop), %d requests each; overhead = path - ONNX Runtime's own Run\n", *n)
	fmt.Fprintf(stdout, "%-7s %5s %10s %10s %14s %14s\n", "path", "rows", "p50", "p99", "p50 overhead", "p99 overhead")
	for _, l := range lats {
		d := direct[l.Rows]
		fmt.Fprintf(stdout, "%-7s %5d %8.1fus %8.1fus %12.1fus %12.1fus\n", l.Path, l.Rows, l.P50us, l.P99us, l.P50us-d.P50us, l.P99us-d.P99us)
	}
	fmt.Fprintf(stdout, "\nthroughput (closed loop, each client sends its next request when answered)\n")
	fmt.Fprintf(stdout, "%-7s %9s %8s %12s %14s\n", "path", "rows/req", "clients", "rows/s", "of best direct")
	for _, t := range thr {
		fmt.Fprintf(stdout, "%-7s %9d %8d %12.0f %13.1f%%\n", t.Path, t.Rows, t.Clients, t.RowsPS, 100*t.RowsPS/best.RowsPS)
	}
	if *out != "" {
		w, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer w.Close()
		enc := json.NewEncoder(w)
		for _, l := range lats {
			enc.Encode(l)
		}
		for _, t := range thr {
			enc.Encode(t)
		}
	}
	return nil
}

// pixelRows is rows of digits-like pixels (integers 0 to 16).
func pixelRows(rng *rand.Rand, rows int) serve.Tensor {
	x := make([]float32, rows*64)
	for i := range x {
		x[i] = float32(rng.IntN(17))
	}
	return serve.Tensor{Name: "pixels", Datatype: serve.FP32, Shape: []int64{int64(rows), 64}, Data: x}
}

// restBody is an Open Inference Protocol JSON infer request of rows rows.
func restBody(rng *rand.Rand, rows int) []byte {
	x := pixelRows(rng, rows).Data.([]float32)
	var sb strings.Builder
	fmt.Fprintf(&sb, `{"inputs":[{"name":"pixels","shape":[%d,64],"datatype":"FP32","data":[`, rows)
	for i, v := range x {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, "%d", int(v))
	}
	sb.WriteString("]}]}")
	return []byte(sb.String())
}

// timeCalls calls call n times one after another (after n/10 warm-up
// calls) and returns the latencies' p50 and p99.
func timeCalls(path string, rows, n int, call func() error) (ohLatency, error) {
	for range n / 10 {
		if err := call(); err != nil {
			return ohLatency{}, err
		}
	}
	took := make([]time.Duration, n)
	for i := range took {
		start := time.Now()
		if err := call(); err != nil {
			return ohLatency{}, err
		}
		took[i] = time.Since(start)
	}
	slices.Sort(took)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	return ohLatency{Path: path, Rows: rows, N: n, P50us: us(quantile(took, 0.5)), P99us: us(quantile(took, 0.99))}, nil
}

// saturate runs clients goroutines calling call back to back for d and
// returns the rows answered per second.
func saturate(path string, rows, clients int, d time.Duration, call func() error) (ohThroughput, error) {
	var done atomic.Int64
	var wg sync.WaitGroup
	var first error
	var once sync.Once
	stop := time.Now().Add(d)
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				if err := call(); err != nil {
					once.Do(func() { first = err })
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return ohThroughput{}, fmt.Errorf("%s: %w", path, first)
	}
	el := time.Since(start)
	return ohThroughput{Path: path, Rows: rows, Clients: clients, RowsPS: float64(done.Load()) * float64(rows) / el.Seconds(), Seconds: el.Seconds()}, nil
}
