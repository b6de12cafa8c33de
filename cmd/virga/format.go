package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/forecast"
	"github.com/virga-ml/virga/internal/spec"
)

// table writes aligned columns.
func table(w io.Writer, header []string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	_ = tw.Flush()
}

// fmtHParams prints hyperparameters as k=v in name order.
func fmtHParams(hp map[string]any, width int) string {
	keys := make([]string, 0, len(hp))
	for k := range hp {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + fmtValue(hp[k])
	}
	s := strings.Join(parts, " ")
	if width > 0 && len(s) > width {
		s = s[:width-1] + "…"
	}
	return s
}

func fmtValue(v any) string {
	if f, ok := v.(float64); ok {
		return strconv.FormatFloat(f, 'g', 4, 64)
	}
	return spec.FormatValue(v)
}

func fmtFloat(p *float64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatFloat(*p, 'g', 5, 64)
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func fmtDuration(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func trialRow(t *virga.Trial, hpWidth int) []string {
	best := fmtFloat(t.Best)
	if t.Best != nil {
		best += " @" + strconv.FormatInt(t.BestStep, 10)
	}
	state := string(t.State)
	if t.Restarts > 0 {
		state += fmt.Sprintf(" (%d restarts)", t.Restarts)
	}
	return []string{strconv.FormatInt(t.ID, 10), state, fmtHParams(t.HParams, hpWidth), strconv.FormatInt(t.Step, 10), fmtFloat(t.Latest), best}
}

var trialHeader = []string{"TRIAL", "STATE", "HYPERPARAMETERS", "STEP", "LATEST", "BEST"}

// trialTable returns the header and rows of a table of trials: trialHeader's
// columns, then COST when costs are given (what each trial has cost, by
// trial ID), PREDICTED when any trial has a prediction and PARENT when any
// has a parent, so a search that does neither prints no empty columns.
func trialTable(trials []*virga.Trial, costs map[int64]wire.Spend, hpWidth int) ([]string, [][]string) {
	var predicted, parent bool
	for _, t := range trials {
		predicted = predicted || t.Prediction != nil
		parent = parent || t.Parent != 0
	}
	header := append([]string(nil), trialHeader...)
	if costs != nil {
		header = append(header, "COST")
	}
	if predicted {
		header = append(header, "PREDICTED")
	}
	if parent {
		header = append(header, "PARENT")
	}
	rows := make([][]string, 0, len(trials))
	for _, t := range trials {
		row := trialRow(t, hpWidth)
		if costs != nil {
			row = append(row, fmtSpend(costs[t.ID]))
		}
		if predicted {
			row = append(row, fmtPrediction(t.Prediction))
		}
		if parent {
			row = append(row, fmtParent(t))
		}
		rows = append(rows, row)
	}
	return header, rows
}

// fmtPrediction prints a forecast as "mean ± std (p=prob_better)", e.g.
// "0.123 ± 0.010 (p=0.04)": the std to two significant digits and the mean
// to the same decimal place; "-" when there is none.
func fmtPrediction(p *virga.Prediction) string {
	if p == nil {
		return "-"
	}
	var mean, std string
	switch {
	case math.IsNaN(p.Std) || math.IsInf(p.Std, 0) || math.IsNaN(p.Mean) || math.IsInf(p.Mean, 0) || p.Std <= 0:
		mean, std = fmtFloat(&p.Mean), fmtFloat(&p.Std)
	default:
		// Decimals that show two significant digits of the std.
		d := 1 - int(math.Floor(math.Log10(p.Std)))
		if d > 6 || math.Abs(p.Mean) >= 1e9 {
			mean, std = strconv.FormatFloat(p.Mean, 'g', 4, 64), strconv.FormatFloat(p.Std, 'g', 2, 64)
			break
		}
		d = max(d, 0)
		mean, std = strconv.FormatFloat(p.Mean, 'f', d, 64), strconv.FormatFloat(p.Std, 'f', d, 64)
	}
	return fmt.Sprintf("%s ± %s (p=%.2f)", mean, std, p.ProbBetter)
}

// fmtParent prints a trial's parent as "#ID@STEP", the parent's trial ID (as
// in the TRIAL column, and as every command takes it) and the step of the
// checkpoint the trial continued from; "-" for a trial with no parent.
func fmtParent(t *virga.Trial) string {
	if t.Parent == 0 {
		return "-"
	}
	return fmt.Sprintf("#%d@%d", t.Parent, t.ParentStep)
}

// fmtCost prints dollars: to the cent, or to four decimals below a cent
// (a short trial on a share of a cheap node), e.g. "$12.34", "$0.0042".
func fmtCost(usd float64) string {
	switch {
	case usd == 0 || math.Abs(usd) >= 0.01:
		return fmt.Sprintf("$%.2f", usd)
	case math.Abs(usd) < 0.00005:
		return "<$0.0001"
	}
	return fmt.Sprintf("$%.4f", usd)
}

// fmtSpend prints what something cost and the part preemptions threw away,
// if any: "$1.50" or "$1.50 ($0.50 lost)".
func fmtSpend(s wire.Spend) string {
	if s.LostCost == 0 {
		return fmtCost(s.Cost)
	}
	return fmtCost(s.Cost) + " (" + fmtCost(s.LostCost) + " lost)"
}

// fmtPools prints what an experiment spent on each pool, e.g. "spot $1.50
// (2 attempts, $0.50 lost), ondemand $4.00 (1 attempt)"; the backend's
// default pool is "default".
func fmtPools(pools []wire.PoolSpend) string {
	parts := make([]string, len(pools))
	for i, p := range pools {
		name := p.Pool
		if name == "" {
			name = "default"
		}
		n := fmt.Sprintf("%d attempts", p.Attempts)
		if p.Attempts == 1 {
			n = "1 attempt"
		}
		if p.LostCost != 0 {
			n += ", " + fmtCost(p.LostCost) + " lost"
		}
		parts[i] = fmt.Sprintf("%s %s (%s)", name, fmtCost(p.Cost), n)
	}
	return strings.Join(parts, ", ")
}

func countsLine(counts map[virga.TrialState]int) string {
	order := []virga.TrialState{virga.TrialQueued, virga.TrialRunning, virga.TrialPaused, virga.TrialCompleted, virga.TrialStopped, virga.TrialFailed}
	var parts []string
	for _, s := range order {
		if n := counts[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, strings.ToLower(string(s))))
		}
	}
	if len(parts) == 0 {
		return "no trials yet"
	}
	return strings.Join(parts, ", ")
}

// fmtForecast is what is left of a run, in one line: the share done, the
// time and money to the end (median and 10-90% range), and the chances of
// the deadline and the budget.
func fmtForecast(f *forecast.Forecast) string {
	s := fmt.Sprintf("%.0f%% done; %s to the end (%s-%s)", 100*f.Done,
		fmtDuration(roundWall(f.Left)), fmtDuration(roundWall(f.LeftP10)), fmtDuration(roundWall(f.LeftP90)))
	if f.MoreP90 >= 1e-4 { // nothing priced: no money to tell
		s += fmt.Sprintf(", %s more (%s-%s)", fmtCost(f.More), fmtCost(f.MoreP10), fmtCost(f.MoreP90))
	}
	if f.PDeadline != nil {
		s += fmt.Sprintf("; P(deadline) %.0f%%", 100**f.PDeadline)
	}
	if f.PBudget != nil {
		s += fmt.Sprintf("; P(budget) %.0f%%", 100**f.PBudget)
	}
	if f.FromBefore > 0 {
		s += fmt.Sprintf(" (%.0f%% from the forecast before the run)", 100*f.FromBefore)
	}
	return s
}
