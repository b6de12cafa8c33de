package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/batch"
	"github.com/virga-ml/virga/internal/serve/engine"
	"github.com/virga-ml/virga/internal/serve/runtime"
	"github.com/virga-ml/virga/internal/serve/runtime/onnx"
)

// runCost checks whether an ONNX model's Run costs more inside the engine
// than called directly: rounds of a direct loop, the engine with one client
// and the engine with -clients clients, in alternation, each printing rows/s,
// the p50 of Run's thread CPU time and the mean gap between one Run's end
// and the next's start.
func runCost(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("runcost", flag.ContinueOnError)
	modelDir := fs.String("model", "", "an ONNX model directory whose one input is FP32 [-1, 64] (bench/serve/models.py's mlp1024/1)")
	rows := fs.Int("rows", 64, "rows per call")
	clients := fs.Int("clients", 8, "the engine's clients in its saturated runs")
	rounds := fs.Int("rounds", 4, "rounds of the three runs")
	seconds := fs.Duration("duration", time.Second, "each run's length")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *modelDir == "" {
		return fmt.Errorf("-model: want an ONNX model directory")
	}
	lib, err := onnx.Library()
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(*modelDir)
	if err != nil {
		return err
	}
	root, err := os.MkdirTemp("", "virga-runcost-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	if err := os.Symlink(filepath.Dir(abs), filepath.Join(root, "m")); err != nil {
		return err
	}
	man, err := engine.ReadManifest(abs)
	if err != nil {
		return err
	}
	// The direct model first, then the engine's, as overhead loads them.
	loader := &onnx.Loader{Settings: onnx.Settings{Library: lib}}
	direct, err := loader.Load(abs, man)
	if err != nil {
		return err
	}
	defer direct.Close()
	timed := &timedLoader{Loader: loader}
	rts := engine.DefaultRuntimes(onnx.Settings{Library: lib})
	rts[onnx.Format] = timed
	e, err := engine.New(engine.Options{
		Source:    engine.DirSource{Root: root},
		Runtimes:  rts,
		Objective: 10 * time.Second,
		Policy:    func(string, string) batch.Policy { return &batch.Deadline{} },
		Registry:  prometheus.NewRegistry(),
	})
	if err != nil {
		return err
	}
	defer e.Close()
	if err := e.Load(context.Background(), "m"); err != nil {
		return err
	}
	in := []serve.Tensor{pixelRows(rand.New(rand.NewPCG(1, 1)), *rows)}
	directModel := &timedModel{Model: direct}
	runs := []struct {
		name    string
		clients int
		m       *timedModel
		call    func() error
	}{
		{"direct", 1, directModel, func() error { _, err := directModel.Run(context.Background(), in); return err }},
		{"engine", 1, timed.model, nil},
		{"engine", *clients, timed.model, nil},
	}
	for i := range runs {
		if runs[i].call == nil {
			runs[i].call = func() error {
				_, err := e.Infer(context.Background(), &serve.Request{Model: "m", Inputs: in})
				return err
			}
		}
	}
	fmt.Fprintf(stdout, "%-7s %7s %10s %14s %14s\n", "path", "clients", "rows/s", "Run CPU p50", "gap mean")
	for range *rounds {
		for _, r := range runs {
			r.m.start()
			t, err := saturate(r.name, *rows, r.clients, *seconds, r.call)
			if err != nil {
				return err
			}
			cpu, gap := r.m.stop()
			fmt.Fprintf(stdout, "%-7s %7d %10.0f %12.0fus %12.1fus\n", r.name, r.clients, t.RowsPS, us(cpu), us(gap))
		}
	}
	return nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// timedLoader loads models that time their Runs.
type timedLoader struct {
	*onnx.Loader
	model *timedModel
}

func (l *timedLoader) Load(dir string, m serve.Manifest) (runtime.Model, error) {
	model, err := l.Loader.Load(dir, m)
	if err != nil {
		return nil, err
	}
	l.model = &timedModel{Model: model}
	return l.model, nil
}

// timedModel records each Run's thread CPU time (the OS thread locked
// around it) and its wall-clock start and end while on.
type timedModel struct {
	runtime.Model
	on          atomic.Bool
	mu          sync.Mutex
	cpu         []time.Duration
	starts, end []time.Time
}

func (m *timedModel) start() {
	m.mu.Lock()
	m.cpu, m.starts, m.end = nil, nil, nil
	m.mu.Unlock()
	m.on.Store(true)
}

// stop returns the p50 of the Runs' CPU time and the mean gap between
// consecutive Runs.
func (m *timedModel) stop() (time.Duration, time.Duration) {
	m.on.Store(false)
	m.mu.Lock()
	defer m.mu.Unlock()
	cpu := slices.Clone(m.cpu)
	slices.Sort(cpu)
	var gaps time.Duration
	n := 0
	for i := 1; i < len(m.starts) && i < len(m.end); i++ {
		gaps += m.starts[i].Sub(m.end[i-1])
		n++
	}
	return quantile(cpu, 0.5), gaps / time.Duration(max(n, 1))
}

func (m *timedModel) Run(ctx context.Context, inputs []serve.Tensor) ([]serve.Tensor, error) {
	if !m.on.Load() {
		return m.Model.Run(ctx, inputs)
	}
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	start, cpu0 := time.Now(), threadCPU()
	out, err := m.Model.Run(ctx, inputs)
	cpu, end := threadCPU()-cpu0, time.Now()
	m.mu.Lock()
	m.cpu = append(m.cpu, cpu)
	m.starts = append(m.starts, start)
	m.end = append(m.end, end)
	m.mu.Unlock()
	return out, err
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
