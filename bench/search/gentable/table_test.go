package main

import (
	"bytes"
	"encoding/json"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/virga-ml/virga/examples/digits-go/mlp"
)

// tablesDir holds the committed tables, relative to this package.
const tablesDir = "../tables"

// committed are the tables that must be in tablesDir, by name.
var committed = []string{"digits-mlp", "digits-mlp-e0", "digits-xgb"}

func readTable(t *testing.T, name string) *Table {
	t.Helper()
	tb, err := ReadFile(filepath.Join(tablesDir, name+".json.gz"))
	if err != nil {
		t.Fatalf("reading table: %v", err)
	}
	return tb
}

// TestCommittedTablesFollowFormat checks each committed table against
// bench/search/FORMAT.md: the configurations are the grid of the space in
// order, and every curve and time is complete and finite.
func TestCommittedTablesFollowFormat(t *testing.T) {
	for _, name := range committed {
		t.Run(name, func(t *testing.T) {
			tb := readTable(t, name)
			checkTable(t, name, tb)
		})
	}
}

func checkTable(t *testing.T, name string, tb *Table) {
	t.Helper()
	if tb.Name != name || tb.Metric == "" || tb.Model == "" || tb.Dataset == "" || tb.Command == "" {
		t.Errorf("header: name %q (want %q), metric %q, model %q, dataset %q, command %q; want all set",
			tb.Name, name, tb.Metric, tb.Model, tb.Dataset, tb.Command)
	}
	if tb.Direction != "minimize" && tb.Direction != "maximize" {
		t.Errorf("direction %q, want minimize or maximize", tb.Direction)
	}
	if tb.Epochs < 1 {
		t.Fatalf("epochs %d, want at least 1", tb.Epochs)
	}
	checkSpace(t, tb.Space)
	grid := Grid(tb.Space)
	if len(tb.Configs) != len(grid) || len(grid) < 500 {
		t.Fatalf("%d configs, want the %d of the grid (and at least 500)", len(tb.Configs), len(grid))
	}
	for i, c := range tb.Configs {
		if !reflect.DeepEqual(c.HParams, grid[i]) {
			t.Fatalf("config %d has hparams %v, want %v (the grid in order, last dimension fastest)", i, c.HParams, grid[i])
		}
		if len(c.Curve) != tb.Epochs || len(c.Seconds) != tb.Epochs {
			t.Fatalf("config %d: %d curve values and %d seconds, want %d each", i, len(c.Curve), len(c.Seconds), tb.Epochs)
		}
		for e := range tb.Epochs {
			v, s := float64(c.Curve[e]), float64(c.Seconds[e])
			if math.IsNaN(v) || math.IsInf(v, 0) || !(s > 0) || math.IsInf(s, 0) {
				t.Fatalf("config %d, epoch %d: value %v, seconds %v; want a finite value and positive finite seconds", i, e+1, v, s)
			}
		}
	}
}

// checkSpace checks that int and float values are ascending numbers (whole
// for int, positive where log) and categoricals are strings.
func checkSpace(t *testing.T, space []Dim) {
	t.Helper()
	if len(space) == 0 {
		t.Fatal("empty space")
	}
	for _, d := range space {
		if d.Name == "" || len(d.Values) == 0 {
			t.Errorf("dimension %+v: want a name and values", d)
			continue
		}
		if d.Type == "categorical" {
			for _, v := range d.Values {
				if _, ok := v.(string); !ok {
					t.Errorf("%s: categorical value %v is not a string", d.Name, v)
				}
			}
			continue
		}
		if d.Type != "int" && d.Type != "float" {
			t.Errorf("%s: type %q, want int, float or categorical", d.Name, d.Type)
			continue
		}
		prev := math.Inf(-1)
		for _, v := range d.Values {
			f, ok := v.(float64)
			switch {
			case !ok:
				t.Errorf("%s: value %v is not a number", d.Name, v)
			case !(f > prev):
				t.Errorf("%s: values %v are not strictly ascending", d.Name, d.Values)
			case d.Type == "int" && f != math.Trunc(f):
				t.Errorf("%s: int value %v is not whole", d.Name, f)
			case d.Log && !(f > 0):
				t.Errorf("%s: log dimension has value %v <= 0", d.Name, f)
			}
			prev = f
		}
	}
}

// TestDigitsTableMatchesCode checks that the committed digits-mlp table is
// this code's: the same space and epochs, and a cheap configuration retrained
// now gives the same curve (up to the 5 digits written and floating-point
// differences between architectures).
func TestDigitsTableMatchesCode(t *testing.T) {
	tb := readTable(t, "digits-mlp")
	want := &Table{Space: digitsSpace()}
	if !reflect.DeepEqual(tb.Space, roundTrip(t, want).Space) || tb.Epochs != digitsEpochs {
		t.Fatalf("the table's space or epochs (%d) differ from digitsSpace and digitsEpochs (%d): regenerate it", tb.Epochs, digitsEpochs)
	}
	ds, err := mlp.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	grid := Grid(tb.Space)
	i := slices.IndexFunc(grid, func(hp map[string]any) bool {
		return hp["hidden"] == 8.0 && hp["batch"] == 128.0 && hp["lr"] == 0.19019 && hp["l2"] == 1e-4
	})
	if i < 0 {
		t.Fatal("the grid lacks the configuration this test retrains")
	}
	curve, seconds := trainDigits(ds, digitsSettings(grid[i]), tb.Epochs, false)
	for e := range curve {
		got, tab := float64(curve[e]), float64(tb.Configs[i].Curve[e])
		if math.Abs(got-tab) > 1e-3*math.Abs(tab) {
			t.Fatalf("config %d, epoch %d: retrained val_loss %v, table %v", i, e+1, got, tab)
		}
		if !(seconds[e] > 0) {
			t.Errorf("epoch %d took %v s, want > 0", e+1, seconds[e])
		}
	}
}

// TestDigitsE0TableMatchesCode checks that digits-mlp-e0 is digits-mlp with
// the untrained network as its first epoch: one configuration retrained with
// untrainedFirst gives the table's curve, and every curve's epochs 2..27 are
// the digits-mlp curve's epochs 1..26 (the same training passes).
func TestDigitsE0TableMatchesCode(t *testing.T) {
	e0, base := readTable(t, "digits-mlp-e0"), readTable(t, "digits-mlp")
	if !reflect.DeepEqual(e0.Space, base.Space) || e0.Epochs != digitsEpochs {
		t.Fatalf("digits-mlp-e0's space or epochs (%d) differ from digits-mlp's: regenerate it", e0.Epochs)
	}
	for i := range e0.Configs {
		got, want := e0.Configs[i].Curve[1:], base.Configs[i].Curve[:digitsEpochs-1]
		for e := range got {
			if a, b := float64(got[e]), float64(want[e]); math.Abs(a-b) > 1e-3*math.Abs(b) {
				t.Fatalf("config %d: epoch %d is %v, but digits-mlp's epoch %d is %v", i, e+2, a, e+1, b)
			}
		}
	}
	ds, err := mlp.LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	const i = 0
	curve, _ := trainDigits(ds, digitsSettings(Grid(e0.Space)[i]), 3, true)
	for e := range curve {
		if a, b := float64(curve[e]), float64(e0.Configs[i].Curve[e]); math.Abs(a-b) > 1e-3*math.Abs(b) {
			t.Fatalf("config %d, epoch %d: retrained val_loss %v, table %v", i, e+1, a, b)
		}
	}
}

// roundTrip encodes and decodes tb, as a table file would.
func roundTrip(t *testing.T, tb *Table) *Table {
	t.Helper()
	var buf bytes.Buffer
	if err := tb.encode(&buf); err != nil {
		t.Fatal(err)
	}
	var got Table
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("decoding %s: %v", buf.String(), err)
	}
	return &got
}

func TestGridOrderIsMixedRadix(t *testing.T) {
	space := []Dim{
		{Name: "a", Type: "float", Values: []any{1.0, 2.0}},
		{Name: "b", Type: "categorical", Values: []any{"x", "y", "z"}},
	}
	got := Grid(space)
	want := []map[string]any{
		{"a": 1.0, "b": "x"}, {"a": 1.0, "b": "y"}, {"a": 1.0, "b": "z"},
		{"a": 2.0, "b": "x"}, {"a": 2.0, "b": "y"}, {"a": 2.0, "b": "z"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Grid = %v, want %v", got, want)
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	tb := &Table{
		Name: "tiny", Model: "m", Dataset: "d", Command: "c", Metric: "loss", Direction: "minimize", Epochs: 2,
		Space: []Dim{{Name: "lr", Type: "float", Log: true, Values: []any{0.001, 0.1}}},
	}
	for _, hp := range Grid(tb.Space) {
		tb.Configs = append(tb.Configs, Config{HParams: hp, Curve: []Sig5{1.23456789, 1e-7}, Seconds: []Sig5{0.0123456, 2}})
	}
	path := filepath.Join(t.TempDir(), "tiny.json.gz")
	if err := tb.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "tiny" || len(got.Configs) != 2 || got.Configs[1].Curve[0] != 1.2346 ||
		got.Configs[0].Curve[1] != 1e-7 || got.Configs[0].Seconds[0] != 0.012346 || got.Configs[1].HParams["lr"] != 0.1 {
		t.Errorf("round trip gave %+v", got)
	}

	tb.Configs[0].Curve[0] = Sig5(math.NaN())
	err = tb.WriteFile(path)
	if err == nil || !strings.Contains(err.Error(), "not a finite number") {
		t.Errorf("writing a NaN: err = %v, want a refusal", err)
	}
	if again, err := ReadFile(path); err != nil || len(again.Configs) != 2 {
		t.Errorf("a failed write damaged the previous table: %v", err)
	}
}
