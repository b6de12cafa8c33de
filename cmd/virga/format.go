package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/virga-ml/virga"
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
