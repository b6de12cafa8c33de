package virga

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestCheckMetrics(t *testing.T) {
	many := map[string]float64{}
	for i := range MaxMetricsPerReport {
		many[fmt.Sprintf("m%d", i)] = 1
	}
	tooMany := map[string]float64{"one more": 1}
	for k, v := range many {
		tooMany[k] = v
	}
	for _, c := range []struct {
		name    string
		values  map[string]float64
		wantErr string // "" for none
	}{
		{"none", nil, ""},
		{"usual names", map[string]float64{"loss": 1, "val/acc": 0.5, "train.loss step": 2, "损失": 3}, ""},
		{"the most metrics", many, ""},
		{"one too many", tooMany, fmt.Sprintf("metrics: %d values; a report may carry at most %d", MaxMetricsPerReport+1, MaxMetricsPerReport)},
		{"the longest name", map[string]float64{strings.Repeat("n", MaxMetricName): 1}, ""},
		{"a name too long", map[string]float64{strings.Repeat("n", MaxMetricName+1): 1}, fmt.Sprintf("is %d bytes long; at most %d are allowed", MaxMetricName+1, MaxMetricName)},
		{"empty name", map[string]float64{"": 1}, "metrics: names must not be empty"},
		{"newline", map[string]float64{"a\nb": 1}, `metrics: name "a\nb" holds the control character U+000A`},
		{"invalid UTF-8", map[string]float64{"a\xffb": 1}, "not valid UTF-8"},
		{"NaN", map[string]float64{"loss": math.NaN()}, "metrics.loss: must be a finite number"},
		{"the first bad name in byte order", map[string]float64{"z\t": 1, "a\n": 1}, `"a\n"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := CheckMetrics(c.values)
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Errorf("CheckMetrics = %v, want %q", err, c.wantErr)
			}
		})
	}
}

func TestCheckMetricLine(t *testing.T) {
	for _, c := range []struct{ line, wantErr string }{
		{`{"step": 0, "metrics": {"loss": 1}}`, ""},
		{`{"step": 1}`, "malformed"},
		{`{"step": -1, "metrics": {}}`, "step: must be >= 0"},
		{`{"step": 1, "metrics": {"loss": 1}} x`, "malformed: invalid character"},
		{`{"step": 1, "metrics": {"` + strings.Repeat("n", MaxMetricName+1) + `": 1}}`, "bytes long"},
	} {
		err := CheckMetricLine([]byte(c.line))
		if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("CheckMetricLine(%.60q) = %v, want %q", c.line, err, c.wantErr)
		}
	}
}
