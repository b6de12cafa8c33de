// Package storeopen picks and opens a store from a URL, so that commands take
// one --db flag for either database. It only dispatches: it must never add
// behaviour of its own to the stores it opens.
package storeopen

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/postgres"
	"github.com/virga-ml/virga/internal/store/sqlite"
)

// Forms lists the accepted URL forms, for help texts and error messages.
const Forms = "a file path, sqlite://PATH or file:PATH for SQLite; postgres://... or postgresql://... for PostgreSQL"

// scheme matches a URL scheme followed by "://".
var scheme = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*)://`)

// Open opens the store that url names:
//   - postgres://... or postgresql://...: PostgreSQL (see postgres.Open);
//   - sqlite://PATH, file:PATH or a plain path: SQLite (see sqlite.Open).
//
// Any other scheme is an error naming the accepted forms.
func Open(ctx context.Context, url string) (store.Store, error) {
	kind, target, err := Parse(url)
	if err != nil {
		return nil, err
	}
	if kind == "postgres" {
		s, err := postgres.Open(ctx, target)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	s, err := sqlite.Open(ctx, target)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Parse says which store url names, "sqlite" or "postgres", and what to
// pass to that store's Open: the file path, or the URL unchanged.
func Parse(url string) (kind, target string, err error) {
	switch {
	case url == "":
		return "", "", errors.New("empty store URL: want " + Forms)
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		return "postgres", url, nil
	case strings.HasPrefix(url, "sqlite://"):
		target = strings.TrimPrefix(url, "sqlite://")
	case strings.HasPrefix(url, "file://"):
		target = strings.TrimPrefix(url, "file://")
	case strings.HasPrefix(url, "file:"):
		target = strings.TrimPrefix(url, "file:")
	default:
		if m := scheme.FindStringSubmatch(url); m != nil {
			// Only the scheme: the rest may hold a password.
			return "", "", fmt.Errorf("unsupported store URL scheme %q: want %s", m[1], Forms)
		}
		target = url
	}
	if target == "" {
		return "", "", fmt.Errorf("store URL %q names no file: want %s", url, Forms)
	}
	return "sqlite", target, nil
}
