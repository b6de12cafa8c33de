// Package trace reads the real capacity traces Virga replays and prices with:
// spot availability and preemption traces (the skypilot-org/spot-traces JSON
// files), GCP spot and on-demand price histories (the change-log CSVs derived
// from Cyclenerd/google-cloud-pricing-cost-calculator), and the AWS
// describe-spot-price-history format (its JSON output, and the TSV of
// ericpauley/aws-spot-price-history).
//
// The readers are pure: they take a name (used only in errors) and a reader,
// and return values. Errors name the file, the line (and column where the
// input is JSON) and the field.
package trace

import "fmt"

// ParseError is a malformed input: File and Line locate it (Line 0 when the
// position is unknown), Field names the JSON field or CSV column.
type ParseError struct {
	File  string
	Line  int
	Col   int
	Field string
	Err   error
}

func (e *ParseError) Error() string {
	pos := e.File
	if e.Line > 0 {
		pos = fmt.Sprintf("%s:%d", pos, e.Line)
		if e.Col > 0 {
			pos = fmt.Sprintf("%s:%d", pos, e.Col)
		}
	}
	if e.Field != "" {
		return fmt.Sprintf("%s: %s: %v", pos, e.Field, e.Err)
	}
	return fmt.Sprintf("%s: %v", pos, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// lineCol converts a byte offset in data to a 1-based line and column.
func lineCol(data []byte, off int64) (line, col int) {
	if off < 0 {
		off = 0
	}
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	line, col = 1, 1
	for _, b := range data[:off] {
		if b == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return line, col
}
