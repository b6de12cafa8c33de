package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
	// DirectP50us and DirectP99us are direct's, timed in alternation with
	// the path's calls (timePaired): its overhead is the difference.
	DirectP50us float64 `json:"direct_p50_us,omitempty"`
	DirectP99us float64 `json:"direct_p99_us,omitempty"`
}

type ohThroughput struct {
	Path    string  `json:"path"`
	Rows    int     `json:"rows_per_request"`
	Clients int     `json:"clients"`
	RowsPS  float64 `json:"rows_per_s"`
	Seconds float64 `json:"seconds"`
	// CPU is the process's CPU time over the run's wall time (cores used:
	// server and load generator together; 2 is all of this machine).
	CPU float64 `json:"cpu_cores"`
}

// overhead measures what Virga's front ends and engine add to ONNX Runtime
// for the digits model (see the README): latency of one request at a time
// through REST and gRPC against the model's Run called directly, and
// throughput at saturation against Run called in a loop.
func overhead(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("overhead", flag.ContinueOnError)
	modelDir := fs.String("model", "", "an ONNX digits model directory (default: train and export one with examples/digits-torch/train.py)")
	n := fs.Int("n", 2000, "requests per latency measurement")
	seconds := fs.Duration("duration", 4*time.Second, "each throughput measurement's length")
	clientList := fs.String("clients", "8,32", "the concurrent clients swept at saturation (comma-separated)")
	rowList := fs.String("rows", "1,64,1024", "the rows per request swept at saturation (comma-separated)")
	only := fs.String("paths", "", "measure only these paths at saturation (comma-separated: engine, REST-json, REST-bin, REST-shm, gRPC, gRPC-raw, gRPC-shm; default all)")
	repeats := fs.Int("repeat", 2, "reruns of each path's best configuration (its figure is the median of all runs)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the saturation runs through the engine to this file")
	out := fs.String("out", "", "write the measurements as JSON lines to this file")
	batching := fs.String("batching", "deadline", "the engine's batching policy: deadline (virga serve's default) or greedy (the engine's own default: run what is queued)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	sweepClients, err := intList("-clients", *clientList)
	if err != nil {
		return err
	}
	sweepRows, err := intList("-rows", *rowList)
	if err != nil {
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
	var lats []ohLatency
	directCall := map[int]func() error{}
	for _, b := range []int{1, 64} {
		in := []serve.Tensor{pixelRows(rng, b)}
		directCall[b] = func() error { _, err := model.Run(context.Background(), in); return err }
		l, err := timeCalls("direct", b, *n, directCall[b])
		if err != nil {
			return err
		}
		lats = append(lats, l)
	}
	var best ohThroughput
	var thr []ohThroughput
	for _, b := range []int{64, 256, 1024} {
		if man.MaxBatch > 0 && b > man.MaxBatch {
			continue
		}
		in := []serve.Tensor{pixelRows(rng, b)}
		t, err := saturate("direct", b, 1, *seconds, func() error { _, err := model.Run(context.Background(), in); return err })
		if err != nil {
			return err
		}
		thr = append(thr, t)
		if t.RowsPS > best.RowsPS {
			best = t
		}
	}
	// The denominators: the best batch size's median rows/s over 1 +
	// repeat runs; and the batch size with the most rows per CPU-second,
	// its median over 1 + repeat runs (the figure "per core" compares
	// with: on a shared machine a run's share of the cores varies more
	// than what it does with them).
	rerun := func(first ohThroughput, f func(ohThroughput) float64) ([]float64, error) {
		vals := []float64{f(first)}
		in := []serve.Tensor{pixelRows(rng, first.Rows)}
		for range *repeats {
			t, err := saturate("direct", first.Rows, 1, *seconds, func() error { _, err := model.Run(context.Background(), in); return err })
			if err != nil {
				return nil, err
			}
			vals = append(vals, f(t))
		}
		return vals, nil
	}
	median := func(v []float64) float64 {
		v = slices.Clone(v)
		slices.Sort(v)
		return v[len(v)/2]
	}
	rowsPerCPU := func(t ohThroughput) float64 {
		if t.CPU <= 0 {
			return 0
		}
		return t.RowsPS / t.CPU
	}
	directRuns, err := rerun(best, func(t ohThroughput) float64 { return t.RowsPS })
	if err != nil {
		return err
	}
	best.RowsPS = median(directRuns)
	bestPC := thr[0]
	for _, t := range thr {
		if rowsPerCPU(t) > rowsPerCPU(bestPC) {
			bestPC = t
		}
	}
	directPCRuns, err := rerun(bestPC, rowsPerCPU)
	if err != nil {
		return err
	}
	directPerCPU := median(directPCRuns)

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
	shm := oip.NewSharedMemory() // one set of regions for both front ends, as virga serve has
	defer shm.Close()
	hs := &http.Server{Handler: oip.NewHandler(e, oip.Options{SharedMemory: shm})}
	go hs.Serve(restLn)
	defer hs.Close()
	grpcLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	gs := oip.NewGRPCServer(e, oip.Options{SharedMemory: shm})
	go gs.Serve(grpcLn)
	defer gs.Stop()

	// Everything the load generator starts from here on (its goroutines,
	// the HTTP transport's and the gRPC channel's) carries side=client in
	// the CPU profile; the servers' goroutines, started above, carry none
	// (in the engine path the client goroutine runs the engine itself).
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("side", "client")))
	maxClients := slices.Max(sweepClients)
	httpClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: maxClients * 2, MaxConnsPerHost: maxClients * 2}}
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
	// The binary tensor data extension (what Triton's perf_analyzer sends
	// by default): a JSON header, the input's raw bytes after it, the
	// outputs answered as raw bytes too.
	restBinCall := func(b int) func() error {
		raw := rawFloats(pixelRows(rng, b).Data.([]float32))
		header := fmt.Sprintf(`{"inputs":[{"name":"pixels","shape":[%d,64],"datatype":"FP32","parameters":{"binary_data_size":%d}}],"parameters":{"binary_data_output":true}}`, b, len(raw))
		body := append([]byte(header), raw...)
		return func() error {
			req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/octet-stream")
			req.Header.Set("Inference-Header-Content-Length", fmt.Sprint(len(header)))
			resp, err := httpClient.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			data, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("REST binary: %s: %s", resp.Status, data)
			}
			if resp.Header.Get("Inference-Header-Content-Length") == "" {
				return fmt.Errorf("REST binary: the answer has no binary data")
			}
			return nil
		}
	}
	grpcRawCall := func(b int) func() error {
		req := &pb.ModelInferRequest{ModelName: "digits", Inputs: []*pb.ModelInferRequest_InferInputTensor{{
			Name: "pixels", Datatype: "FP32", Shape: []int64{int64(b), 64},
		}}, RawInputContents: [][]byte{rawFloats(pixelRows(rng, b).Data.([]float32))}}
		return func() error {
			resp, err := grpcClient.ModelInfer(context.Background(), req)
			if err != nil {
				return err
			}
			if len(resp.Outputs) != 2 {
				return fmt.Errorf("gRPC raw: %d outputs, want 2", len(resp.Outputs))
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
	// The system shared memory extension (perf_analyzer's --shared-memory
	// system): the input's rows in one region every client reads, each
	// client's outputs in a region of its own; the request carries names,
	// shapes and offsets. The clients do not write their inputs or read
	// their outputs, as the direct loop does not.
	outputs := man.Signature.Outputs
	shmSlots, err := shmRegions(httpClient, "http://"+restLn.Addr().String(), slices.Max(sweepRows), maxClients, outputs, rng)
	if err != nil {
		return err
	}
	defer shmSlots.remove()
	restShmCall := func(b int) func() error {
		bodies := make([][]byte, maxClients)
		for k := range bodies {
			bodies[k] = []byte(fmt.Sprintf(`{"inputs":[{"name":"pixels","shape":[%d,64],"datatype":"FP32","parameters":{"shared_memory_region":"in","shared_memory_byte_size":%d}}],"outputs":[%s]}`,
				b, b*64*4, shmSlots.outputsJSON(k, b)))
		}
		return func() error {
			k := <-shmSlots.free
			defer func() { shmSlots.free <- k }()
			resp, err := httpClient.Post(url, "application/json", bytes.NewReader(bodies[k]))
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			data, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("REST shared memory: %s: %s", resp.Status, data)
			}
			return nil
		}
	}
	grpcShmCall := func(b int) func() error {
		reqs := make([]*pb.ModelInferRequest, maxClients)
		for k := range reqs {
			reqs[k] = &pb.ModelInferRequest{ModelName: "digits", Inputs: []*pb.ModelInferRequest_InferInputTensor{{
				Name: "pixels", Datatype: "FP32", Shape: []int64{int64(b), 64}, Parameters: shmParams("in", 0, b*64*4),
			}}, Outputs: shmSlots.outputsGRPC(k, b)}
		}
		return func() error {
			k := <-shmSlots.free
			defer func() { shmSlots.free <- k }()
			resp, err := grpcClient.ModelInfer(context.Background(), reqs[k])
			if err != nil {
				return err
			}
			if len(resp.Outputs) != len(outputs) {
				return fmt.Errorf("gRPC shared memory: %d outputs, want %d", len(resp.Outputs), len(outputs))
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
	}{{"engine", engineCall}, {"REST-json", restCall}, {"REST-bin", restBinCall}, {"REST-shm", restShmCall}, {"gRPC", grpcCall}, {"gRPC-raw", grpcRawCall}, {"gRPC-shm", grpcShmCall}}
	if *only != "" {
		want := strings.Split(*only, ",")
		paths = slices.DeleteFunc(paths, func(p struct {
			name string
			call func(b int) func() error
		}) bool {
			return !slices.Contains(want, p.name)
		})
		if len(paths) == 0 {
			return fmt.Errorf("-paths %q: want some of engine, REST-json, REST-bin, REST-shm, gRPC, gRPC-raw, gRPC-shm", *only)
		}
	}

	for _, p := range paths {
		for _, b := range []int{1, 64} {
			l, d, err := timePaired(p.name, b, *n, time.Now, directCall[b], p.call(b))
			if err != nil {
				return err
			}
			l.DirectP50us, l.DirectP99us = d.P50us, d.P99us
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
	// Every path at every rows per request and number of clients; then
	// each path's best configuration again, repeat times: its figure is
	// the median of its runs, and their spread is the noise.
	var sweep []ohThroughput
	type pathBest struct {
		t    ohThroughput
		runs []float64
		cpus []float64
		// paired is each rerun's rows/s over that of a direct loop run
		// just before it (best direct's rows per call): both under the
		// same load.
		paired []float64
	}
	bests := make([]pathBest, len(paths))
	for k, p := range paths {
		for _, b := range sweepRows {
			if man.MaxBatch > 0 && b > man.MaxBatch {
				continue
			}
			for _, c := range sweepClients {
				t, err := saturate(p.name, b, c, *seconds, p.call(b))
				if err != nil {
					return err
				}
				sweep = append(sweep, t)
				if t.RowsPS > bests[k].t.RowsPS {
					bests[k].t = t
				}
			}
		}
	}
	bestIn := []serve.Tensor{pixelRows(rng, best.Rows)}
	bestDirect := func() error { _, err := model.Run(context.Background(), bestIn); return err }
	for k, p := range paths {
		b := &bests[k]
		b.runs = []float64{b.t.RowsPS}
		b.cpus = []float64{b.t.CPU}
		for range *repeats {
			d, err := saturate("direct", best.Rows, 1, *seconds, bestDirect)
			if err != nil {
				return err
			}
			t, err := saturate(p.name, b.t.Rows, b.t.Clients, *seconds, p.call(b.t.Rows))
			if err != nil {
				return err
			}
			b.runs = append(b.runs, t.RowsPS)
			b.cpus = append(b.cpus, t.CPU)
			b.paired = append(b.paired, t.RowsPS/d.RowsPS)
		}
	}
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	thr = append(thr, sweep...)

	// 4. The tables.
	fmt.Fprintf(stdout, "latency, one request at a time (closed loop), %d requests each; overhead = path - ONNX Runtime's own Run timed in alternation with it (direct p50)\n", *n)
	fmt.Fprintf(stdout, "%-9s %5s %10s %10s %12s %14s %14s\n", "path", "rows", "p50", "p99", "direct p50", "p50 overhead", "p99 overhead")
	for _, l := range lats {
		if l.Path == "direct" {
			fmt.Fprintf(stdout, "%-9s %5d %8.1fus %8.1fus\n", l.Path, l.Rows, l.P50us, l.P99us)
			continue
		}
		fmt.Fprintf(stdout, "%-9s %5d %8.1fus %8.1fus %10.1fus %12.1fus %12.1fus\n", l.Path, l.Rows, l.P50us, l.P99us, l.DirectP50us, l.P50us-l.DirectP50us, l.P99us-l.DirectP99us)
	}
	fmt.Fprintf(stdout, "\nthroughput (closed loop, each client sends its next request when answered)\n")
	// Per core: rows per second of the process's CPU time (server and load
	// generator together) against direct's; the machine is shared, so a
	// run's share of the cores varies, and this figure less than rows/s.
	perCore := func(rowsPS, cpu float64) float64 {
		if cpu <= 0 || directPerCPU <= 0 {
			return 0
		}
		return (rowsPS / cpu) / directPerCPU
	}
	fmt.Fprintf(stdout, "%-9s %9s %8s %12s %14s %6s %14s\n", "path", "rows/req", "clients", "rows/s", "of best direct", "cores", "per core")
	for _, t := range thr {
		fmt.Fprintf(stdout, "%-9s %9d %8d %12.0f %13.1f%% %6.2f %13.1f%%\n", t.Path, t.Rows, t.Clients, t.RowsPS, 100*t.RowsPS/best.RowsPS, t.CPU, 100*perCore(t.RowsPS, t.CPU))
	}
	fmt.Fprintf(stdout, "\nbest direct (the denominator): %d rows a call, median %.0f rows/s of runs %.0f\n", best.Rows, best.RowsPS, directRuns)
	fmt.Fprintf(stdout, "best direct per core (the denominator per core): %d rows a call, median %.0f rows per CPU-second of runs %.0f\n", bestPC.Rows, directPerCPU, directPCRuns)
	fmt.Fprintf(stdout, "\nbest per path: its configuration rerun %d more times; rows/s is the median of the runs, range their spread\n", *repeats)
	fmt.Fprintf(stdout, "of paired direct: the median of each rerun's rows/s over a direct loop's run just before it (the same load)\n")
	fmt.Fprintf(stdout, "%-9s %9s %8s %12s %14s %24s %6s %14s %17s\n", "path", "rows/req", "clients", "rows/s", "of best direct", "range of best direct", "cores", "per core", "of paired direct")
	summary := []ohBest{{Path: "direct", Rows: best.Rows, Clients: 1, RowsPS: best.RowsPS, Runs: directRuns, OfDirect: 1, OfDirectPerCore: 1}}
	for k, p := range paths {
		b := bests[k]
		runs := slices.Clone(b.runs)
		slices.Sort(runs)
		med := runs[len(runs)/2]
		cpus := slices.Clone(b.cpus)
		slices.Sort(cpus)
		cpu := cpus[len(cpus)/2]
		paired := "-"
		ofPaired := 0.0
		if len(b.paired) > 0 {
			ofPaired = median(b.paired)
			paired = fmt.Sprintf("%.1f%%", 100*ofPaired)
		}
		fmt.Fprintf(stdout, "%-9s %9d %8d %12.0f %13.1f%% %10.1f%% to %5.1f%% %6.2f %13.1f%% %17s\n", p.name, b.t.Rows, b.t.Clients, med, 100*med/best.RowsPS, 100*runs[0]/best.RowsPS, 100*runs[len(runs)-1]/best.RowsPS, cpu, 100*perCore(med, cpu), paired)
		summary = append(summary, ohBest{Path: p.name, Rows: b.t.Rows, Clients: b.t.Clients, RowsPS: med, Runs: b.runs, OfDirect: med / best.RowsPS, CPU: cpu, OfDirectPerCore: perCore(med, cpu), OfPairedDirect: ofPaired})
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
		for _, b := range summary {
			enc.Encode(b)
		}
	}
	return nil
}

// ohBest is a path's best configuration: the median of its runs.
type ohBest struct {
	Path     string    `json:"best_path"`
	Rows     int       `json:"rows_per_request"`
	Clients  int       `json:"clients"`
	RowsPS   float64   `json:"rows_per_s"`
	Runs     []float64 `json:"runs_rows_per_s"`
	OfDirect float64   `json:"of_best_direct"`
	CPU      float64   `json:"cpu_cores"` // the median run's process CPU over wall time
	// OfDirectPerCore is rows per CPU-second against direct's.
	OfDirectPerCore float64 `json:"of_best_direct_per_core"`
	// OfPairedDirect is the median over the reruns of the path's rows/s
	// over a direct loop's run just before it.
	OfPairedDirect float64 `json:"of_paired_direct,omitempty"`
}

// intList parses a comma-separated list of positive integers.
func intList(flag, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%s %q: want positive integers separated by commas", flag, s)
		}
		out = append(out, n)
	}
	return out, nil
}

// rawFloats is x as the protocol's raw contents: little-endian FP32.
func rawFloats(x []float32) []byte {
	out := make([]byte, 0, 4*len(x))
	for _, v := range x {
		out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
	}
	return out
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
	took, err := sample(n, time.Now, call)
	if err != nil {
		return ohLatency{}, err
	}
	return latencyOf(path, rows, took), nil
}

// pairedBlocks is how many alternating blocks timePaired splits its calls
// into.
const pairedBlocks = 50

// timePaired times n calls of call and n of direct alternately, in
// pairedBlocks blocks of each, direct's first then the path's first (after
// n/10 warm-up calls of each), and
// returns both latencies' p50 and p99. The machine is shared and its load
// drifts over seconds: a path timed after direct, as timeCalls would,
// carries the drift into its overhead; timed in alternation, both see the
// same load.
func timePaired(path string, rows, n int, now func() time.Time, direct, call func() error) (ohLatency, ohLatency, error) {
	for _, f := range []func() error{direct, call} {
		for range n / 10 {
			if err := f(); err != nil {
				return ohLatency{}, ohLatency{}, err
			}
		}
	}
	var got, base []time.Duration
	block := max(n/pairedBlocks, 1)
	for k := 0; k < n; k += block {
		type timed struct {
			call func() error
			into *[]time.Duration
		}
		order := []timed{{direct, &base}, {call, &got}}
		if (k/block)%2 == 1 {
			// ABBA: a drift within a pair of blocks favors neither.
			order[0], order[1] = order[1], order[0]
		}
		for _, f := range order {
			took, err := sample(min(block, n-k), now, f.call)
			if err != nil {
				return ohLatency{}, ohLatency{}, err
			}
			*f.into = append(*f.into, took...)
		}
	}
	return latencyOf(path, rows, got), latencyOf("direct", rows, base), nil
}

// sample times n calls of call one after another.
func sample(n int, now func() time.Time, call func() error) ([]time.Duration, error) {
	took := make([]time.Duration, n)
	for i := range took {
		start := now()
		if err := call(); err != nil {
			return nil, err
		}
		took[i] = now().Sub(start)
	}
	return took, nil
}

func latencyOf(path string, rows int, took []time.Duration) ohLatency {
	took = slices.Clone(took)
	slices.Sort(took)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	return ohLatency{Path: path, Rows: rows, N: len(took), P50us: us(quantile(took, 0.5)), P99us: us(quantile(took, 0.99))}
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
	cpu0 := cpuTime()
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
	cpu := cpuTime() - cpu0
	return ohThroughput{Path: path, Rows: rows, Clients: clients, RowsPS: float64(done.Load()) * float64(rows) / el.Seconds(), Seconds: el.Seconds(), CPU: cpu.Seconds() / el.Seconds()}, nil
}

// cpuTime is the CPU time (user and system) the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
