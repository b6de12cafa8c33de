package sqlite_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/migrations"
	"github.com/virga-ml/virga/internal/store/sqlite"
	"github.com/virga-ml/virga/internal/store/storetest"
)

func open(t testing.TB, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t,
		func(t *testing.T) store.Store { return open(t, filepath.Join(t.TempDir(), "virga.db")) },
		storetest.WithReopen(func(t *testing.T, s store.Store) store.Store {
			path := s.(*sqlite.Store).Path()
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			return open(t, path)
		}),
		storetest.WithOldSchema(oldSchema))
}

// oldSchema builds a database file at schema version as an older Virga
// left it, runs stmts in it, and opens it (migrating it).
func oldSchema(t *testing.T, version int, stmts []string) store.Store {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "virga.db")
	ms, err := migrations.List(migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	if version > len(ms) {
		t.Fatalf("version %d: there are %d SQLite migrations", version, len(ms))
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	all := []string{`CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`}
	for _, m := range ms[:version] {
		all = append(all, m.SQL, fmt.Sprintf(`INSERT INTO schema_version (version, applied_at) VALUES (%d, 0)`, m.Version))
	}
	for _, q := range append(all, stmts...) {
		if _, err := db.ExecContext(ctx, q); err != nil {
			db.Close()
			t.Fatalf("building the version-%d database: %.80q...: %v", version, q, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return open(t, path)
}

func TestOpenCreatesDirectoryAndOddPaths(t *testing.T) {
	// A missing directory, and characters that mean something in a URI.
	path := filepath.Join(t.TempDir(), "a b", "new?dir#x", "100%.db")
	s := open(t, path)
	if s.Path() != path {
		t.Errorf("Path() = %q, want %q", s.Path(), path)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database file not created where asked: %v", err)
	}
	if _, err := os.Stat(path + "-wal"); err != nil {
		t.Errorf("no WAL file next to the database (WAL mode off?): %v", err)
	}
}

func TestOpenEmptyPath(t *testing.T) {
	if _, err := sqlite.Open(context.Background(), ""); err == nil {
		t.Fatal("Open(\"\") succeeded")
	}
}

func TestConcurrentOpenMigratesOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "virga.db")
	latest, err := migrations.Latest(migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := sqlite.Open(context.Background(), path)
			if err != nil {
				errs[i] = err
				return
			}
			defer s.Close()
			v, err := s.SchemaVersion(context.Background())
			if err == nil && v != latest {
				err = fmt.Errorf("SchemaVersion = %d, want %d", v, latest)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("opener %d: %v", i, err)
		}
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "virga.db")
	s := open(t, path)
	s.Close()
	// Pretend a newer Virga migrated the file.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO schema_version (version, applied_at) VALUES (9999, 0)`); err != nil {
		t.Fatal(err)
	}
	_, err = sqlite.Open(context.Background(), path)
	if err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Open of a newer schema: got %v, want an error saying it is newer", err)
	}
}

// TestMigratesVersion2 opens a database that an older Virga left at schema
// version 2, holding a trial and its attempt, and checks that Open brings it
// to the latest version: the trial reads back as it was, with no lineage and
// no prediction, the attempt with no pool and no cost, and the new columns
// can be written.
func TestMigratesVersion2(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "virga.db")
	ms, err := migrations.List(migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 3 {
		t.Fatalf("%d SQLite migrations, want at least 3", len(ms))
	}

	// 1. A version-2 database, written as Virga 2 did: migrations 1 and 2
	// recorded in schema_version, then an experiment and a trial.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	created, updated := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), time.Date(2026, 1, 2, 3, 5, 0, 0, time.UTC)
	stmts := []string{`CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`}
	for _, m := range ms[:2] {
		stmts = append(stmts, m.SQL, fmt.Sprintf(`INSERT INTO schema_version (version, applied_at) VALUES (%d, 0)`, m.Version))
	}
	stmts = append(stmts,
		`INSERT INTO experiments (id, name, state, spec, spec_file, message, created_at)
			VALUES (1, 'old', 'ACTIVE', 'name: old', 'old.yaml', '', 0)`,
		fmt.Sprintf(`INSERT INTO trials (id, experiment_id, seq, request, state, hparams, attempts, restarts, step,
			latest, best, best_step, checkpoint, message, created_at, updated_at, ended_at)
			VALUES (7, 1, 1, 'req-1', 'RUNNING', '{"lr":0.5}', 1, 0, 40, 0.75, 0.5, 30, 'ck-40', 'running', %d, %d, NULL)`,
			created.UnixNano(), updated.UnixNano()),
		fmt.Sprintf(`INSERT INTO attempts (id, trial_id, number, state, outcome, backend, pid, exit_code, signal,
			restored, dir, message, created_at, started_at, ended_at)
			VALUES (3, 7, 1, 'RUNNING', '', 'local', 42, NULL, '', '', '/d', '', %d, %d, NULL)`,
			created.UnixNano(), updated.UnixNano()))
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			db.Close()
			t.Fatalf("building the version-2 database: %.60q...: %v", q, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// 2. Open migrates it.
	s := open(t, path)
	if v, err := s.SchemaVersion(ctx); err != nil || v != ms[len(ms)-1].Version {
		t.Fatalf("SchemaVersion after opening a version-2 database = %d, %v; want %d", v, err, ms[len(ms)-1].Version)
	}
	want := &virga.Trial{ID: 7, ExperimentID: 1, Seq: 1, Request: "req-1", State: virga.TrialRunning,
		HParams: map[string]any{"lr": 0.5}, Attempts: 1, Step: 40, Latest: ptr(0.75), Best: ptr(0.5), BestStep: 30,
		Checkpoint: "ck-40", Message: "running", CreatedAt: created, UpdatedAt: updated}
	got, err := s.Trial(ctx, 7)
	if err != nil {
		t.Fatalf("Trial: %v", err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("trial of the version-2 database (-want +got):\n%s", d)
	}
	list, err := s.Trials(ctx, 1)
	if err != nil {
		t.Fatalf("Trials: %v", err)
	}
	if d := cmp.Diff([]*virga.Trial{want}, list); d != "" {
		t.Errorf("trials of the version-2 database (-want +got):\n%s", d)
	}

	// 3. The migrated table takes a prediction and a child trial.
	want.Prediction = &virga.Prediction{Step: 40, Horizon: 100, Mean: 0.4, Std: 0.1, ProbBetter: 0.3}
	child := &virga.Trial{ExperimentID: 1, Seq: 2, State: virga.TrialQueued, Parent: 7, ParentCheckpoint: "ck-40", ParentStep: 40}
	if err := s.Apply(ctx, &store.Batch{Trials: []*virga.Trial{want, child}}); err != nil {
		t.Fatalf("Apply to the migrated database: %v", err)
	}
	list, err = s.Trials(ctx, 1)
	if err != nil {
		t.Fatalf("Trials: %v", err)
	}
	if d := cmp.Diff([]*virga.Trial{want, child}, list); d != "" {
		t.Errorf("trials written after the migration (-want +got):\n%s", d)
	}

	// 4. The attempt reads back with no pool and no cost, and takes them.
	wantA := &virga.Attempt{ID: 3, TrialID: 7, Number: 1, State: virga.AttemptRunning, Backend: "local", PID: 42,
		Dir: "/d", CreatedAt: created, StartedAt: updated}
	as, err := s.Attempts(ctx, 7)
	if err != nil {
		t.Fatalf("Attempts: %v", err)
	}
	if d := cmp.Diff([]*virga.Attempt{wantA}, as); d != "" {
		t.Errorf("attempts of the version-2 database (-want +got):\n%s", d)
	}
	wantA.State, wantA.Outcome, wantA.Pool, wantA.Cost, wantA.LostCost = virga.AttemptExited, virga.OutcomePreempted, "spot", 0.5, 0.25
	if err := s.Apply(ctx, &store.Batch{Attempts: []*virga.Attempt{wantA}}); err != nil {
		t.Fatalf("Apply to the migrated database: %v", err)
	}
	as, err = s.ExperimentAttempts(ctx, 1)
	if err != nil {
		t.Fatalf("ExperimentAttempts: %v", err)
	}
	if d := cmp.Diff([]*virga.Attempt{wantA}, as); d != "" {
		t.Errorf("attempts written after the migration (-want +got):\n%s", d)
	}
}

func ptr[T any](v T) *T { return &v }

// childEnv makes the test binary run killChild instead of the tests.
const childEnv = "VIRGA_SQLITE_KILL_CHILD"

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		killChild(path)
		return
	}
	os.Exit(m.Run())
}

// killChild applies numbered batches forever, printing each number once
// Apply has returned. The parent kills it with SIGKILL.
func killChild(path string) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	e := &virga.Experiment{Name: "kill", State: virga.ExperimentActive}
	if err := s.Apply(ctx, &store.Batch{Experiments: []*virga.Experiment{e}}); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	tr := &virga.Trial{ExperimentID: e.ID, Seq: 1, State: virga.TrialRunning}
	if err := s.Apply(ctx, &store.Batch{Trials: []*virga.Trial{tr}}); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	out := bufio.NewWriter(os.Stdout)
	for n := int64(1); ; n++ {
		b := &store.Batch{
			Events: []*virga.Event{{ExperimentID: e.ID, TrialID: tr.ID, Kind: "batch", Message: strconv.FormatInt(n, 10)}},
		}
		for j := range int64(8) {
			b.Metrics = append(b.Metrics, virga.Metric{TrialID: tr.ID, Step: n*8 + j, Values: map[string]float64{"n": float64(n)}})
		}
		if err := s.Apply(ctx, b); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(2)
		}
		fmt.Fprintln(out, n)
		out.Flush()
	}
}

func TestKill9Durability(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		path := filepath.Join(t.TempDir(), "virga.db")
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+path)
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		first := make(chan struct{})
		acked := make(chan int64, 1)
		go func() {
			var last int64
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if n, err := strconv.ParseInt(sc.Text(), 10, 64); err == nil {
					if last == 0 {
						close(first)
					}
					last = n
				}
			}
			acked <- last
		}()
		// Once it is writing, kill it at a random moment.
		select {
		case <-first:
		case <-time.After(time.Minute):
			cmd.Process.Kill()
			t.Fatalf("round %d: child acknowledged no batch within a minute", round)
		}
		time.Sleep(rand.N(300 * time.Millisecond))
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		last := <-acked
		err = cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child ended with %v, want killed by SIGKILL", round, err)
		}

		s := open(t, path)
		ctx := context.Background()
		evs, err := s.Events(ctx, store.EventFilter{})
		if err != nil {
			t.Fatal(err)
		}
		// Every acknowledged batch is there (one more may be, committed but not yet printed).
		if int64(len(evs)) < last || int64(len(evs)) > last+1 {
			t.Fatalf("round %d: %d batches stored, %d acknowledged", round, len(evs), last)
		}
		for i, ev := range evs {
			if ev.Message != strconv.Itoa(i+1) {
				t.Fatalf("round %d: event %d is batch %q, want %d", round, i, ev.Message, i+1)
			}
		}
		ms, err := s.Metrics(ctx, store.MetricFilter{TrialID: evs[0].TrialID, AfterStep: -1})
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != 8*len(evs) {
			t.Fatalf("round %d: %d metrics for %d batches, want %d", round, len(ms), len(evs), 8*len(evs))
		}
		t.Logf("round %d: killed after %d acknowledged batches; all present", round, last)
	}
}

// BenchmarkApplyMetrics measures one Apply of 64 metrics and 8 trial updates.
func BenchmarkApplyMetrics(b *testing.B) {
	s := open(b, filepath.Join(b.TempDir(), "virga.db"))
	storetest.BenchmarkApplyMetrics(b, s)
}

// BenchmarkApplyMetricsSyncNormal is BenchmarkApplyMetrics with
// synchronous=normal (no fsync per commit).
func BenchmarkApplyMetricsSyncNormal(b *testing.B) {
	s, err := sqlite.OpenWith(context.Background(), filepath.Join(b.TempDir(), "virga.db"),
		sqlite.Options{Synchronous: sqlite.SyncNormal})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	storetest.BenchmarkApplyMetrics(b, s)
}

func TestOpenWithBadSynchronous(t *testing.T) {
	_, err := sqlite.OpenWith(context.Background(), filepath.Join(t.TempDir(), "v.db"), sqlite.Options{Synchronous: "off"})
	if err == nil {
		t.Fatal("OpenWith(synchronous=off) succeeded, want an error")
	}
}

// BenchmarkApplyIngest measures one Apply of 32 metrics of 32 trials, the
// shape of the ingest benchmark's group commits.
func BenchmarkApplyIngest(b *testing.B) {
	s := open(b, filepath.Join(b.TempDir(), "virga.db"))
	storetest.BenchmarkApplyIngest(b, s)
}

// BenchmarkApplyIngestSyncNormal is BenchmarkApplyIngest with synchronous=normal.
func BenchmarkApplyIngestSyncNormal(b *testing.B) {
	s, err := sqlite.OpenWith(context.Background(), filepath.Join(b.TempDir(), "virga.db"),
		sqlite.Options{Synchronous: sqlite.SyncNormal})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	storetest.BenchmarkApplyIngest(b, s)
}

// TestMetricLog checks the life of metric_log: Apply appends to it, merges it
// into metrics once it holds sqlite.MergeRows rows, Open merges what a killed
// process left, Close merges it; reads see both tables, a logged row
// replacing the merged row of its step.
func TestMetricLog(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "virga.db")
	s := open(t, path)
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	count := func(db *sql.DB, table string) int {
		t.Helper()
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	e := &virga.Experiment{Name: "log", State: virga.ExperimentActive}
	if err := s.Apply(ctx, &store.Batch{Experiments: []*virga.Experiment{e}}); err != nil {
		t.Fatal(err)
	}
	trs := []*virga.Trial{{ExperimentID: e.ID, Seq: 1}, {ExperimentID: e.ID, Seq: 2}}
	if err := s.Apply(ctx, &store.Batch{Trials: trs}); err != nil {
		t.Fatal(err)
	}
	var want []virga.Metric // of trs[0], indexed by step
	put := func(ms ...virga.Metric) {
		t.Helper()
		if err := s.Apply(ctx, &store.Batch{Metrics: ms}); err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.TrialID != trs[0].ID {
				continue
			}
			for int64(len(want)) <= m.Step {
				want = append(want, virga.Metric{})
			}
			want[m.Step] = m
		}
	}
	metric := func(tr *virga.Trial, step int64, v float64) virga.Metric {
		return virga.Metric{TrialID: tr.ID, Step: step, AttemptID: 1, Values: map[string]float64{"v": v}}
	}
	check := func(s *sqlite.Store, what string) {
		t.Helper()
		got, err := s.Metrics(ctx, store.MetricFilter{TrialID: trs[0].ID, AfterStep: -1})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d metrics, want %d", what, len(got), len(want))
		}
		for i := range want {
			if got[i].Step != want[i].Step || got[i].AttemptID != want[i].AttemptID || got[i].Values["v"] != want[i].Values["v"] {
				t.Fatalf("%s: metric %d = %+v, want %+v", what, i, got[i], want[i])
			}
		}
	}

	// Below the threshold, metrics wait in the log.
	for step := range int64(10) {
		put(metric(trs[0], step, float64(step)), metric(trs[1], step, 0))
	}
	if n := count(raw, "metric_log"); n != 20 {
		t.Fatalf("metric_log holds %d rows, want 20", n)
	}
	check(s, "logged")
	// The Apply that brings the log to MergeRows rows merges it.
	var b []virga.Metric
	for step := int64(10); len(b) < sqlite.MergeRows-20; step++ {
		b = append(b, metric(trs[1], step, 0))
	}
	put(b...)
	if n, m := count(raw, "metric_log"), count(raw, "metrics"); n != 0 || m != sqlite.MergeRows {
		t.Fatalf("after %d rows: metric_log %d rows, metrics %d; want 0 and %d", sqlite.MergeRows, n, m, sqlite.MergeRows)
	}
	check(s, "merged")
	// Logged reports of merged steps replace them (twice in one batch: the
	// last wins); new steps interleave.
	r3 := metric(trs[0], 3, -3)
	r3.AttemptID = 2
	put(metric(trs[0], 3, -30), r3, metric(trs[0], 10, 10), metric(trs[0], 0, -1))
	put(metric(trs[0], 12, 12), metric(trs[0], 11, 11))
	check(s, "merged and logged")
	for _, tc := range []struct {
		after int64
		limit int
		want  []int64
	}{{-1, 1, []int64{0}}, {2, 2, []int64{3, 4}}, {8, 0, []int64{9, 10, 11, 12}}, {9, 2, []int64{10, 11}}} {
		got, err := s.Metrics(ctx, store.MetricFilter{TrialID: trs[0].ID, AfterStep: tc.after, Limit: tc.limit})
		if err != nil {
			t.Fatal(err)
		}
		var steps []int64
		for _, m := range got {
			steps = append(steps, m.Step)
		}
		if fmt.Sprint(steps) != fmt.Sprint(tc.want) {
			t.Errorf("Metrics(after %d, limit %d): steps %v, want %v", tc.after, tc.limit, steps, tc.want)
		}
	}

	// A process killed with rows in the log: a copy of the files as they
	// are now. Opening the copy merges the log.
	if n := count(raw, "metric_log"); n != 6 {
		t.Fatalf("metric_log holds %d rows, want 6", n)
	}
	crashed := filepath.Join(t.TempDir(), "crashed.db")
	for _, suffix := range []string{"", "-wal"} {
		data, err := os.ReadFile(path + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(crashed+suffix, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s2 := open(t, crashed)
	check(s2, "after reopening an unmerged log")
	raw2, err := sql.Open("sqlite", crashed)
	if err != nil {
		t.Fatal(err)
	}
	defer raw2.Close()
	if n := count(raw2, "metric_log"); n != 0 {
		t.Errorf("metric_log of the reopened copy holds %d rows, want 0", n)
	}
	s2.Close()

	// Close merges the log.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := count(raw, "metric_log"); n != 0 {
		t.Errorf("metric_log holds %d rows after Close, want 0", n)
	}
	check(open(t, path), "after Close and reopen")
}

// BenchmarkTrialLifecycle measures one trial's life from creation to end
// (13 commits).
func BenchmarkTrialLifecycle(b *testing.B) {
	storetest.BenchmarkTrialLifecycle(b, open(b, filepath.Join(b.TempDir(), "virga.db")))
}

// BenchmarkTrialLifecycleSyncNormal is BenchmarkTrialLifecycle with
// synchronous=normal.
func BenchmarkTrialLifecycleSyncNormal(b *testing.B) {
	s, err := sqlite.OpenWith(context.Background(), filepath.Join(b.TempDir(), "virga.db"),
		sqlite.Options{Synchronous: sqlite.SyncNormal})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	storetest.BenchmarkTrialLifecycle(b, s)
}
