package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/virga-ml/virga/internal/control"
)

// TestPostsAreJSON: a server without a token refuses changes that are not
// JSON, so every POST says it is, with a body or without.
func TestPostsAreJSON(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Method+" "+r.URL.Path] = r.Header.Get("Content-Type")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{})
	}))
	defer srv.Close()
	c := New(srv.URL, "")
	ctx := context.Background()
	_, _ = c.Submit(ctx, "x.yaml", []byte("name: x"))
	_, _ = c.Control(ctx, 1, control.OpStop)
	_, _ = c.Ask(ctx, 1)
	_, _ = c.Report(ctx, 1, 1, map[string]float64{"loss": 1})
	_, _ = c.Complete(ctx, 1, true)
	if len(seen) != 5 {
		t.Fatalf("requests %v, want 5", seen)
	}
	for k, ct := range seen {
		if ct != "application/json" {
			t.Errorf("%s: Content-Type %q, want application/json", k, ct)
		}
	}
}
