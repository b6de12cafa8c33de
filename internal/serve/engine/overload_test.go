package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/batch"
	"github.com/virga-ml/virga/internal/serve/runtime/mlp"
)

// writeHeavyMLP writes a virga.mlp/v1 model wide enough that a call costs
// a measurable time (about a hundred microseconds a row).
func writeHeavyMLP(t testing.TB, root, name string, hidden, maxBatch int) {
	t.Helper()
	dir := filepath.Join(root, name, "1")
	writeMLP(t, root, name, "1", 0, 1)
	f := mlp.File{Inputs: 64, Hidden: hidden, Classes: 10, InputScale: 1.0 / 16}
	rng := rand.New(rand.NewPCG(9, 9))
	f.Params = make([]float64, hidden*64+hidden+10*hidden+10)
	for i := range f.Params {
		f.Params[i] = rng.Float64()*0.02 - 0.01
	}
	writeJSON(t, filepath.Join(dir, "mlp.json"), f)
	writeJSON(t, filepath.Join(dir, serve.ManifestFile), serve.Manifest{Format: mlp.Format, File: "mlp.json", MaxBatch: maxBatch, Signature: f.Signature()})
}

type overloadResult struct {
	served, late, refused, other int
	slowestRefusal               time.Duration
	medianRefusal                time.Duration
	worstLateBy                  time.Duration
	refusals                     []time.Duration
	lateBy                       []time.Duration
	// stall is the longest a goroutine that sleeps 1 ms at a time
	// overslept during the run: how long the machine left this process
	// without a CPU at worst.
	stall time.Duration
}

// lateBeyond counts the late requests that were late by more than d.
func (r overloadResult) lateBeyond(d time.Duration) int {
	n := 0
	for _, l := range r.lateBy {
		if l > d {
			n++
		}
	}
	return n
}

// overload sends single-row requests to model at rate per second, Poisson,
// for d, each with deadline arrival+objective, and sorts the answers.
func overload(t *testing.T, e *Engine, model string, rate float64, d, objective time.Duration) overloadResult {
	rng := rand.New(rand.NewPCG(1, 2))
	var mu sync.Mutex
	var res overloadResult
	var wg sync.WaitGroup
	stop := make(chan struct{})
	stalled := make(chan time.Duration)
	go func() {
		var worst time.Duration
		for {
			select {
			case <-stop:
				stalled <- worst
				return
			default:
			}
			t0 := time.Now()
			time.Sleep(time.Millisecond)
			worst = max(worst, time.Since(t0)-time.Millisecond)
		}
	}()
	start := time.Now()
	next := start
	for next.Sub(start) < d {
		next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		time.Sleep(time.Until(next))
		wg.Add(1)
		go func() {
			defer wg.Done()
			arrived := time.Now()
			_, err := e.Infer(context.Background(), &serve.Request{Model: model, Inputs: []serve.Tensor{pixels(1)}, Arrived: arrived})
			took := time.Since(arrived)
			mu.Lock()
			defer mu.Unlock()
			var refused *serve.RefusedError
			switch {
			case err == nil && took <= objective:
				res.served++
			case err == nil:
				res.served++
				res.late++
				res.worstLateBy = max(res.worstLateBy, took-objective)
				res.lateBy = append(res.lateBy, took-objective)
			case errors.As(err, &refused):
				res.refused++
				res.slowestRefusal = max(res.slowestRefusal, took)
				res.refusals = append(res.refusals, took)
			default:
				res.other++
				t.Errorf("infer: %v", err)
			}
		}()
	}
	wg.Wait()
	close(stop)
	res.stall = <-stalled
	if len(res.refusals) > 0 {
		slices.Sort(res.refusals)
		res.medianRefusal = res.refusals[len(res.refusals)/2]
	}
	return res
}

// TestOverloadDeadlineServesInTimeOrRefuses drives a model at twice the
// rate it can serve: with the deadline policy every request answered is
// answered within its objective and the others are refused before their
// deadline passes; Triton's fixed batcher serves late instead.
func TestOverloadDeadlineServesInTimeOrRefuses(t *testing.T) {
	if testing.Short() {
		t.Skip("drives a model at twice its capacity for seconds")
	}
	root := t.TempDir()
	hidden := 32768 // about 1.5 ms a row
	if raceEnabled {
		hidden /= 8
	}
	writeHeavyMLP(t, root, "heavy", hidden, 8)
	const objective = 100 * time.Millisecond
	// Both engines share one profile (the first load measures it, the
	// second reads it from the cache), so that both are driven at the same
	// rate: profiles measured apart on a busy machine can differ by half, and
	// then one of them is not overloaded at all.
	profiles := t.TempDir()
	// drive runs the policy name's engine at rate (0: twice the profiled
	// capacity) and returns what happened and the capacity its batches
	// showed (rows per second of compute, at the batch sizes it ran).
	drive := func(name string, rate float64) (overloadResult, float64) {
		e := newEngine(t, Options{
			Source:       DirSource{Root: root},
			Objective:    objective,
			ProfileCache: profiles,
			Pinned:       []string{"heavy"},
			Policy: func(string, string) batch.Policy {
				p, err := batch.New(name, objective)
				if err != nil {
					t.Fatal(err)
				}
				return p
			},
		})
		defer e.Close()
		waitReady(t, e)
		e.mu.Lock()
		prof := e.models[key{"heavy", "1"}].profile
		e.mu.Unlock()
		capacity := float64(prof.MaxRows()) / prof.Latency(prof.MaxRows()).Seconds()
		if rate == 0 {
			rate = 2 * capacity
		}
		res := overload(t, e, "heavy", rate, 2*time.Second, objective)
		t.Logf("%s: capacity %.0f/s (profile %v), at %.0f/s: served %d (late %d, by up to %v; %d by more than the longest stall of this process, %v), refused %d (median %v, slowest %v)",
			name, capacity, prof.Points, rate, res.served, res.late, res.worstLateBy, res.lateBeyond(res.stall), res.stall, res.refused, res.medianRefusal, res.slowestRefusal)
		var rows, compute float64
		if mfs, err := e.Registry().Gather(); err == nil {
			for _, mf := range mfs {
				if n := mf.GetName(); n == "virga_serve_batch_rows" || n == "virga_serve_compute_seconds" {
					h := mf.GetMetric()[0].GetHistogram()
					t.Logf("%s: %s mean %.4g over %d", name, n, h.GetSampleSum()/float64(h.GetSampleCount()), h.GetSampleCount())
					if n == "virga_serve_batch_rows" {
						rows = h.GetSampleSum()
					} else {
						compute = h.GetSampleSum()
					}
				}
			}
		}
		shown := 0.0
		if compute > 0 {
			shown = rows / compute
		}
		return res, shown
	}
	d, _ := drive(batch.NameDeadline, 0)
	f, shown := drive(batch.NameFixed, 0)
	if f.late*2 < f.served && shown > 0 {
		// The machine ran the model faster than when its profile was
		// measured (a busy machine's profile, a quiet run), so the rate was
		// no overload: drive fixed again at twice what its batches showed.
		t.Logf("fixed: the batches ran at %.0f rows/s, faster than the profile: driving it again at %.0f/s", shown, 2*shown)
		f, _ = drive(batch.NameFixed, 2*shown)
	}
	// Deadline: what it serves is on time, the rest is refused, most of it
	// before its deadline passes; fixed serves late instead. A machine shared
	// with other processes (go test runs packages side by side) can stretch
	// one batch past what the model's recent batches took, which no policy
	// foresees: allow 5% late (fixed is late for nearly all it serves), and
	// do not count a request late by no more than the longest time the
	// machine left this process without a CPU (the policy cannot foresee
	// that either; on a quiet machine it is about a millisecond). The late
	// share on a quiet machine is measured by bench/serve.
	if d.served == 0 || d.refused == 0 {
		t.Errorf("deadline: served %d, refused %d: at twice the capacity both should happen", d.served, d.refused)
	}
	if late := d.lateBeyond(d.stall); late*20 > d.served {
		t.Errorf("deadline: %d of %d requests served late by more than the longest stall of the process (%v; by up to %v): it must refuse what it cannot serve in time", late, d.served, d.stall, d.worstLateBy)
	}
	if d.medianRefusal > objective {
		t.Errorf("deadline: half the refusals took over %v, the requests' objective: refusals must come at once", d.medianRefusal)
	}
	if f.late*2 < f.served {
		t.Errorf("fixed: %d of %d requests late at twice the capacity: the load was not an overload", f.late, f.served)
	}
	if d.served-d.late <= f.served-f.late {
		t.Errorf("deadline answered %d requests on time, fixed %d: deadline should answer more", d.served-d.late, f.served-f.late)
	}
}

func waitReady(t *testing.T, e *Engine) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !e.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("engine not ready after 60 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
