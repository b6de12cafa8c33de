package server

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/storeopen"
)

// fakeClock is a clock whose Sleep advances it at once and records the
// durations slept; onSleep, if set, runs first (the test changes the world
// between two attempts there).
type fakeClock struct {
	mu      sync.Mutex
	t       time.Time
	slept   []time.Duration
	onSleep func(n int)
}

func (f *fakeClock) clock() clock {
	return clock{
		now: func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.t },
		sleep: func(ctx context.Context, d time.Duration) error {
			f.mu.Lock()
			f.slept = append(f.slept, d)
			n := len(f.slept)
			f.t = f.t.Add(d)
			hook := f.onSleep
			f.mu.Unlock()
			if hook != nil {
				hook(n)
			}
			return ctx.Err()
		},
	}
}

// logBuffer collects a logger's lines.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestOpenStoreWaitsWithBackoff(t *testing.T) {
	unavailable := fmt.Errorf("opening postgres store on db: %w: dial tcp: connection refused", store.ErrUnavailable)
	refused := errors.New("opening postgres store on db: FATAL: password authentication failed (SQLSTATE 28P01)")
	sqlite := func(t *testing.T) func(ctx context.Context, _ string) (store.Store, error) {
		return func(ctx context.Context, _ string) (store.Store, error) {
			return storeopen.Open(ctx, filepath.Join(t.TempDir(), "virga.db"))
		}
	}
	ms := time.Millisecond
	for _, c := range []struct {
		name      string
		fails     int   // attempts that fail with failWith before one succeeds; -1: all
		failWith  error //
		wait      time.Duration
		wantSlept []time.Duration
		wantErr   string // "" for success
		wantWarns int    // "waiting for the database" lines
	}{
		{name: "up at once", fails: 0, wait: time.Minute},
		{name: "up after five attempts", fails: 5, failWith: unavailable, wait: time.Minute,
			wantSlept: []time.Duration{250 * ms, 500 * ms, time.Second, 2 * time.Second, 4 * time.Second}, wantWarns: 5},
		{name: "never up: the backoff is capped and the wait bounded", fails: -1, failWith: unavailable, wait: 20 * time.Second,
			wantSlept: []time.Duration{250 * ms, 500 * ms, time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second, 2250 * ms},
			wantErr:   "gave up waiting for the database after 20s and 9 attempts (--db-wait): opening postgres store on db: the database is unavailable", wantWarns: 8},
		{name: "not an unavailable database: no wait", fails: -1, failWith: refused, wait: time.Minute,
			wantErr: "password authentication failed"},
		{name: "waiting switched off", fails: -1, failWith: unavailable, wait: -1, wantErr: "connection refused"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fc := &fakeClock{t: time.Unix(1e9, 0)}
			var log logBuffer
			tries := 0
			ok := sqlite(t)
			open := func(ctx context.Context, u string) (store.Store, error) {
				tries++
				if c.fails < 0 || tries <= c.fails {
					return nil, c.failWith
				}
				return ok(ctx, u)
			}
			st, err := openStore(context.Background(), "postgres://db/virga", c.wait, fc.clock(), slog.New(slog.NewTextHandler(&log, nil)), open)
			if st != nil {
				st.Close()
			}
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Errorf("openStore: %v, want %q", err, c.wantErr)
			}
			if !slices.Equal(fc.slept, c.wantSlept) {
				t.Errorf("slept %v, want %v", fc.slept, c.wantSlept)
			}
			if n := strings.Count(log.String(), "waiting for the database"); n != c.wantWarns {
				t.Errorf("%d lines say it waits for the database, want %d:\n%s", n, c.wantWarns, log.String())
			}
		})
	}
}

// testPostgres returns the URL of the test PostgreSQL server with a fresh
// schema of t's as its search_path, or skips t without one.
func testPostgres(t *testing.T) *url.URL {
	t.Helper()
	base := os.Getenv("VIRGA_TEST_POSTGRES")
	if base == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("VIRGA_TEST_POSTGRES is not set; CI must run the PostgreSQL tests")
		}
		t.Skip("set VIRGA_TEST_POSTGRES to run the PostgreSQL tests")
	}
	ctx := context.Background()
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	schema := "virga_t_" + hex.EncodeToString(rnd[:])
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connecting to VIRGA_TEST_POSTGRES: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
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
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u
}

// pgProxy listens on a loopback address and, per connection, either answers
// as a PostgreSQL server that is starting up (SQLSTATE 57P03) or forwards to
// the real server, as its mode says.
type pgProxy struct {
	ln       net.Listener
	upstream string
	ready    atomic.Bool // forward; else answer 57P03
}

func (p *pgProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

func (p *pgProxy) handle(c net.Conn) {
	defer c.Close()
	if !p.ready.Load() {
		// The startup message: a length, then the rest.
		var n [4]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return
		}
		if _, err := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint32(n[:]))-4); err != nil {
			return
		}
		var fields []byte
		for _, f := range []string{"SFATAL", "VFATAL", "C57P03", "Mthe database system is starting up"} {
			fields = append(append(fields, f...), 0)
		}
		fields = append(fields, 0)
		msg := binary.BigEndian.AppendUint32([]byte{'E'}, uint32(4+len(fields)))
		_, _ = c.Write(append(msg, fields...))
		return
	}
	up, err := net.Dial("tcp", p.upstream)
	if err != nil {
		return
	}
	defer up.Close()
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	_, _ = io.Copy(c, up)
}

// TestStartWaitsForPostgres starts a server whose PostgreSQL is not
// listening yet, then is starting up, then is up: Start waits, says what it
// waits for each time, and then runs on the real database.
func TestStartWaitsForPostgres(t *testing.T) {
	real := testPostgres(t)
	// An address where nothing listens yet.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	proxy := &pgProxy{upstream: real.Host}
	t.Cleanup(func() {
		if proxy.ln != nil {
			proxy.ln.Close()
		}
	})
	fc := &fakeClock{t: time.Unix(1e9, 0), onSleep: func(n int) {
		switch n {
		case 1: // refused once: now it listens, starting up
			l, err := net.Listen("tcp", addr)
			if err != nil {
				t.Errorf("listening on %s again: %v", addr, err)
				return
			}
			proxy.ln = l
			go proxy.serve()
		case 2: // refused as starting up once: now it is up
			proxy.ready.Store(true)
		}
	}}
	db := *real
	db.Host = addr
	var log logBuffer
	s, err := Start(context.Background(), Config{DataDir: t.TempDir(), DB: db.String(), Capacity: virga.Resources{CPU: 1, MemoryMB: 512},
		WarmShims: -1, Logger: slog.New(slog.NewTextHandler(&log, nil)), clock: fc.clock()})
	if err != nil {
		t.Fatalf("Start: %v\n%s", err, log.String())
	}
	defer s.Close()
	if v, err := s.Store().SchemaVersion(context.Background()); err != nil || v == 0 {
		t.Errorf("SchemaVersion = %d, %v; want the migrated schema", v, err)
	}
	if !slices.Equal(fc.slept, []time.Duration{dbFirstBackoff, 2 * dbFirstBackoff}) {
		t.Errorf("slept %v, want %v then %v", fc.slept, dbFirstBackoff, 2*dbFirstBackoff)
	}
	var waits []string
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, "waiting for the database") {
			waits = append(waits, l)
		}
	}
	if len(waits) != 2 || !strings.Contains(waits[0], "connection refused") || !strings.Contains(waits[1], "57P03") {
		t.Errorf("want two lines saying it waits, for a refused connection then for SQLSTATE 57P03; the log:\n%s", log.String())
	}
	if !strings.Contains(log.String(), "the database is available") {
		t.Errorf("the log does not say when the database became available:\n%s", log.String())
	}
	if pw, ok := real.User.Password(); ok && strings.Contains(log.String(), ":"+pw+"@") {
		t.Errorf("the log shows the database password:\n%s", log.String())
	}
}

// TestStartDoesNotWaitForAWrongPassword: an authentication failure is
// reported at once, not waited out.
func TestStartDoesNotWaitForAWrongPassword(t *testing.T) {
	real := testPostgres(t)
	db := *real
	db.User = url.UserPassword(real.User.Username(), "not-the-password")
	fc := &fakeClock{t: time.Unix(1e9, 0), onSleep: func(int) { t.Error("Start waited for a database that refused the password") }}
	_, err := Start(context.Background(), Config{DataDir: t.TempDir(), DB: db.String(), WarmShims: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), clock: fc.clock()})
	if err == nil || !strings.Contains(err.Error(), "28P01") || errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Start with a wrong password: %v, want SQLSTATE 28P01 at once", err)
	}
}
