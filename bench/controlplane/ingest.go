package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/virga-ml/virga/internal/server"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/storeopen"
)

// runIngest measures sustained metric ingestion: o.ingTrials asked trials,
// one goroutine each reporting steps 0, 1, 2, ... over HTTP for o.ingDur, and
// then checks that the reopened store holds every acknowledged report. An
// empty pgBase means SQLite; otherwise a fresh schema is made in that
// PostgreSQL database and dropped at the end.
func runIngest(ctx context.Context, o *options, logger *slog.Logger, dir, pgBase string, runNo int) (Result, error) {
	res := Result{Part: "ingest", Store: "sqlite", Run: runNo, Unit: "reports/s", Target: targetIngest}
	dataDir := filepath.Join(dir, "data")
	dbURL := filepath.Join(dataDir, "virga.db")
	if pgBase != "" {
		res.Store = "postgres"
		u, drop, err := freshSchema(ctx, pgBase)
		if err != nil {
			return res, err
		}
		defer drop()
		dbURL = u
	}
	cfg := server.Config{DataDir: dataDir, DB: o.sqliteURL(dataDir), Logger: logger, Version: "bench"}
	if pgBase != "" {
		cfg.DB = dbURL
	}
	srv, err := server.Start(ctx, cfg)
	if err != nil {
		return res, err
	}
	closed := false
	defer func() {
		if !closed {
			_ = closeServer(srv)
		}
	}()
	cl := newClient(srv, o.ingTrials)
	exp, err := cl.Submit(ctx, "ingest.yaml", apiSpec("bench-ingest", o.ingTrials))
	if err != nil {
		return res, fmt.Errorf("submitting: %w", err)
	}
	type reporter struct {
		trialID, attemptID int64
		acked, errs        int64
		firstErr           error
	}
	reps := make([]*reporter, o.ingTrials)
	for i := range reps {
		a, err := cl.Ask(ctx, exp.ID)
		if err != nil {
			return res, fmt.Errorf("ask %d: %w", i+1, err)
		}
		reps[i] = &reporter{trialID: a.Trial.ID, attemptID: a.AttemptID}
	}

	// Every reporter sends until the deadline and finishes the report in
	// flight, so that each report is either acknowledged or counted as an error.
	var start sync.WaitGroup
	var wg sync.WaitGroup
	start.Add(1)
	for _, r := range reps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start.Wait()
			deadline := time.Now().Add(o.ingDur)
			for step := int64(0); time.Now().Before(deadline) && ctx.Err() == nil; step++ {
				_, err := cl.Report(ctx, r.attemptID, step, map[string]float64{"loss": 1 / float64(step+1)})
				if err != nil {
					r.errs++
					if r.firstErr == nil {
						r.firstErr = err
					}
					if r.errs > 100 {
						return
					}
					continue
				}
				r.acked++
			}
		}()
	}
	t0 := time.Now()
	start.Done()
	wg.Wait()
	wall := time.Since(t0)
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("not finished within --timeout: %w", err)
	}
	for _, r := range reps {
		res.Acked += r.acked
		res.Errors += r.errs
		if r.firstErr != nil && res.Problems == "" {
			res.Problems = fmt.Sprintf("attempt %d: %v", r.attemptID, r.firstErr)
		}
	}
	res.Seconds = wall.Seconds()
	res.Rate = float64(res.Acked) / wall.Seconds()

	// Durability: close the server, reopen the store, count.
	closed = true
	if err := closeServer(srv); err != nil {
		return res, fmt.Errorf("closing the server: %w", err)
	}
	st, err := storeopen.Open(ctx, dbURL)
	if err != nil {
		return res, fmt.Errorf("reopening the store: %w", err)
	}
	defer st.Close()
	durable := true
	for _, r := range reps {
		ms, err := st.Metrics(ctx, store.MetricFilter{TrialID: r.trialID, AfterStep: -1})
		if err != nil {
			return res, fmt.Errorf("reading metrics: %w", err)
		}
		res.Stored += int64(len(ms))
		// Steps are sent in order, one at a time: a trial with k acknowledged
		// reports (and no error) must hold exactly steps 0..k-1.
		if r.errs == 0 && int64(len(ms)) != r.acked {
			durable = false
			res.Problems = joinProblem(res.Problems, fmt.Sprintf("trial %d: %d acknowledged, %d stored", r.trialID, r.acked, len(ms)))
		}
		if int64(len(ms)) < r.acked {
			durable = false
		}
	}
	res.Durable = &durable
	res.Met = res.Rate >= targetIngest && durable && res.Errors == 0
	if pgBase != "" {
		res.Target = 0 // no target for PostgreSQL
		res.Met = durable && res.Errors == 0
	}
	return res, nil
}

// freshSchema creates an empty schema in the PostgreSQL database at base and
// returns base with search_path set to it, and a function that drops it.
func freshSchema(ctx context.Context, base string) (string, func(), error) {
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", nil, err
	}
	schema := "virga_bench_" + hex.EncodeToString(rnd[:])
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", nil, fmt.Errorf("--postgres: want a postgres:// URL, got %q", base)
	}
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return "", nil, fmt.Errorf("creating schema %s: %w", schema, err)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			slog.Warn("dropping benchmark schema", "schema", schema, "err", err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			slog.Warn("dropping benchmark schema", "schema", schema, "err", err)
		}
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), drop, nil
}
