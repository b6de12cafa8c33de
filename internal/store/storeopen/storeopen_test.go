package storeopen_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/virga-ml/virga/internal/store/postgres"
	"github.com/virga-ml/virga/internal/store/sqlite"
	"github.com/virga-ml/virga/internal/store/storeopen"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		url        string
		wantKind   string
		wantTarget string
		wantErr    string // substring of the error; "" for success
	}{
		{url: ".virga/virga.db", wantKind: "sqlite", wantTarget: ".virga/virga.db"},
		{url: "/var/lib/virga/virga.db", wantKind: "sqlite", wantTarget: "/var/lib/virga/virga.db"},
		{url: "sqlite://data/v.db", wantKind: "sqlite", wantTarget: "data/v.db"},
		{url: "sqlite:///abs/v.db", wantKind: "sqlite", wantTarget: "/abs/v.db"},
		{url: "file:data/v.db", wantKind: "sqlite", wantTarget: "data/v.db"},
		{url: "file:///abs/v.db", wantKind: "sqlite", wantTarget: "/abs/v.db"},
		{url: "postgres://u:p@h/db", wantKind: "postgres", wantTarget: "postgres://u:p@h/db"},
		{url: "postgresql://h/db?search_path=x", wantKind: "postgres", wantTarget: "postgresql://h/db?search_path=x"},
		{url: "sqlite:///abs/v.db?synchronous=normal", wantKind: "sqlite", wantTarget: "/abs/v.db"},
		{url: "file:data/v.db?synchronous=FULL", wantKind: "sqlite", wantTarget: "data/v.db"},
		{url: "/odd/name?x.db", wantKind: "sqlite", wantTarget: "/odd/name?x.db"},
		{url: "sqlite:///abs/v.db?synchronous=off", wantErr: `want full or normal`},
		{url: "sqlite:///abs/v.db?journal_mode=delete", wantErr: `unknown or repeated parameter "journal_mode"`},
		{url: "sqlite://?synchronous=normal", wantErr: "names no file"},
		{url: "", wantErr: "empty store URL"},
		{url: "sqlite://", wantErr: "names no file"},
		{url: "file:", wantErr: "names no file"},
		{url: "mysql://root:secret@h/db", wantErr: `unsupported store URL scheme "mysql"`},
		{url: "http://example.com/db", wantErr: "postgres://"},
	} {
		kind, target, err := storeopen.Parse(tc.url)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Parse(%q) error = %v, want one containing %q", tc.url, err, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("Parse(%q) error leaks the password: %v", tc.url, err)
			}
			continue
		}
		if err != nil || kind != tc.wantKind || target != tc.wantTarget {
			t.Errorf("Parse(%q) = %q, %q, %v; want %q, %q", tc.url, kind, target, err, tc.wantKind, tc.wantTarget)
		}
	}
}

func TestOpenSQLite(t *testing.T) {
	dir := t.TempDir()
	for _, u := range []string{
		filepath.Join(dir, "plain", "v.db"),
		"sqlite://" + filepath.Join(dir, "sqlite", "v.db"),
		"file:" + filepath.Join(dir, "file", "v.db"),
		"sqlite://" + filepath.Join(dir, "normal", "v.db") + "?synchronous=normal",
	} {
		s, err := storeopen.Open(context.Background(), u)
		if err != nil {
			t.Fatalf("Open(%q): %v", u, err)
		}
		if _, ok := s.(*sqlite.Store); !ok {
			t.Errorf("Open(%q) = %T, want *sqlite.Store", u, s)
		}
		s.Close()
	}
	for _, sub := range []string{"plain", "sqlite", "file", "normal"} {
		if _, err := os.Stat(filepath.Join(dir, sub, "v.db")); err != nil {
			t.Errorf("database for the %s form not where asked: %v", sub, err)
		}
	}
}

func TestOpenPostgres(t *testing.T) {
	u := os.Getenv("VIRGA_TEST_POSTGRES")
	if u == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("VIRGA_TEST_POSTGRES is not set; CI must run the PostgreSQL tests")
		}
		t.Skip("set VIRGA_TEST_POSTGRES to run, e.g. VIRGA_TEST_POSTGRES=$(scripts/postgres.sh start)")
	}
	// A schema of the test's own, so the shared public schema stays empty.
	ctx := context.Background()
	schema := fmt.Sprintf("virga_t_open_%d", time.Now().UnixNano())
	admin, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatalf("connecting to VIRGA_TEST_POSTGRES: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	defer admin.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	s, err := storeopen.Open(ctx, u+sep+"search_path="+schema)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	if _, ok := s.(*postgres.Store); !ok {
		t.Errorf("Open = %T, want *postgres.Store", s)
	}
}

func TestOpenUnsupported(t *testing.T) {
	_, err := storeopen.Open(context.Background(), "mongodb://h/db")
	if err == nil || !strings.Contains(err.Error(), storeopen.Forms) {
		t.Fatalf("Open(mongodb://) error = %v, want one naming the accepted forms", err)
	}
}
