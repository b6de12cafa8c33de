package main

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sharedData finds ../shared/data beside the checkout, as -data defaults to.
func sharedData(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		p := filepath.Join(dir, "shared", "data")
		if _, err := os.Stat(filepath.Join(p, "skypilot-spot-traces")); err == nil {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("the shared traces are not beside this checkout")
		}
		dir = parent
	}
}

func TestRunPrintsEveryPolicy(t *testing.T) {
	var out bytes.Buffer
	err := run([]string{"-data", sharedData(t), "-capacity", "../../examples/capacity/aws-p3.yaml",
		"-sizes", "3", "-seeds", "1", "-hours", "1"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fixed", "reactive", "spothedge", "spothedge+2/od", "spothedge+12", "virga", "virga vs spothedge",
		"9 spot zones", "$0.918/h", "tuning set: seeds (start in the spot traces) 1 (day", "held-out set: seeds (start in the spot traces) 101 (day"} {
		for _, trace := range []string{"azure", "poisson"} {
			if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), trace) {
				t.Fatalf("output lacks %q or %q:\n%s", want, trace, out.String())
			}
		}
	}
}

func TestParseNamesTheBadFlag(t *testing.T) {
	for _, args := range [][]string{{"-sizes", "10,x"}, {"-traces", "alibaba"}, {"-policies", "knative"},
		{"-policies", "spothedge+x"}, {"-policies", "spothedge+-1"}, {"-set", "all"}} {
		_, err := parse(args)
		if err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("parse(%q) = %v, want an error naming %s", args, err, args[0])
		}
	}
}

func TestSeedSetsAreDisjoint(t *testing.T) {
	tune, held := seedsOf("tune", 1, 50), seedsOf("heldout", 1, 50)
	seen := map[int]bool{}
	for _, s := range tune {
		seen[s] = true
	}
	for _, s := range held {
		if seen[s] {
			t.Fatalf("seed %d is in both the tuning and the held-out set", s)
		}
	}
	if tune[0] != 1 || held[0] != 101 {
		t.Fatalf("sets start at %d and %d, want 1 and 101", tune[0], held[0])
	}
	if got := seedsOf("heldout", 4, 3); len(got) != 3 || got[0] != 104 || got[2] != 106 {
		t.Fatalf("-from 4 -seeds 3 of the held-out set gave %v, want 104-106", got)
	}
	// Offsets depend on the seed only, and differ between seeds.
	tick, room := 195*time.Second, 30*24*time.Hour
	if offsetOf(101, tick, room) != offsetOf(101, tick, room) || offsetOf(1, tick, room) == offsetOf(101, tick, room) {
		t.Fatal("offsetOf is not a function of the seed alone")
	}
}

func TestArrivalsFollowTheEnvelope(t *testing.T) {
	st := &setup{}
	arr := arrivals("poisson", st, 10, 24*time.Hour, rand.New(rand.NewPCG(1, 2)))
	count := func(from, to time.Duration) float64 {
		n := 0
		for _, a := range arr {
			if a >= from && a < to {
				n++
			}
		}
		return float64(n) / (to - from).Seconds()
	}
	noon, midnight := count(11*time.Hour, 13*time.Hour), count(0, time.Hour)
	// The envelope is 1 at noon and 0.2 at midnight: about 10 and 2.1/s.
	if noon < 9.5 || noon > 10.2 || midnight < 1.9 || midnight > 2.4 {
		t.Fatalf("%.2f/s around noon and %.2f/s in the first hour; want about 10 and 2.1", noon, midnight)
	}
}
