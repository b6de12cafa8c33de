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
	for _, want := range []string{"fixed", "reactive", "spothedge", "virga", "virga vs spothedge", "9 spot zones", "$0.918/h"} {
		for _, trace := range []string{"azure", "poisson"} {
			if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), trace) {
				t.Fatalf("output lacks %q or %q:\n%s", want, trace, out.String())
			}
		}
	}
}

func TestParseNamesTheBadFlag(t *testing.T) {
	for _, args := range [][]string{{"-sizes", "10,x"}, {"-traces", "alibaba"}, {"-policies", "knative"}} {
		_, err := parse(args)
		if err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("parse(%q) = %v, want an error naming %s", args, err, args[0])
		}
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
