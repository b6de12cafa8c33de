package spec

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics, that failures are always an
// *Error with at least one problem, and that a parsed experiment's helpers
// work on it. The seed corpus is every file under testdata.
func FuzzParse(f *testing.F) {
	seedFiles(f, "testdata/good/*.yaml", "testdata/bad/*.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := Parse("fuzz.yaml", data)
		if err != nil {
			checkProblems(t, err, data)
			return
		}
		if e.Name == "" || e.Objective.Metric == "" || e.MaxTrials < 1 || e.MaxConcurrent < 1 {
			t.Fatalf("parsed experiment lacks required values: %+v", e)
		}
		if len(e.Order) != len(e.Hyperparameters) {
			t.Fatalf("Order %v does not match %d hyperparameters", e.Order, len(e.Hyperparameters))
		}
		hp := map[string]any{}
		for _, name := range e.Order {
			vals := e.Hyperparameters[name].GridValues()
			if len(vals) == 0 {
				t.Fatalf("hyperparameter %s has no grid values", name)
			}
			hp[name] = vals[0]
		}
		if _, err := FillArgv(e.Entrypoint.Argv, hp); err != nil {
			t.Fatalf("FillArgv on a valid experiment: %v", err)
		}
		for k, v := range e.Entrypoint.Env {
			if _, err := FillString(v, hp); err != nil {
				t.Fatalf("FillString on env %s: %v", k, err)
			}
		}
		if e.Searcher.Name == "grid" && e.MaxTrials > e.GridSize() {
			t.Fatalf("grid MaxTrials %d exceeds GridSize %d", e.MaxTrials, e.GridSize())
		}
	})
}

// seedFiles adds every file matching the patterns to f's seed corpus.
func seedFiles(f *testing.F, patterns ...string) {
	f.Helper()
	for _, pattern := range patterns {
		files, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
}

// checkProblems fails t unless err, from parsing data as "fuzz.yaml", is an
// *Error whose problems all name that file and carry a well-formed message.
func checkProblems(t *testing.T, err error, data []byte) {
	t.Helper()
	var perr *Error
	if !errors.As(err, &perr) || len(perr.Problems) == 0 {
		t.Fatalf("error %T %q is not an *Error with problems", err, err)
	}
	for _, p := range perr.Problems {
		badVerb := strings.Contains(p.Msg, "%!") && !bytes.Contains(data, []byte("%!"))
		if p.File != "fuzz.yaml" || p.Msg == "" || badVerb {
			t.Fatalf("malformed problem %+v", p)
		}
	}
}
