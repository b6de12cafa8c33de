package main

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
)

func TestFormatPrediction(t *testing.T) {
	tests := []struct {
		name string
		p    *virga.Prediction
		want string
	}{
		{"none", nil, "-"},
		{"std to two digits, mean to match", &virga.Prediction{Mean: 0.1234, Std: 0.0104, ProbBetter: 0.04}, "0.123 ± 0.010 (p=0.04)"},
		{"large values have no decimals", &virga.Prediction{Mean: 1234.4, Std: 12.3, ProbBetter: 0.5}, "1234 ± 12 (p=0.50)"},
		{"negative mean", &virga.Prediction{Mean: -2.345, Std: 0.5, ProbBetter: 1}, "-2.35 ± 0.50 (p=1.00)"},
		{"tiny values in exponent form", &virga.Prediction{Mean: 1.5e-9, Std: 2e-10}, "1.5e-09 ± 2e-10 (p=0.00)"},
		{"zero std", &virga.Prediction{Mean: 0.5, ProbBetter: 0.25}, "0.5 ± 0 (p=0.25)"},
		{"unbounded std", &virga.Prediction{Mean: 0.5, Std: math.Inf(1)}, "0.5 ± +Inf (p=0.00)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := fmtPrediction(tc.p); got != tc.want {
				t.Errorf("fmtPrediction(%+v) = %q, want %q", tc.p, got, tc.want)
			}
		})
	}
}

func TestFormatTrialTable(t *testing.T) {
	best := 0.25
	plain := func(id int64) *virga.Trial {
		return &virga.Trial{ID: id, State: virga.TrialRunning, HParams: map[string]any{"lr": 0.1}, Step: 20,
			Latest: &best, Best: &best, BestStep: 12}
	}
	withPrediction := func(t *virga.Trial) *virga.Trial {
		t.Prediction = &virga.Prediction{Step: 20, Horizon: 100, Mean: 0.123, Std: 0.01, ProbBetter: 0.04}
		return t
	}
	withParent := func(t *virga.Trial) *virga.Trial {
		t.Parent, t.ParentCheckpoint, t.ParentStep = 3, "ck-12", 12
		return t
	}
	row := func(id string, extra ...string) []string {
		return append([]string{id, "RUNNING", "lr=0.1", "20", "0.25", "0.25 @12"}, extra...)
	}
	tests := []struct {
		name   string
		trials []*virga.Trial
		costs  map[int64]wire.Spend
		// wantHeader and wantRows are the table trialTable returns.
		wantHeader []string
		wantRows   [][]string
	}{
		{
			name:       "neither: no extra columns",
			trials:     []*virga.Trial{plain(3), plain(4)},
			wantHeader: trialHeader,
			wantRows:   [][]string{row("3"), row("4")},
		},
		{
			name:       "a prediction",
			trials:     []*virga.Trial{plain(3), withPrediction(plain(4))},
			wantHeader: append(append([]string(nil), trialHeader...), "PREDICTED"),
			wantRows:   [][]string{row("3", "-"), row("4", "0.123 ± 0.010 (p=0.04)")},
		},
		{
			name:       "a parent",
			trials:     []*virga.Trial{plain(3), withParent(plain(4))},
			wantHeader: append(append([]string(nil), trialHeader...), "PARENT"),
			wantRows:   [][]string{row("3", "-"), row("4", "#3@12")},
		},
		{
			name:       "both",
			trials:     []*virga.Trial{withPrediction(plain(3)), withParent(plain(4))},
			wantHeader: append(append([]string(nil), trialHeader...), "PREDICTED", "PARENT"),
			wantRows:   [][]string{row("3", "0.123 ± 0.010 (p=0.04)", "-"), row("4", "-", "#3@12")},
		},
		{
			name:       "costs: a trial not in them cost nothing",
			trials:     []*virga.Trial{plain(3), plain(4), plain(5)},
			costs:      map[int64]wire.Spend{3: {Cost: 1.5, LostCost: 0.25}, 4: {Cost: 0.004}},
			wantHeader: append(append([]string(nil), trialHeader...), "COST"),
			wantRows:   [][]string{row("3", "$1.50 ($0.25 lost)"), row("4", "$0.0040"), row("5", "$0.00")},
		},
		{
			name:       "costs before the other columns",
			trials:     []*virga.Trial{withPrediction(plain(3)), withParent(plain(4))},
			costs:      map[int64]wire.Spend{3: {Cost: 2}, 4: {Cost: 3}},
			wantHeader: append(append([]string(nil), trialHeader...), "COST", "PREDICTED", "PARENT"),
			wantRows:   [][]string{row("3", "$2.00", "0.123 ± 0.010 (p=0.04)", "-"), row("4", "$3.00", "-", "#3@12")},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			header, rows := trialTable(tc.trials, tc.costs, 0)
			if d := cmp.Diff(tc.wantHeader, header); d != "" {
				t.Errorf("header (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantRows, rows); d != "" {
				t.Errorf("rows (-want +got):\n%s", d)
			}
		})
	}
	// trialTable must not write into trialHeader, which others share.
	if d := cmp.Diff([]string{"TRIAL", "STATE", "HYPERPARAMETERS", "STEP", "LATEST", "BEST"}, trialHeader); d != "" {
		t.Errorf("trialHeader changed (-want +got):\n%s", d)
	}
}

func TestFormatCost(t *testing.T) {
	tests := []struct {
		usd  float64
		want string
	}{
		{0, "$0.00"},
		{12.345, "$12.35"},
		{0.01, "$0.01"},
		{0.0042, "$0.0042"},
		{0.00004, "<$0.0001"},
		{1234567.891, "$1234567.89"},
	}
	for _, tc := range tests {
		if got := fmtCost(tc.usd); got != tc.want {
			t.Errorf("fmtCost(%v) = %q, want %q", tc.usd, got, tc.want)
		}
	}
	pools := []wire.PoolSpend{
		{Pool: "", Attempts: 1, Spend: wire.Spend{Cost: 0.5}},
		{Pool: "spot", Attempts: 3, Spend: wire.Spend{Cost: 1.5, LostCost: 0.25}},
	}
	if got, want := fmtPools(pools), "default $0.50 (1 attempt), spot $1.50 (3 attempts, $0.25 lost)"; got != want {
		t.Errorf("fmtPools = %q, want %q", got, want)
	}
}
