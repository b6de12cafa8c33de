package migrations_test

import (
	"strings"
	"testing"

	"github.com/virga-ml/virga/internal/store/migrations"
)

func TestList(t *testing.T) {
	for _, d := range []string{migrations.SQLite, migrations.Postgres} {
		ms, err := migrations.List(d)
		if err != nil {
			t.Fatalf("List(%s): %v", d, err)
		}
		for i, m := range ms {
			if m.Version != i+1 || strings.TrimSpace(m.SQL) == "" {
				t.Errorf("%s migration %d: version %d, %d bytes of SQL", d, i, m.Version, len(m.SQL))
			}
		}
		latest, err := migrations.Latest(d)
		if err != nil || latest != ms[len(ms)-1].Version {
			t.Errorf("Latest(%s) = %d, %v; want %d", d, latest, err, ms[len(ms)-1].Version)
		}
	}
	// Both dialects must stay at the same version: the stores share one schema.
	s, _ := migrations.Latest(migrations.SQLite)
	p, _ := migrations.Latest(migrations.Postgres)
	if s != p {
		t.Errorf("latest versions differ: sqlite %d, postgres %d", s, p)
	}
	if _, err := migrations.List("oracle"); err == nil {
		t.Error("List(oracle) succeeded")
	}
}
