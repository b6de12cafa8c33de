// Package benchio holds what the capacity benchmarks share: reading a
// directory of availability traces and writing their results.
package benchio

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/virga-ml/virga/internal/capacity/trace"
)

// Trace is one availability trace, named by its path under the directory.
type Trace struct {
	Name string
	*trace.Availability
}

// Traces reads every .json availability trace under dir, sorted by name.
func Traces(dir string) ([]Trace, error) {
	var out []Trace
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".json") {
			return err
		}
		a, err := trace.ReadAvailability(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		out = append(out, Trace{Name: rel, Availability: a})
		return nil
	})
	sort.Slice(out, func(i, k int) bool { return out[i].Name < out[k].Name })
	return out, err
}

// Write writes runs as JSON lines to dir/runs.jsonl and the results table
// to dir/results.md.
func Write[T any](dir string, runs []T, results string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "runs.jsonl"))
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, r := range runs {
		if err := enc.Encode(r); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(results), 0o644)
}
