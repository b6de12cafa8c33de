// Command linear measures Virga's linear learner (elastic/algo/linear): rows
// per second per core on dense synthetic data (binary logistic regression
// with its grid of models), on 1 and 2 workers (elastic.Local with 2
// shards), the parameter-server traffic per mini-batch, and
// scikit-learn's SGDClassifier.partial_fit on the same data and machine.
//
//	go run ./bench/elastic/linear [-rows 1000000] [-features 64] [-batch 1000] [-repeat 3]
//
// Each configuration runs -repeat times and the fastest run is reported,
// for Virga and for scikit-learn alike.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/virga-ml/virga/elastic"
	"github.com/virga-ml/virga/elastic/algo/linear"
)

func main() {
	rows := flag.Int("rows", 1_000_000, "rows")
	cols := flag.Int("features", 64, "features")
	batch := flag.Int("batch", 1000, "rows per mini-batch")
	repeat := flag.Int("repeat", 3, "runs of each configuration; the fastest is reported (the machine is shared)")
	sk := flag.Bool("sklearn", true, "run scikit-learn (/usr/bin/python3) on the same data")
	flag.Parse()
	log.SetFlags(0)

	x, y := data(*rows, *cols)
	grids := []struct {
		name    string
		lr, l2  []float64
		skModel int
	}{
		{"grid 4x4 = 16 models", nil, nil, 16}, // the default grid (Config's zero values), what users run
		{"1 model", []float64{0.1}, []float64{0}, 1},
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("linear learner, binary logistic, %d rows x %d dense features, mini-batch %d, GOMAXPROCS %d, %d CPUs, load average %s\n",
		*rows, *cols, *batch, runtime.GOMAXPROCS(0), runtime.NumCPU(), strings.Join(strings.Fields(string(load) + " ? ? ?")[:3], " "))
	fmt.Printf("PS bytes/batch: one pull and one push of the learner's state tensor per mini-batch (float64s)\n\n")
	fmt.Printf("%-22s %-8s %14s %16s %12s %18s %10s\n", "models", "workers", "rows/s", "rows/s per core", "seconds", "PS bytes/batch", "test acc")
	for _, g := range grids {
		for _, workers := range []int{1, 2} {
			l, err := linear.New(linear.Config{Predictor: linear.Binary, Features: *cols, LearningRates: g.lr, L2: g.l2})
			if err != nil {
				log.Fatal(err)
			}
			var (
				m   elastic.Model
				st  *elastic.MemState
				sec = math.Inf(1)
			)
			for range max(*repeat, 1) {
				runtime.GC()
				start := time.Now()
				m, st, err = elastic.Local(context.Background(), l, elastic.Shards(x, y, *cols, workers, *batch))
				if err != nil {
					log.Fatal(err)
				}
				sec = min(sec, time.Since(start).Seconds())
			}
			sm, err := l.Save(m)
			if err != nil {
				log.Fatal(err)
			}
			acc := accuracy(sm, x[:20000**cols], y[:20000])
			if got, want := st.Pushes()-1, int64(workers*((*rows/workers+*batch-1) / *batch)); got > want || got < want-int64(workers) {
				log.Fatalf("%d pushes for about %d mini-batches", got, want)
			}
			traffic := 2 * 8 * l.StateFloats() // one pull and one push of the state tensor
			rps := float64(*rows) / sec
			fmt.Printf("%-22s %-8d %14.0f %16.0f %12.3f %18d %10.4f\n", g.name, workers, rps, rps/float64(min(workers, runtime.NumCPU())), sec, traffic, acc)
		}
	}
	fmt.Printf("\nover the network runtime: a coordinator serving the state over HTTP on loopback, workers joining it\n")
	fmt.Printf("(RemoteState, claiming shards); traffic measured: tensor bytes pulled and pushed, HTTP calls, per mini-batch\n\n")
	fmt.Printf("%-22s %-8s %14s %16s %12s %18s %12s\n", "models", "workers", "rows/s", "rows/s per core", "seconds", "PS bytes/batch", "calls/batch")
	for _, g := range grids {
		for _, workers := range []int{1, 2} {
			l, err := linear.New(linear.Config{Predictor: linear.Binary, Features: *cols, LearningRates: g.lr, L2: g.l2})
			if err != nil {
				log.Fatal(err)
			}
			sec, bytes, calls := math.Inf(1), 0.0, 0.0
			for range max(*repeat, 1) {
				runtime.GC()
				s, b, c := remote(l, x, y, *cols, workers, *batch)
				if s < sec {
					sec, bytes, calls = s, b, c
				}
			}
			rps := float64(*rows) / sec
			fmt.Printf("%-22s %-8d %14.0f %16.0f %12.3f %18.0f %12.2f\n", g.name, workers, rps, rps/float64(min(workers, runtime.NumCPU())), sec, bytes, calls)
		}
	}
	if !*sk {
		return
	}
	dir, err := os.MkdirTemp("", "virga-linear-bench")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	xp, yp := filepath.Join(dir, "x.f64"), filepath.Join(dir, "y.f64")
	if err := writeF64(xp, x); err != nil {
		log.Fatal(err)
	}
	if err := writeF64(yp, y); err != nil {
		log.Fatal(err)
	}
	_, self, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(self), "sklearn_sgd.py")
	cmd := exec.Command("/usr/bin/python3", script, xp, yp, strconv.Itoa(*rows), strconv.Itoa(*cols), strconv.Itoa(*batch), "16", strconv.Itoa(max(*repeat, 1)))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		log.Fatalf("scikit-learn (apt-get install python3-sklearn): %v", err)
	}
	var r map[string]float64
	if err := json.Unmarshal(out, &r); err != nil {
		log.Fatalf("scikit-learn: %v: %s", err, out)
	}
	fmt.Printf("\nscikit-learn SGDClassifier(loss=log_loss).partial_fit, mini-batch %d, 1 core:\n", *batch)
	fmt.Printf("%-22s %-8s %14s %16s\n", "models", "workers", "rows/s", "rows/s per core")
	fmt.Printf("%-22s %-8d %14.0f %16.0f\n", "1 model", 1, r["one_model_rows_per_s"], r["one_model_rows_per_s"])
	fmt.Printf("%-22s %-8d %14.0f %16.0f   (16 partial_fit calls per batch, first 200k rows)\n", "16 models", 1, r["grid_rows_per_s"], r["grid_rows_per_s"])
}

// remote trains l over the network runtime: a coordinator on loopback HTTP
// and workers (goroutines, each its own RemoteState and connections) that
// claim the shards. It returns the seconds, the tensor bytes moved per
// mini-batch and the HTTP calls per mini-batch.
func remote(l *linear.Learner, x, y []float64, cols, workers, batch int) (sec, bytesPerBatch, callsPerBatch float64) {
	ctx := context.Background()
	st := elastic.NewMemState(0)
	if err := l.Initialize(ctx, st); err != nil {
		log.Fatal(err)
	}
	coord := elastic.NewCoordinator(st)
	coord.Shards = workers
	srv := httptest.NewServer(coord)
	defer srv.Close()
	start := time.Now()
	states := make([]*elastic.RemoteState, workers)
	errs := make(chan error, workers)
	for i := range workers {
		w, err := elastic.Join(ctx, srv.URL, "")
		if err != nil {
			log.Fatal(err)
		}
		states[i] = w
		go func() {
			errs <- w.Work(ctx, l, 10*time.Millisecond, func(ctx context.Context, k, n int, pos int64) (elastic.Source, error) {
				return elastic.SliceOpener(x, y, cols, n, batch)(ctx, k, pos)
			})
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			log.Fatal(err)
		}
	}
	sec = time.Since(start).Seconds()
	if _, err := l.Finalize(ctx, st); err != nil {
		log.Fatal(err)
	}
	batches := float64((len(y) + batch - 1) / batch)
	var moved, calls int64
	for _, w := range states {
		pulled, pushed, pulls, pushes := w.Traffic()
		moved += pulled + pushed
		calls += pulls + pushes
	}
	return sec, float64(moved) / batches, float64(calls) / batches
}

// data draws rows of dense features (assorted means and scales) and labels
// from a logistic model.
func data(rows, cols int) (x, y []float64) {
	rng := rand.New(rand.NewPCG(1, 2))
	mean, sd, w := make([]float64, cols), make([]float64, cols), make([]float64, cols)
	for j := range cols {
		mean[j], sd[j] = 3*rng.NormFloat64(), math.Exp(rng.NormFloat64())
		w[j] = 2 * rng.NormFloat64() / math.Sqrt(float64(cols)) / sd[j]
	}
	x, y = make([]float64, rows*cols), make([]float64, rows)
	for i := range rows {
		z := 0.0
		for j := range cols {
			v := mean[j] + sd[j]*rng.NormFloat64()
			x[i*cols+j] = v
			z += w[j] * (v - mean[j])
		}
		if rng.Float64() < 1/(1+math.Exp(-z)) {
			y[i] = 1
		}
	}
	return x, y
}

func accuracy(sm *elastic.SavedModel, x, y []float64) float64 {
	p, err := linear.Predict(sm, x)
	if err != nil {
		log.Fatal(err)
	}
	ok := 0
	for i := range y {
		if p[i] == y[i] {
			ok++
		}
	}
	return float64(ok) / float64(len(y))
}

func writeF64(path string, v []float64) error {
	b := make([]byte, 8*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(f))
	}
	return os.WriteFile(path, b, 0o644)
}
