// Package loadgen generates inference load: arrival times from a Poisson
// process or from real request traces (Azure's LLM inference trace,
// Alibaba's GenAI serving trace), scaled to a target rate, and an open-loop
// client that sends them to an Open Inference Protocol endpoint and tells
// each request's outcome against its latency objective.
package loadgen

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Arrivals are request arrival times as offsets from the start of a run,
// in nondecreasing order.
type Arrivals []time.Duration

// Rate returns the mean arrivals per second over the span from the start
// to the last arrival (0 with fewer than two).
func (a Arrivals) Rate() float64 {
	if len(a) < 2 || a[len(a)-1] <= 0 {
		return 0
	}
	return float64(len(a)) / a[len(a)-1].Seconds()
}

// Scale returns the arrivals with time stretched or compressed so their
// mean rate is perSecond: the pattern (bursts and lulls) is kept, only the
// clock runs faster or slower.
func (a Arrivals) Scale(perSecond float64) Arrivals {
	r := a.Rate()
	out := make(Arrivals, len(a))
	if r == 0 || perSecond <= 0 {
		copy(out, a)
		return out
	}
	f := r / perSecond
	for i, t := range a {
		out[i] = time.Duration(float64(t) * f)
	}
	return out
}

// Poisson returns n arrivals of a Poisson process of perSecond mean rate
// (exponential gaps), drawn from rng.
func Poisson(rng *rand.Rand, perSecond float64, n int) Arrivals {
	out := make(Arrivals, n)
	t := 0.0
	for i := range out {
		t += rng.ExpFloat64() / perSecond
		out[i] = time.Duration(t * float64(time.Second))
	}
	return out
}

// ParseError is a trace line that could not be read.
type ParseError struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Field, e.Msg)
}

// azureLayout is the Azure LLM inference trace's TIMESTAMP format.
const azureLayout = "2006-01-02 15:04:05.999999999"

// ReadAzure reads an Azure LLM inference trace (AzurePublicDataset,
// AzureLLMInferenceTrace_{code,conv}.csv: TIMESTAMP, ContextTokens,
// GeneratedTokens) and returns its arrivals from the first request, in
// time order. name is the file's name for errors.
func ReadAzure(r io.Reader, name string) (Arrivals, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return nil, &ParseError{File: name, Line: 1, Field: "header", Msg: fmt.Sprintf("reading: %v", err)}
	}
	col := -1
	for i, h := range header {
		if strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")) == "TIMESTAMP" {
			col = i
		}
	}
	if col < 0 {
		return nil, &ParseError{File: name, Line: 1, Field: "header", Msg: fmt.Sprintf("no TIMESTAMP column in %q", strings.Join(header, ","))}
	}
	var times []time.Time
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, recordError(name, err)
		}
		line, _ := cr.FieldPos(0)
		if col >= len(rec) {
			return nil, &ParseError{File: name, Line: line, Field: "TIMESTAMP", Msg: "missing"}
		}
		t, err := time.Parse(azureLayout, strings.TrimSpace(rec[col]))
		if err != nil {
			return nil, &ParseError{File: name, Line: line, Field: "TIMESTAMP", Msg: fmt.Sprintf("%q is not a time like 2023-11-16 18:17:03.9799600", rec[col])}
		}
		times = append(times, t)
	}
	return fromTimes(times), nil
}

// recordError is a CSV record that could not be read, at its line.
func recordError(name string, err error) error {
	var ce *csv.ParseError
	if errors.As(err, &ce) {
		return &ParseError{File: name, Line: ce.Line, Field: "record", Msg: ce.Err.Error()}
	}
	return &ParseError{File: name, Field: "record", Msg: err.Error()}
}

// fromTimes returns times as sorted offsets from the earliest.
func fromTimes(times []time.Time) Arrivals {
	sort.SliceStable(times, func(i, j int) bool { return times[i].Before(times[j]) })
	out := make(Arrivals, len(times))
	for i, t := range times {
		out[i] = t.Sub(times[0])
	}
	return out
}

// LoRARequest is one request of Alibaba's GenAI serving trace
// (cluster-trace-v2026-GenAI/lora_request_trace.csv).
type LoRARequest struct {
	At time.Time
	// Model is checkpoint_model_version_id, e.g. "M0002"; empty for the
	// few requests recorded while still pending.
	Model string
	// Exec is the request's execution time (exec_time_seconds).
	Exec time.Duration
	OK   bool // predict_status is SUCCEED
}

const alibabaLayout = "2006-01-02 15:04:05"

// ReadAlibabaLoRA reads Alibaba's lora_request_trace.csv, which needs the
// columns gmt_create, predict_status, exec_time_seconds and
// checkpoint_model_version_id; name is the file's name for errors.
func ReadAlibabaLoRA(r io.Reader, name string) ([]LoRARequest, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return nil, &ParseError{File: name, Line: 1, Field: "header", Msg: fmt.Sprintf("reading: %v", err)}
	}
	cols := map[string]int{"gmt_create": -1, "predict_status": -1, "exec_time_seconds": -1, "checkpoint_model_version_id": -1}
	for i, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		if _, ok := cols[h]; ok {
			cols[h] = i
		}
	}
	for _, c := range []string{"gmt_create", "predict_status", "exec_time_seconds", "checkpoint_model_version_id"} {
		if cols[c] < 0 {
			return nil, &ParseError{File: name, Line: 1, Field: "header", Msg: fmt.Sprintf("no %s column", c)}
		}
	}
	field := func(rec []string, c string) string {
		if i := cols[c]; i < len(rec) {
			return strings.TrimSpace(rec[i])
		}
		return ""
	}
	var out []LoRARequest
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, recordError(name, err)
		}
		line, _ := cr.FieldPos(0)
		at, err := time.Parse(alibabaLayout, field(rec, "gmt_create"))
		if err != nil {
			return nil, &ParseError{File: name, Line: line, Field: "gmt_create", Msg: fmt.Sprintf("%q is not a time like 2024-11-15 16:57:50", field(rec, "gmt_create"))}
		}
		req := LoRARequest{At: at, Model: field(rec, "checkpoint_model_version_id"), OK: field(rec, "predict_status") == "SUCCEED"}
		if s := field(rec, "exec_time_seconds"); s != "" {
			sec, err := strconv.ParseFloat(s, 64)
			if err != nil || sec < 0 || sec > 1e9 {
				return nil, &ParseError{File: name, Line: line, Field: "exec_time_seconds", Msg: fmt.Sprintf("%q is not a number of seconds >= 0", s)}
			}
			req.Exec = time.Duration(sec * float64(time.Second))
		}
		out = append(out, req)
	}
	return out, nil
}

// Popularity is one model's share of a trace's requests.
type Popularity struct {
	Model    string
	Requests int
	Share    float64
}

// Popularities returns each model's share of the requests of reqs that
// name a model, most requested first (ties by name).
func Popularities(reqs []LoRARequest) []Popularity {
	counts := map[string]int{}
	total := 0
	for _, r := range reqs {
		if r.Model != "" {
			counts[r.Model]++
			total++
		}
	}
	out := make([]Popularity, 0, len(counts))
	for m, n := range counts {
		out = append(out, Popularity{Model: m, Requests: n, Share: float64(n) / float64(total)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Requests != out[j].Requests {
			return out[i].Requests > out[j].Requests
		}
		return out[i].Model < out[j].Model
	})
	return out
}

// LoRAArrivals returns the trace's arrivals from its first request, in
// time order, keeping only the requests for which keep returns true (all
// of them if keep is nil).
func LoRAArrivals(reqs []LoRARequest, keep func(LoRARequest) bool) Arrivals {
	var times []time.Time
	for _, r := range reqs {
		if keep == nil || keep(r) {
			times = append(times, r.At)
		}
	}
	return fromTimes(times)
}
