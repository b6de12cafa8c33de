package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/virga-ml/virga"

	"github.com/virga-ml/virga/internal/api/wire"
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
	_, _ = c.Control(ctx, 1, wire.OpStop)
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

// TestErrorsDecodedOnce: do, Logs and Watch read error replies the same way:
// the JSON error, or the body as text when it is not JSON.
func TestErrorsDecodedOnce(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/v1/trials/1") || strings.HasPrefix(r.URL.Path, "/api/v1/experiments/1") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"error": "trial 1 not found"}`)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, "<html>blocked by the proxy</html>\n")
	}))
	defer srv.Close()
	c := New(srv.URL, "")
	ctx := context.Background()
	var buf bytes.Buffer
	for name, err := range map[string]error{
		"do json":    func() error { _, err := c.Trial(ctx, 1); return err }(),
		"logs json":  c.Logs(ctx, 1, false, &buf),
		"watch json": c.Watch(ctx, 1, func(WatchEvent) error { return nil }),
		"do text":    func() error { _, err := c.Trial(ctx, 2); return err }(),
		"logs text":  c.Logs(ctx, 2, false, &buf),
		"watch text": c.Watch(ctx, 2, func(WatchEvent) error { return nil }),
	} {
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%s: %v, want an *Error", name, err)
			continue
		}
		want, code := "<html>blocked by the proxy</html> (HTTP 403)", http.StatusForbidden
		if strings.HasSuffix(name, "json") {
			want, code = "trial 1 not found (HTTP 404)", http.StatusNotFound
		}
		if e.Status != code || e.Error() != want {
			t.Errorf("%s: %q (HTTP %d), want %q", name, e.Error(), e.Status, want)
		}
		if code == http.StatusNotFound && !errors.Is(err, virga.ErrNotFound) {
			t.Errorf("%s: not ErrNotFound", name)
		}
	}
}

// TestWatchSaysUnreachable: Watch retries a server that is away, says so once
// after a few failures, and says when it is back.
func TestWatchSaysUnreachable(t *testing.T) {
	defer func(d time.Duration) { reconnectWait = d }(reconnectWait)
	reconnectWait = 10 * time.Millisecond

	// Nothing listens: one "unreachable", then retries until ctx ends.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	var kinds []string
	err = New(dead, "").Watch(ctx, 1, func(ev WatchEvent) error {
		kinds = append(kinds, ev.Kind)
		var msg string
		if err := json.Unmarshal(ev.Data, &msg); err != nil || !strings.Contains(msg, "server unreachable at "+dead+", retrying...") {
			t.Errorf("event %s %s: want a message naming %s", ev.Kind, ev.Data, dead)
		}
		return nil
	})
	if !errors.Is(err, context.DeadlineExceeded) || len(kinds) != 1 || kinds[0] != "unreachable" {
		t.Errorf("Watch of a dead server: %v, events %v; want the deadline after one unreachable", err, kinds)
	}

	// A server that answers 503 a few times, then streams.
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= unreachableAfter+1 {
			http.Error(w, "restarting", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: snapshot\ndata: {}\n\nevent: end\ndata: {}\n\n")
	}))
	defer srv.Close()
	kinds = nil
	err = New(srv.URL, "").Watch(context.Background(), 1, func(ev WatchEvent) error {
		kinds = append(kinds, ev.Kind)
		return nil
	})
	if err != nil || strings.Join(kinds, " ") != "unreachable reconnected snapshot end" {
		t.Errorf("Watch through a restart: %v, events %v; want unreachable reconnected snapshot end", err, kinds)
	}

	// An error of fn ends the watch (it is not a reason to reconnect).
	boom := errors.New("boom")
	if err := New(srv.URL, "").Watch(context.Background(), 1, func(WatchEvent) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("Watch with a failing fn: %v, want boom", err)
	}
}
