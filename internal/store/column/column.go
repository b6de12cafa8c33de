// Package column encodes Virga's domain values into database column values
// and back, with the one set of rules both stores follow (times as Unix
// nanoseconds, hyperparameters, metric values and predictions as JSON). It
// knows no SQL dialect and opens nothing.
package column

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/virga-ml/virga"
)

// minTime and maxTime bound the times that fit in int64 Unix nanoseconds.
var (
	minTime = time.Unix(0, math.MinInt64).UTC()
	maxTime = time.Unix(0, math.MaxInt64).UTC()
)

// encoder turns values into column values, keeping the first error so a
// statement's arguments can be built in one expression and checked once.
type Encoder struct{ Err error }

// time returns t as Unix nanoseconds, or nil (NULL) for the zero time.
func (e *Encoder) Time(what string, t time.Time) any {
	if t.IsZero() {
		return nil
	}
	if t.Before(minTime) || t.After(maxTime) {
		e.fail(fmt.Errorf("%s %s: outside the storable range %d..%d", what, t, minTime.Year(), maxTime.Year()))
		return nil
	}
	return t.UnixNano()
}

// Dollars returns an amount of money (an attempt's cost) as it is stored:
// a finite number. NaN and the infinities are refused, not stored as
// something else, so a wrong price never reads back as a plausible cost.
func (e *Encoder) Dollars(what string, v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		e.fail(fmt.Errorf("%s %g: not a finite amount", what, v))
		return 0
	}
	return v
}

// hparams returns m as JSON text ("null" for a nil map).
func (e *Encoder) HParams(m map[string]any) string {
	b, err := json.Marshal(m)
	if err != nil {
		e.fail(fmt.Errorf("encoding hparams: %w", err))
	}
	return string(b)
}

// values returns metric values as a JSON object. JSON has no NaN or
// infinities, so those are written as the strings "NaN", "+Inf" and "-Inf".
func (e *Encoder) Values(m map[string]float64) string {
	if m == nil {
		return "null"
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		switch {
		case math.IsNaN(v):
			out[k] = "NaN"
		case math.IsInf(v, 1):
			out[k] = "+Inf"
		case math.IsInf(v, -1):
			out[k] = "-Inf"
		default:
			out[k] = v
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		e.fail(fmt.Errorf("encoding metric values: %w", err))
	}
	return string(b)
}

// Prediction returns p as a JSON object, or nil (NULL) when p is nil. Its
// numbers follow the rule of Values: NaN and infinities (an unbounded Std,
// say) are written as the strings "NaN", "+Inf" and "-Inf", so any
// prediction a searcher makes can be stored.
func (e *Encoder) Prediction(p *virga.Prediction) any {
	if p == nil {
		return nil
	}
	b, err := json.Marshal(prediction{Step: p.Step, Horizon: p.Horizon,
		Mean: jsonFloat(p.Mean), Std: jsonFloat(p.Std), ProbBetter: jsonFloat(p.ProbBetter)})
	if err != nil {
		e.fail(fmt.Errorf("encoding prediction: %w", err))
		return nil
	}
	return string(b)
}

// prediction is the stored form of a virga.Prediction, with the same keys as
// its JSON.
type prediction struct {
	Step       int64     `json:"step"`
	Horizon    int64     `json:"horizon"`
	Mean       jsonFloat `json:"mean"`
	Std        jsonFloat `json:"std"`
	ProbBetter jsonFloat `json:"prob_better"`
}

// jsonFloat is a float64 whose JSON is a number, or one of the strings
// "NaN", "+Inf" and "-Inf".
type jsonFloat float64

func (f jsonFloat) MarshalJSON() ([]byte, error) {
	switch v := float64(f); {
	case math.IsNaN(v):
		return []byte(`"NaN"`), nil
	case math.IsInf(v, 1):
		return []byte(`"+Inf"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-Inf"`), nil
	default:
		return json.Marshal(v)
	}
}

func (f *jsonFloat) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch v := v.(type) {
	case float64:
		*f = jsonFloat(v)
	case string:
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("number %q: %w", v, err)
		}
		*f = jsonFloat(x)
	default:
		return fmt.Errorf("unexpected %T for a number", v)
	}
	return nil
}

func (e *Encoder) fail(err error) {
	if e.Err == nil {
		e.Err = err
	}
}

// float returns p's value, or nil (NULL) when p is nil or NaN (SQLite cannot
// store NaN, so neither store does: both read it back as nil).
func Float(p *float64) any {
	if p == nil || math.IsNaN(*p) {
		return nil
	}
	return *p
}

// intPtr returns p's value as int64, or nil (NULL) when p is nil.
func IntPtr(p *int) any {
	if p == nil {
		return nil
	}
	return int64(*p)
}

// decTime is the inverse of encoder.time.
func DecTime(n *int64) time.Time {
	if n == nil {
		return time.Time{}
	}
	return time.Unix(0, *n).UTC()
}

// decInt is the inverse of intPtr.
func DecInt(n *int64) *int {
	if n == nil {
		return nil
	}
	v := int(*n)
	return &v
}

// decBytes reads back a byte column; empty and NULL both come back nil.
func DecBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// decHParams is the inverse of encoder.hparams. JSON numbers come back as float64.
func DecHParams(s string) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("decoding hparams: %w", err)
	}
	return m, nil
}

// DecPrediction is the inverse of Encoder.Prediction: NULL comes back nil.
func DecPrediction(s *string) (*virga.Prediction, error) {
	if s == nil {
		return nil, nil
	}
	var p prediction
	if err := json.Unmarshal([]byte(*s), &p); err != nil {
		return nil, fmt.Errorf("decoding prediction: %w", err)
	}
	return &virga.Prediction{Step: p.Step, Horizon: p.Horizon,
		Mean: float64(p.Mean), Std: float64(p.Std), ProbBetter: float64(p.ProbBetter)}, nil
}

// decValues is the inverse of encoder.values.
func DecValues(s string) (map[string]float64, error) {
	var raw map[string]any
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return nil, fmt.Errorf("decoding metric values: %w", err)
	}
	if raw == nil {
		return nil, nil
	}
	out := make(map[string]float64, len(raw))
	for k, v := range raw {
		switch v := v.(type) {
		case float64:
			out[k] = v
		case string:
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, fmt.Errorf("decoding metric value %q: %w", k, err)
			}
			out[k] = f
		default:
			return nil, fmt.Errorf("decoding metric value %q: unexpected %T", k, v)
		}
	}
	return out, nil
}

// Signature returns a model's signature as JSON text.
func (e *Encoder) Signature(s virga.ModelSignature) string {
	b, err := json.Marshal(s)
	if err != nil {
		e.fail(fmt.Errorf("encoding model signature: %w", err))
	}
	return string(b)
}

// DecSignature is the inverse of Encoder.Signature.
func DecSignature(s string) (virga.ModelSignature, error) {
	var sig virga.ModelSignature
	if err := json.Unmarshal([]byte(s), &sig); err != nil {
		return sig, fmt.Errorf("decoding model signature: %w", err)
	}
	return sig, nil
}
