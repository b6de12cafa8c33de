package curve_test

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/virga-ml/virga/internal/search/curve"
)

// table is the part of a bench/search table (bench/search/FORMAT.md) that
// the forecast is checked against.
type table struct {
	Name    string `json:"name"`
	Epochs  int    `json:"epochs"`
	Configs []struct {
		Curve []float64 `json:"curve"`
	} `json:"configs"`
}

func readTable(t *testing.T, name string) *table {
	t.Helper()
	path := filepath.Join("..", "..", "..", "bench", "search", "tables", name+".json.gz")
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("%s not built (go run ./bench/search/gentable)", path)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var tab table
	if err := json.NewDecoder(z).Decode(&tab); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &tab
}

// TestTables forecasts every configuration's final value from the first
// third of its curve, on the real learning curves of bench/search's tables,
// and checks the error and the calibration.
func TestTables(t *testing.T) {
	tests := []struct {
		table string
		// wantCover2 is the least fraction of final values within 2 std.
		wantCover2 float64
		// wantGain is the most the mean absolute error may be, as a
		// fraction of that of forecasting the last value seen.
		wantGain float64
	}{
		{"digits-mlp", 0.85, 0.6},
		{"digits-xgb", 0.9, 0.2},
	}
	for _, tt := range tests {
		t.Run(tt.table, func(t *testing.T) {
			tab := readTable(t, tt.table)
			seen := tab.Epochs / 3
			steps := make([]float64, seen)
			for i := range steps {
				steps[i] = float64(i + 1)
			}
			var errs []float64
			var absErr, lastErr, std float64
			var cover1, cover2 int
			for i, c := range tab.Configs {
				if len(c.Curve) != tab.Epochs {
					t.Fatalf("config %d: %d values, want %d", i, len(c.Curve), tab.Epochs)
				}
				fc, err := curve.Predict(steps, c.Curve[:seen], float64(tab.Epochs))
				if err != nil {
					t.Fatalf("config %d: %v", i, err)
				}
				final := c.Curve[tab.Epochs-1]
				e := math.Abs(fc.Mean - final)
				errs = append(errs, e)
				absErr += e
				lastErr += math.Abs(c.Curve[seen-1] - final)
				std += fc.Std
				if e <= fc.Std {
					cover1++
				}
				if e <= 2*fc.Std {
					cover2++
				}
			}
			n := float64(len(tab.Configs))
			slices.Sort(errs)
			mae, lastMAE := absErr/n, lastErr/n
			t.Logf("%s: %d curves, final value (epoch %d) forecast from epochs 1-%d: "+
				"mean absolute error %.4f (median %.4f; the last value seen as the forecast: %.4f), "+
				"mean std %.4f, within 1 std %.1f%%, within 2 std %.1f%%",
				tab.Name, len(tab.Configs), tab.Epochs, seen, mae, errs[len(errs)/2], lastMAE,
				std/n, 100*float64(cover1)/n, 100*float64(cover2)/n)
			if c2 := float64(cover2) / n; c2 < tt.wantCover2 {
				t.Errorf("final value within 2 std in %.1f%% of the curves, want >= %.0f%%", 100*c2, 100*tt.wantCover2)
			}
			if mae > tt.wantGain*lastMAE {
				t.Errorf("mean absolute error %.4f, want <= %.2f × %.4f (the last value's)", mae, tt.wantGain, lastMAE)
			}
		})
	}
}
