package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/server"
)

// apiSpec is an API-driven experiment (no entrypoint) of n random trials.
func apiSpec(name string, n int) []byte {
	return fmt.Appendf(nil, `name: %s
hyperparameters:
  x: {type: float, min: 0, max: 1}
searcher: random
objective: {metric: loss, direction: minimize}
max_trials: %d
max_restarts: 0
`, name, n)
}

// runAPI drives an API-driven experiment with o.apiClients goroutines, each
// looping ask -> report -> complete (or ask -> report without
// --api-complete) until the search is exhausted.
func runAPI(ctx context.Context, o *options, logger *slog.Logger, dir string, runNo int) (Result, error) {
	res := Result{Part: "api", Variant: "ask-report-complete", Store: "sqlite", Run: runNo, Unit: "trials/s", Target: targetAPI}
	if !o.apiComplete {
		res.Variant = "ask-report"
	}
	srv, err := server.Start(ctx, server.Config{DataDir: filepath.Join(dir, "data"), DB: o.sqliteURL(filepath.Join(dir, "data")), Logger: logger, Version: "bench"})
	if err != nil {
		return res, err
	}
	closed := false
	defer func() {
		if !closed {
			_ = closeServer(srv)
		}
	}()
	cl := newClient(srv, o.apiClients)
	data := apiSpec("bench-api", o.apiTrials)
	exp, err := cl.Submit(ctx, "api.yaml", data)
	if err != nil {
		return res, fmt.Errorf("submitting: %w", err)
	}

	var done, errs atomic.Int64
	var firstErr error
	var errOnce sync.Once
	fail := func(err error) {
		errs.Add(1)
		errOnce.Do(func() { firstErr = err })
	}
	var wg sync.WaitGroup
	t0 := time.Now()
	for range o.apiClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				a, err := cl.Ask(ctx, exp.ID)
				if errors.Is(err, virga.ErrConflict) {
					return // the search is exhausted (or the experiment ended)
				}
				if err != nil {
					fail(fmt.Errorf("ask: %w", err))
					return
				}
				x, _ := a.Trial.HParams["x"].(float64)
				if _, err := cl.Report(ctx, a.AttemptID, 0, map[string]float64{"loss": x}); err != nil {
					fail(fmt.Errorf("report: %w", err))
					return
				}
				if o.apiComplete {
					if _, err := cl.Complete(ctx, a.AttemptID, true); err != nil {
						fail(fmt.Errorf("complete: %w", err))
						return
					}
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	wall := time.Since(t0)
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("not finished within --timeout (%d trials done): %w", done.Load(), err)
	}
	res.Trials = int(done.Load())
	res.Errors = errs.Load()
	if firstErr != nil {
		res.Problems = firstErr.Error()
	}
	if res.Trials != o.apiTrials {
		res.Problems = joinProblem(res.Problems, fmt.Sprintf("%d trials done, want %d", res.Trials, o.apiTrials))
	}
	res.Seconds = wall.Seconds()
	res.Rate = float64(res.Trials) / wall.Seconds()
	// The experiment must have completed with every trial.
	e, err := srv.Store().Experiment(ctx, exp.ID)
	if err != nil {
		return res, err
	}
	if o.apiComplete && e.State != virga.ExperimentCompleted {
		res.Problems = joinProblem(res.Problems, fmt.Sprintf("experiment is %s, want COMPLETED", e.State))
	}
	res.Met = res.Rate >= targetAPI && res.Errors == 0 && res.Problems == ""
	closed = true
	if err := closeServer(srv); err != nil {
		return res, fmt.Errorf("closing the server: %w", err)
	}
	return res, nil
}
