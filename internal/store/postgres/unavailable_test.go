package postgres_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/postgres"
)

// TestOpenSaysWhenWaitingMayHelp opens the test server in ways that fail:
// only a server that cannot be reached is store.ErrUnavailable (a server
// starting up, SQLSTATE 57P03, is in internal/server's
// TestStartWaitsForPostgres); a wrong password, a missing database or a
// bad parameter will not be cured by waiting.
func TestOpenSaysWhenWaitingMayHelp(t *testing.T) {
	base, err := url.Parse(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	with := func(f func(u *url.URL)) string {
		u := *base
		f(&u)
		return u.String()
	}
	for _, c := range []struct {
		name            string
		url             string
		wantUnavailable bool
		wantInErr       string
	}{
		{"nothing listens", with(func(u *url.URL) { u.Host = closed }), true, "connection refused"},
		{"wrong password", with(func(u *url.URL) { u.User = url.UserPassword(base.User.Username(), "not-the-password") }), false, "28P01"},
		{"no such database", with(func(u *url.URL) { u.Path = "/virga_no_such_database" }), false, "3D000"},
		{"bad pool size", with(func(u *url.URL) { u.RawQuery = "pool_max_conns=x" }), false, "pool_max_conns"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := postgres.Open(context.Background(), c.url)
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if errors.Is(err, store.ErrUnavailable) != c.wantUnavailable || !strings.Contains(err.Error(), c.wantInErr) {
				t.Errorf("Open: %v; want store.ErrUnavailable %v, naming %q", err, c.wantUnavailable, c.wantInErr)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := postgres.Open(ctx, with(func(u *url.URL) { u.Host = closed })); errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Open with a cancelled context: %v; the caller gave up, waiting is not the answer", err)
	}
}
