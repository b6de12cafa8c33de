package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/migrations"
	"github.com/virga-ml/virga/internal/store/postgres"
	"github.com/virga-ml/virga/internal/store/storetest"
)

// testURL returns the server to test against, from VIRGA_TEST_POSTGRES. Without
// it the test is skipped, except under CI, which must run it.
func testURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("VIRGA_TEST_POSTGRES")
	if u == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("VIRGA_TEST_POSTGRES is not set; CI must run the PostgreSQL tests")
		}
		t.Skip("set VIRGA_TEST_POSTGRES to run the PostgreSQL tests, e.g. " +
			"VIRGA_TEST_POSTGRES=$(scripts/postgres.sh start) go test ./internal/store/postgres/")
	}
	return u
}

// freshSchema creates an empty schema for t, dropped when t ends, and returns
// the URL of the test server with search_path set to it.
func freshSchema(t testing.TB) string {
	t.Helper()
	base := testURL(t)
	ctx := context.Background()
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatal(err)
	}
	schema := "virga_t_" + hex.EncodeToString(rnd[:])
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connecting to VIRGA_TEST_POSTGRES: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("creating schema: %v", err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("VIRGA_TEST_POSTGRES: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func open(t testing.TB, u string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), u)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	testURL(t)
	var urls sync.Map // store -> URL, for reopen
	storetest.Run(t,
		func(t *testing.T) store.Store {
			u := freshSchema(t)
			s := open(t, u)
			urls.Store(s, u)
			return s
		},
		storetest.WithReopen(func(t *testing.T, s store.Store) store.Store {
			u, ok := urls.Load(s)
			if !ok {
				t.Fatal("reopen of a store this test did not open")
			}
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			return open(t, u.(string))
		}),
		storetest.WithOldSchema(oldSchema))
}

// oldSchema builds a schema at version as an older Virga left it, runs
// stmts in it, and opens it (migrating it).
func oldSchema(t *testing.T, version int, stmts []string) store.Store {
	t.Helper()
	ctx := context.Background()
	u := freshSchema(t)
	ms, err := migrations.List(migrations.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	if version > len(ms) {
		t.Fatalf("version %d: there are %d PostgreSQL migrations", version, len(ms))
	}
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	all := []string{`CREATE TABLE schema_version (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)`}
	for _, m := range ms[:version] {
		all = append(all, m.SQL, fmt.Sprintf(`INSERT INTO schema_version (version, applied_at) VALUES (%d, 0)`, m.Version))
	}
	for _, q := range append(all, stmts...) {
		if _, err := c.Exec(ctx, q); err != nil {
			c.Close(ctx)
			t.Fatalf("building the version-%d schema: %.80q...: %v", version, q, err)
		}
	}
	c.Close(ctx)
	return open(t, u)
}

// TestSearchPath checks that the tables go to the schema named in the URL's
// search_path and nowhere else.
func TestSearchPath(t *testing.T) {
	u := freshSchema(t)
	s := open(t, u)
	if _, err := s.SchemaVersion(context.Background()); err != nil {
		t.Fatal(err)
	}
	schema := mustQuery(t, u, "SELECT current_schema()")
	var n int
	c, err := pgx.Connect(context.Background(), testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if err := c.QueryRow(context.Background(),
		`SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name = 'experiments'`,
		schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(schema, "virga_t_") || n != 1 {
		t.Errorf("experiments table: %d in schema %q, want 1 in the test's schema", n, schema)
	}
}

func mustQuery(t *testing.T, u, sql string) string {
	t.Helper()
	c, err := pgx.Connect(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var v string
	if err := c.QueryRow(context.Background(), sql).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestConcurrentOpenMigratesOnce(t *testing.T) {
	u := freshSchema(t)
	latest, err := migrations.Latest(migrations.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := postgres.Open(context.Background(), u)
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
	if got := mustQuery(t, u, "SELECT count(*)::text FROM schema_version"); got != fmt.Sprint(latest) {
		t.Errorf("schema_version has %s rows, want %d", got, latest)
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	u := freshSchema(t)
	open(t, u).Close()
	mustQuery(t, u, "INSERT INTO schema_version (version, applied_at) VALUES (9999, 0) RETURNING 'ok'")
	_, err := postgres.Open(context.Background(), u)
	if err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Open of a newer schema: got %v, want an error saying it is newer", err)
	}
}

// TestMigratesVersion2 opens a schema that an older Virga left at version 2,
// holding a trial and its attempt, and checks that Open brings it to the
// latest version: the trial reads back with no lineage and no prediction, the
// attempt with no pool and no cost.
func TestMigratesVersion2(t *testing.T) {
	ctx := context.Background()
	u := freshSchema(t)
	ms, err := migrations.List(migrations.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 3 {
		t.Fatalf("%d PostgreSQL migrations, want at least 3", len(ms))
	}
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	stmts := []string{`CREATE TABLE schema_version (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)`}
	for _, m := range ms[:2] {
		stmts = append(stmts, m.SQL, fmt.Sprintf(`INSERT INTO schema_version (version, applied_at) VALUES (%d, 0)`, m.Version))
	}
	stmts = append(stmts,
		`INSERT INTO experiments (id, name, state, spec_file, message) VALUES (1, 'old', 'ACTIVE', 'old.yaml', '')`,
		fmt.Sprintf(`INSERT INTO trials (id, experiment_id, seq, request, state, hparams, attempts, restarts, step,
			latest, best, best_step, checkpoint, message, created_at)
			VALUES (7, 1, 1, 'req-1', 'RUNNING', '{"lr":0.5}', 1, 0, 40, 0.75, 0.5, 30, 'ck-40', 'running', %d)`,
			created.UnixNano()),
		fmt.Sprintf(`INSERT INTO attempts (id, trial_id, number, state, outcome, backend, pid, signal, restored, dir,
			message, created_at) VALUES (3, 7, 1, 'RUNNING', '', 'local', 42, '', '', '/d', '', %d)`, created.UnixNano()))
	for _, q := range stmts {
		if _, err := c.Exec(ctx, q); err != nil {
			c.Close(ctx)
			t.Fatalf("building the version-2 schema: %.60q...: %v", q, err)
		}
	}
	c.Close(ctx)

	s := open(t, u)
	if v, err := s.SchemaVersion(ctx); err != nil || v != ms[len(ms)-1].Version {
		t.Fatalf("SchemaVersion after opening a version-2 schema = %d, %v; want %d", v, err, ms[len(ms)-1].Version)
	}
	latest, best := 0.75, 0.5
	want := []*virga.Trial{{ID: 7, ExperimentID: 1, Seq: 1, Request: "req-1", State: virga.TrialRunning,
		HParams: map[string]any{"lr": 0.5}, Attempts: 1, Step: 40, Latest: &latest, Best: &best, BestStep: 30,
		Checkpoint: "ck-40", Message: "running", CreatedAt: created}}
	got, err := s.Trials(ctx, 1)
	if err != nil {
		t.Fatalf("Trials: %v", err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("trials of the version-2 schema (-want +got):\n%s", d)
	}
	wantA := []*virga.Attempt{{ID: 3, TrialID: 7, Number: 1, State: virga.AttemptRunning, Backend: "local", PID: 42,
		Dir: "/d", CreatedAt: created}}
	as, err := s.ExperimentAttempts(ctx, 1)
	if err != nil {
		t.Fatalf("ExperimentAttempts: %v", err)
	}
	if d := cmp.Diff(wantA, as); d != "" {
		t.Errorf("attempts of the version-2 schema (-want +got):\n%s", d)
	}
}

func TestPoolMaxConns(t *testing.T) {
	u := freshSchema(t)
	if _, err := postgres.Open(context.Background(), u+"&pool_max_conns=zero"); err == nil ||
		!strings.Contains(err.Error(), "pool_max_conns") {
		t.Errorf("Open with pool_max_conns=zero: got %v, want an error naming pool_max_conns", err)
	}
	// One connection is enough for everything, including the conformance writes.
	s := open(t, u+"&pool_max_conns=1")
	if _, err := s.SchemaVersion(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestOpenBadURL(t *testing.T) {
	if _, err := postgres.Open(context.Background(), "postgres://virga@127.0.0.1:1/nowhere?connect_timeout=2"); err == nil {
		t.Fatal("Open of an unreachable server succeeded")
	}
}

// BenchmarkApplyMetrics measures one Apply of 64 metrics and 8 trial updates.
func BenchmarkApplyMetrics(b *testing.B) {
	s := open(b, freshSchema(b))
	storetest.BenchmarkApplyMetrics(b, s)
}
