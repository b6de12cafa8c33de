package trace

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Availability is one zone's spot availability over time: Count[i] is the
// number of spot instances available (or still running, in the preemption
// traces) during tick i, which starts at Start + i*Tick. The 1-node traces
// hold 0 or 1; the 4- and 16-node traces count nodes.
//
// A tick is "up" when Count > 0. With that polarity the 1-node
// aws-02-15-2023 traces are up 17% to 90% of the time, as the issue and the
// Can't Be Late paper describe.
type Availability struct {
	// Zone and Instance come from the file name <zone>_<instance>.json
	// (e.g. "us-east-1a", "v100_1"); Set from its directory
	// (e.g. "aws-02-15-2023"). All three are empty for ParseAvailability.
	Zone, Instance, Set string
	// Tick is the file's own metadata.gap_seconds: it wins over the upstream
	// README where they disagree.
	Tick time.Duration
	// Start is the date in the directory name (UTC midnight), or zero.
	Start time.Time
	Count []int
}

// maxGapSeconds bounds metadata.gap_seconds (one day), so that Tick and the
// trace's span fit in a time.Duration.
const maxGapSeconds = 86400

// maxTicks bounds a trace's length; the real ones have at most ~20,000.
const maxTicks = 10_000_000

type availabilityFile struct {
	Metadata *struct {
		GapSeconds *float64 `json:"gap_seconds"`
	} `json:"metadata"`
	Data *[]int `json:"data"`
}

// ParseAvailability parses one trace file; name is used only in errors.
func ParseAvailability(name string, r io.Reader) (*Availability, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, &ParseError{File: name, Err: err}
	}
	var f availabilityFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, jsonError(name, data, err)
	}
	if f.Metadata == nil || f.Metadata.GapSeconds == nil {
		return nil, &ParseError{File: name, Field: "metadata.gap_seconds", Err: errors.New("missing")}
	}
	g := *f.Metadata.GapSeconds
	if !(g > 0 && g <= maxGapSeconds) || g != math.Trunc(g*1000)/1000 {
		return nil, &ParseError{File: name, Field: "metadata.gap_seconds",
			Err: fmt.Errorf("%v is not a positive number of seconds (at most %d, millisecond precision)", g, maxGapSeconds)}
	}
	if f.Data == nil {
		return nil, &ParseError{File: name, Field: "data", Err: errors.New("missing")}
	}
	if len(*f.Data) > maxTicks {
		return nil, &ParseError{File: name, Field: "data", Err: fmt.Errorf("%d ticks, more than %d", len(*f.Data), maxTicks)}
	}
	for i, n := range *f.Data {
		if n < 0 {
			line, col := locateIndex(data, i)
			return nil, &ParseError{File: name, Line: line, Col: col, Field: fmt.Sprintf("data[%d]", i),
				Err: fmt.Errorf("negative count %d", n)}
		}
	}
	return &Availability{
		Tick:  time.Duration(math.Round(g*1000)) * time.Millisecond,
		Count: *f.Data,
	}, nil
}

// ReadAvailability reads a trace file and takes Zone and Instance from its
// name and Set and Start from its directory.
func ReadAvailability(path string) (*Availability, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	a, err := ParseAvailability(path, fh)
	if err != nil {
		return nil, err
	}
	base := strings.TrimSuffix(filepath.Base(path), ".json")
	if zone, inst, ok := strings.Cut(base, "_"); ok {
		a.Zone, a.Instance = zone, inst
	} else {
		a.Zone = base
	}
	a.Set = filepath.Base(filepath.Dir(path))
	a.Start = setStart(a.Set)
	return a, nil
}

// setStart parses the date of a set directory such as "aws-02-15-2023"
// (month-day-year); zero when the name carries none.
func setStart(set string) time.Time {
	_, date, ok := strings.Cut(set, "-")
	if !ok {
		return time.Time{}
	}
	t, err := time.Parse("01-02-2006", date)
	if err != nil {
		return time.Time{}
	}
	return t
}

// Len is the trace's length in ticks; Duration its span.
func (a *Availability) Len() int { return len(a.Count) }

// Duration is the span of the trace.
func (a *Availability) Duration() time.Duration { return time.Duration(len(a.Count)) * a.Tick }

// Up reports whether at least one spot instance is available at tick i.
func (a *Availability) Up(i int) bool { return a.Count[i] > 0 }

// UpAt reports whether spot is available at time d after Start; false outside
// the trace.
func (a *Availability) UpAt(d time.Duration) bool {
	if d < 0 || a.Tick <= 0 {
		return false
	}
	i := d / a.Tick
	return i < time.Duration(len(a.Count)) && a.Count[i] > 0
}

// Fraction is the fraction of ticks that are up; 0 for an empty trace.
func (a *Availability) Fraction() float64 {
	if len(a.Count) == 0 {
		return 0
	}
	up := 0
	for _, n := range a.Count {
		if n > 0 {
			up++
		}
	}
	return float64(up) / float64(len(a.Count))
}

// Preemptions counts up->down transitions.
func (a *Availability) Preemptions() int {
	p := 0
	for i := 1; i < len(a.Count); i++ {
		if a.Count[i-1] > 0 && a.Count[i] == 0 {
			p++
		}
	}
	return p
}

// UpRuns returns the lengths, in ticks, of the maximal runs of up ticks, in
// order. A run cut by the end of the trace is included.
func (a *Availability) UpRuns() []int {
	var runs []int
	n := 0
	for _, c := range a.Count {
		if c > 0 {
			n++
			continue
		}
		if n > 0 {
			runs = append(runs, n)
			n = 0
		}
	}
	if n > 0 {
		runs = append(runs, n)
	}
	return runs
}

// MeanUpRun is the mean length of the up runs (UpRuns), 0 when there is none.
func (a *Availability) MeanUpRun() time.Duration {
	runs := a.UpRuns()
	if len(runs) == 0 {
		return 0
	}
	total := 0
	for _, r := range runs {
		total += r
	}
	return time.Duration(float64(total) / float64(len(runs)) * float64(a.Tick))
}

// jsonError turns an encoding/json error into a ParseError with a position.
func jsonError(name string, data []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		line, col := lineCol(data, syn.Offset-1) // Offset is just after the bad byte
		return &ParseError{File: name, Line: line, Col: col, Err: err}
	case errors.As(err, &typ):
		line, col := lineCol(data, typ.Offset)
		field := typ.Field
		if field == "" {
			field = "(top level)"
		}
		return &ParseError{File: name, Line: line, Col: col, Field: field,
			Err: fmt.Errorf("cannot use JSON %s as %s", typ.Value, typ.Type)}
	}
	return &ParseError{File: name, Err: err}
}

// locateIndex finds the position of element i of the top-level "data" array,
// for errors found after decoding; 0, 0 if it cannot.
func locateIndex(data []byte, i int) (line, col int) {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	depth := 0
	inData := false
	idx := 0
	for {
		off := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return 0, 0
		}
		switch t := tok.(type) {
		case json.Delim:
			if t == '[' || t == '{' {
				depth++
				if t == '[' && depth == 2 && inData {
					continue
				}
			} else {
				depth--
			}
		case string:
			if depth == 1 && t == "data" {
				inData = true
				continue
			}
		default:
			if inData && depth == 2 {
				if idx == i {
					// off is where the previous token ended; skip the separator.
					l, c := lineCol(data, off)
					for int(off) < len(data) && strings.ContainsRune(", \t\r\n", rune(data[off])) {
						off++
						l, c = lineCol(data, off)
					}
					return l, c
				}
				idx++
			}
		}
		if depth == 1 && inData && idx > 0 {
			inData = false
		}
	}
}
