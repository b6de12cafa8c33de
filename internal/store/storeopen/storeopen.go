// Package storeopen picks and opens a store from a URL, so that commands take
// one --db flag for either database. It only dispatches: it must never add
// behaviour of its own to the stores it opens.
package storeopen

import (
	"context"
	"errors"
	"fmt"
	neturl "net/url"
	"regexp"
	"strings"

	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/postgres"
	"github.com/virga-ml/virga/internal/store/sqlite"
)

// Forms lists the accepted URL forms, for help texts and error messages.
const Forms = "a file path, sqlite://PATH[?synchronous=full|normal] or file:PATH[?synchronous=...] for SQLite; postgres://... or postgresql://... for PostgreSQL"

// scheme matches a URL scheme followed by "://".
var scheme = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*)://`)

// Open opens the store that url names:
//   - postgres://... or postgresql://...: PostgreSQL (see postgres.Open);
//   - sqlite://PATH, file:PATH or a plain path: SQLite (see sqlite.Open).
//
// The sqlite:// and file: forms may end in ?synchronous=full (the default)
// or ?synchronous=normal (see sqlite.SyncNormal: faster commits that survive
// a kill -9 of the process but not a power loss); in those forms a '?' always
// starts the parameters. A plain path takes no parameters.
//
// Any other scheme is an error naming the accepted forms.
func Open(ctx context.Context, url string) (store.Store, error) {
	kind, target, opts, err := parse(url)
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
	s, err := sqlite.OpenWith(ctx, target, opts)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Parse says which store url names, "sqlite" or "postgres", and what to
// pass to that store's Open: the file path (without parameters), or the URL
// unchanged.
func Parse(url string) (kind, target string, err error) {
	kind, target, _, err = parse(url)
	return kind, target, err
}

func parse(url string) (kind, target string, opts sqlite.Options, err error) {
	kind, target, params, err := split(url)
	if err != nil || params == "" {
		return kind, target, opts, err
	}
	q, err := neturl.ParseQuery(params)
	if err != nil {
		return "", "", opts, fmt.Errorf("store URL %q: parameters: %w", url, err)
	}
	for k, vs := range q {
		if k != "synchronous" || len(vs) != 1 {
			return "", "", opts, fmt.Errorf("store URL %q: unknown or repeated parameter %q: SQLite takes synchronous=full|normal", url, k)
		}
		if opts.Synchronous, err = sqlite.ParseSynchronous(vs[0]); err != nil {
			return "", "", opts, fmt.Errorf("store URL %q: %w", url, err)
		}
	}
	return kind, target, opts, nil
}

// split is Parse, also returning the parameters of a SQLite URL form.
func split(url string) (kind, target, params string, err error) {
	switch {
	case url == "":
		return "", "", "", errors.New("empty store URL: want " + Forms)
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		return "postgres", url, "", nil
	case strings.HasPrefix(url, "sqlite://"):
		target = strings.TrimPrefix(url, "sqlite://")
	case strings.HasPrefix(url, "file://"):
		target = strings.TrimPrefix(url, "file://")
	case strings.HasPrefix(url, "file:"):
		target = strings.TrimPrefix(url, "file:")
	default:
		if m := scheme.FindStringSubmatch(url); m != nil {
			// Only the scheme: the rest may hold a password.
			return "", "", "", fmt.Errorf("unsupported store URL scheme %q: want %s", m[1], Forms)
		}
		return "sqlite", url, "", nil // a plain path: '?' is part of the name
	}
	target, params, _ = strings.Cut(target, "?")
	if target == "" {
		return "", "", "", fmt.Errorf("store URL %q names no file: want %s", url, Forms)
	}
	return "sqlite", target, params, nil
}
