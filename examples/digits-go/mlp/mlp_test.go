package mlp

import (
	"slices"
	"strings"
	"testing"
)

func TestSplitIsFixedAndDocumented(t *testing.T) {
	val, train := SplitIndices(1797)
	if len(val) != 359 || len(train) != 1438 {
		t.Fatalf("split sizes = %d/%d, want 359 validation, 1438 training", len(val), len(train))
	}
	// examples/data/SOURCE.md documents these, and digits-torch computes the same.
	if want := []int{1324, 623, 1117, 298}; !slices.Equal(val[:4], want) {
		t.Errorf("first validation rows = %v, want %v", val[:4], want)
	}
	seen := make(map[int]bool)
	for _, i := range append(append([]int(nil), val...), train...) {
		if seen[i] || i < 0 || i >= 1797 {
			t.Fatalf("row %d appears twice or is out of range", i)
		}
		seen[i] = true
	}
	ds, err := LoadDefault()
	if err != nil {
		t.Fatalf("loading data: %v", err)
	}
	if len(ds.ValX) != 359 || len(ds.TrainX) != 1438 || len(ds.TrainX[0]) != NumInputs {
		t.Errorf("dataset shapes: %d val, %d train, %d features", len(ds.ValX), len(ds.TrainX), len(ds.TrainX[0]))
	}
}

func TestParseCSVErrors(t *testing.T) {
	row := strings.Repeat("0,", NumInputs)
	for _, tc := range []struct{ name, csv, want string }{
		{"short row", "1,2,3\n", "line 1: 3 columns"},
		{"bad pixel", "17," + strings.Repeat("0,", NumInputs-1) + "3\n", "line 1, column 1"},
		{"bad label", row + "10\n", "column 65"},
		{"too few rows", row + "1\n", "too few"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := parseCSV(strings.NewReader(tc.csv)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
