// Package migrations holds the numbered SQL files that build Virga's schema,
// one directory per dialect (sqlite/, postgres/), embedded in the binary.
// It only parses and orders them; running them, under the dialect's lock and
// in a transaction, is the job of each store. Files are never edited once
// released: a schema change is a new file with the next number.
package migrations

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

//go:embed sqlite/*.sql postgres/*.sql
var files embed.FS

// Dialects this package holds migrations for.
const (
	SQLite   = "sqlite"
	Postgres = "postgres"
)

// Migration is one numbered schema change.
type Migration struct {
	Version int    // from the file name's numeric prefix, e.g. 1 for 0001_init.sql
	Name    string // the file name
	SQL     string // the statements, run as one script inside the migration's transaction
}

// List returns the dialect's migrations ordered by version. Versions must be
// unique, start at 1 and have no gaps.
func List(dialect string) ([]Migration, error) {
	entries, err := fs.ReadDir(files, dialect)
	if err != nil {
		return nil, fmt.Errorf("reading %s migrations: %w", dialect, err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		prefix, _, ok := strings.Cut(name, "_")
		if !ok {
			return nil, fmt.Errorf("migration %s/%s: name must be NNNN_description.sql", dialect, name)
		}
		v, err := strconv.Atoi(prefix)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("migration %s/%s: name must start with a positive number", dialect, name)
		}
		body, err := fs.ReadFile(files, path.Join(dialect, name))
		if err != nil {
			return nil, fmt.Errorf("reading migration %s/%s: %w", dialect, name, err)
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %s/%s: version %d out of sequence (want %d)", dialect, m.Name, m.Version, i+1)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no %s migrations", dialect)
	}
	return out, nil
}

// Latest returns the newest version of the dialect's migrations.
func Latest(dialect string) (int, error) {
	ms, err := List(dialect)
	if err != nil {
		return 0, err
	}
	return ms[len(ms)-1].Version, nil
}
