package api

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/sqlite"
)

// TestCheckToken: the exported token check other servers of the data
// directory use accepts the admin token and nothing else.
func TestCheckToken(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "virga.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sum := sha256.Sum256([]byte("admin-secret"))
	if err := st.PutToken(ctx, &store.Token{Name: "admin", Hash: sum[:], CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	s := New(Config{Store: st})
	for range 2 { // the second time from the cache
		if err := s.CheckToken(ctx, "admin-secret"); err != nil {
			t.Errorf("CheckToken(admin token) = %v, want nil", err)
		}
	}
	for _, tok := range []string{"", "admin-secre", "vt-trial-token"} {
		if err := s.CheckToken(ctx, tok); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("CheckToken(%q) = %v, want ErrInvalidToken", tok, err)
		}
	}
}

// TestMetricsWithoutControlLoop: the read-only API of a data directory with
// no server has no control loop to measure: /metrics is 503 saying so.
func TestMetricsWithoutControlLoop(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "virga.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/metrics", nil)
	New(Config{Store: st}).ServeHTTP(w, r)
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "virga server") {
		t.Errorf("GET /metrics without a control loop: HTTP %d %s; want 503 saying to start a server", w.Code, w.Body)
	}
}
