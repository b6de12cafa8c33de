package virga

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"unicode"
	"unicode/utf8"
)

// Limits on one metric report, the same for reports posted to the API and
// for VIRGA_METRIC lines. A name is at most as long as MLflow's metric keys
// (250); the count bounds what one row of a trial's metrics may hold.
const (
	// MaxMetricName is the longest metric name, in bytes.
	MaxMetricName = 250
	// MaxMetricsPerReport is the most values one report may carry.
	MaxMetricsPerReport = 256
	// MaxMetricLine is the longest VIRGA_METRIC line of a trial's output
	// that is reported, in bytes, the prefix included and the newline not.
	// A longer one stays in the output, followed by a note that says so.
	MaxMetricLine = 64 << 10
)

// CheckMetricName returns why name cannot name a metric, or nil: it must
// be non-empty UTF-8 of at most MaxMetricName bytes, without control
// characters (names are shown in tables and logs, one per cell and line).
func CheckMetricName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("names must not be empty")
	case len(name) > MaxMetricName:
		return fmt.Errorf("name %q... is %d bytes long; at most %d are allowed", clipName(name), len(name), MaxMetricName)
	case !utf8.ValidString(name):
		return fmt.Errorf("name %q is not valid UTF-8", name)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("name %q holds the control character %U; use letters, digits, punctuation and spaces", name, r)
		}
	}
	return nil
}

// CheckMetrics checks the values of one report: at most
// MaxMetricsPerReport of them, each named as CheckMetricName wants and each
// a finite number. The error names the field ("metrics" or
// "metrics.NAME") and the limit; of several bad names it names the first in
// byte order, so that the message does not depend on map order.
func CheckMetrics(values map[string]float64) error {
	if len(values) > MaxMetricsPerReport {
		return fmt.Errorf("metrics: %d values; a report may carry at most %d", len(values), MaxMetricsPerReport)
	}
	names := make([]string, 0, len(values))
	for k := range values {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if err := CheckMetricName(k); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		if v := values[k]; math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("metrics.%s: must be a finite number", k)
		}
	}
	return nil
}

// clipName returns the start of a long name, cut on a rune boundary.
func clipName(s string) string {
	const n = 32
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

// CheckMetricLine checks the payload of a VIRGA_METRIC line (what follows
// the prefix): {"step": N, "metrics": {"name": value, ...}} with a step >= 0
// and metrics as CheckMetrics wants. Both the local backend's shim and the
// agent check a line so before they post it as a report.
func CheckMetricLine(payload []byte) error {
	var m struct {
		Step    *int64             `json:"step"`
		Metrics map[string]float64 `json:"metrics"`
	}
	const want = `want {"step": N, "metrics": {"name": value, ...}}`
	if err := json.Unmarshal(payload, &m); err != nil {
		return fmt.Errorf("malformed: %w; %s", err, want)
	}
	switch {
	case m.Step == nil || m.Metrics == nil:
		return errors.New("malformed: " + want)
	case *m.Step < 0:
		return fmt.Errorf("step: must be >= 0 (got %d)", *m.Step)
	}
	return CheckMetrics(m.Metrics)
}
