package main

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"github.com/virga-ml/virga/internal/search/replay"
)

// Table is a tabular benchmark in the layout of bench/search/FORMAT.md: the
// full grid of a small search space, each configuration trained to the end.
type Table struct {
	Name      string   `json:"name"`
	Model     string   `json:"model"`
	Dataset   string   `json:"dataset"`
	Command   string   `json:"command"`
	Metric    string   `json:"metric"`
	Direction string   `json:"direction"`
	Epochs    int      `json:"epochs"`
	Notes     string   `json:"notes,omitempty"` // how the values were produced, beyond the fields above
	Space     []Dim    `json:"space"`
	Configs   []Config `json:"configs"`
}

// Dim is one dimension of a table's search space: the type the replay
// reads (values are float64 for int and float dimensions, or strings).
type Dim = replay.Dim

// Config is one point of the grid and what training it measured.
type Config struct {
	HParams map[string]any `json:"hparams"`
	Curve   []Sig5         `json:"curve"`   // the objective after epoch 1..Epochs
	Seconds []Sig5         `json:"seconds"` // wall time of epoch 1..Epochs
}

// Sig5 is a float64 written to JSON with 5 significant digits, which keeps the
// tables small; measured seconds and losses carry no more precision than that.
type Sig5 float64

// MarshalJSON writes s in the shortest form of its 5-significant-digit rounding.
func (s Sig5) MarshalJSON() ([]byte, error) {
	v := float64(s)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil, fmt.Errorf("%v is not a finite number", v)
	}
	return strconv.AppendFloat(nil, round5(v), 'g', -1, 64), nil
}

// round5 rounds v to 5 significant digits.
func round5(v float64) float64 {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 5, 64), 64)
	return r
}

// Grid returns the cartesian product of the dimensions' values in the order of
// FORMAT.md: the last dimension varies fastest, so configuration i is the
// mixed-radix number whose digits are the value indices.
func Grid(space []Dim) []map[string]any {
	n := 1
	for _, d := range space {
		n *= len(d.Values)
	}
	out := make([]map[string]any, n)
	for i := range out {
		hp := make(map[string]any, len(space))
		rest := i
		for k := len(space) - 1; k >= 0; k-- {
			d := space[k]
			hp[d.Name] = d.Values[rest%len(d.Values)]
			rest /= len(d.Values)
		}
		out[i] = hp
	}
	return out
}

// WriteFile writes t as gzipped JSON to path, through a temporary file renamed
// into place so that a failed run leaves the previous table.
func (t *Table) WriteFile(path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("writing table: %w", err)
	}
	gz, err := gzip.NewWriterLevel(tmp, gzip.BestCompression)
	if err != nil {
		tmp.Close()
		return err
	}
	if err := t.encode(gz); err != nil {
		tmp.Close()
		return fmt.Errorf("writing table %s: %w", path, err)
	}
	if err := gz.Close(); err != nil {
		tmp.Close()
		return fmt.Errorf("writing table %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing table %s: %w", path, err)
	}
	return os.Rename(tmp.Name(), path)
}

// encode writes t as JSON, one configuration per line so the decompressed
// table still reads (and diffs) well.
func (t *Table) encode(w io.Writer) error {
	head := *t
	head.Configs = nil
	b, err := json.Marshal(head)
	if err != nil {
		return err
	}
	// Reopen the object where "configs":null stands and list the configurations.
	const null = `"configs":null}`
	if _, err := io.WriteString(w, string(b[:len(b)-len(null)])+"\"configs\": [\n"); err != nil {
		return err
	}
	for i, c := range t.Configs {
		line, err := json.Marshal(c)
		if err != nil {
			return fmt.Errorf("config %d: %w", i, err)
		}
		sep := ",\n"
		if i == len(t.Configs)-1 {
			sep = "\n"
		}
		if _, err := w.Write(append(line, sep...)); err != nil {
			return err
		}
	}
	_, err = io.WriteString(w, "]}\n")
	return err
}

// ReadFile reads a gzipped JSON table.
func ReadFile(path string) (*Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var t Table
	if err := json.NewDecoder(gz).Decode(&t); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &t, nil
}
