package trial

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"
)

// reportBody is the JSON a report sends.
type reportBody struct {
	Step    int64              `json:"step"`
	Metrics map[string]float64 `json:"metrics"`
}

// decisionBody is the JSON a 200 reply carries.
type decisionBody struct {
	Decision string `json:"decision"`
}

// errRetryable marks a failure after which the report may be sent again.
type retryableError struct{ err error }

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

// Report sends the metrics of step to the server and returns its decision.
// The server saves the checkpoint directory before it answers, so write the
// checkpoint first, then report. A report for a step already reported
// replaces the earlier one, which makes retries safe.
//
// Without a server (a hand run) Report only checks its arguments and returns
// Continue.
//
// Connection errors, timeouts and 5xx replies are retried with exponential
// backoff (Config.Retry; up to 10 minutes by default) until ctx ends. A 409
// returns ErrSuperseded, and so does every later call: the process should
// exit. Any other refusal returns a *ReportError with the server's message.
// Metrics that are NaN or infinite return an error wrapping ErrNonFinite.
func (t *Trial) Report(ctx context.Context, step int64, metrics map[string]float64) (Decision, error) {
	if step < 0 {
		return Continue, fmt.Errorf("trial: report step %d: want a step >= 0", step)
	}
	for name, v := range metrics {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return Continue, fmt.Errorf("trial: report step %d: metric %q is %v: %w", step, name, v, ErrNonFinite)
		}
	}
	if !t.Managed() {
		return Continue, nil
	}
	t.mu.Lock()
	superseded := t.superseded
	t.mu.Unlock()
	if superseded {
		return Continue, ErrSuperseded
	}
	if metrics == nil {
		metrics = map[string]float64{}
	}
	body, err := json.Marshal(reportBody{Step: step, Metrics: metrics})
	if err != nil {
		return Continue, fmt.Errorf("trial: encoding report: %w", err)
	}

	r := t.cfg.Retry
	start := time.Now()
	wait := r.Initial
	for try := 1; ; try++ {
		d, err := t.send(ctx, body)
		if err == nil {
			return d, nil
		}
		var re *retryableError
		if !errors.As(err, &re) {
			if errors.Is(err, ErrSuperseded) {
				t.mu.Lock()
				t.superseded = true
				t.mu.Unlock()
			}
			return Continue, err
		}
		if ctx.Err() != nil {
			return Continue, fmt.Errorf("trial: report step %d: %w (last error: %v)", step, ctx.Err(), re.err)
		}
		elapsed := time.Since(start)
		if r.Total < 0 || elapsed+wait > r.Total {
			return Continue, fmt.Errorf("trial: report step %d not acknowledged after %d tries in %s: %w",
				step, try, elapsed.Round(time.Millisecond), re.err)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return Continue, fmt.Errorf("trial: report step %d: %w (last error: %v)", step, ctx.Err(), re.err)
		case <-timer.C:
		}
		wait = min(2*wait, r.Max)
	}
}

// send makes one HTTP exchange. Failures worth retrying come back as *retryableError.
func (t *Trial) send(ctx context.Context, body []byte) (Decision, error) {
	tryCtx, cancel := context.WithTimeout(ctx, t.cfg.Retry.PerTry)
	defer cancel()
	req, err := http.NewRequestWithContext(tryCtx, http.MethodPost, t.cfg.ReportURL, bytes.NewReader(body))
	if err != nil {
		return Continue, fmt.Errorf("trial: building report request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if t.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+t.cfg.Token)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return Continue, &retryableError{fmt.Errorf("sending report: %w", err)}
	}
	defer resp.Body.Close()
	msg, readErr := io.ReadAll(io.LimitReader(resp.Body, 64<<10))

	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		if readErr != nil {
			// The server may have committed the report; sending it again replaces it.
			return Continue, &retryableError{fmt.Errorf("reading reply: %w", readErr)}
		}
		var db decisionBody
		if err := json.Unmarshal(msg, &db); err != nil {
			return Continue, fmt.Errorf("trial: decoding reply %q: %w", truncate(msg), err)
		}
		switch strings.ToLower(db.Decision) {
		case "continue":
			return Continue, nil
		case "stop":
			return Stop, nil
		default:
			return Continue, fmt.Errorf("trial: reply has decision %q: want \"continue\" or \"stop\"", db.Decision)
		}
	case resp.StatusCode == http.StatusConflict:
		return Continue, ErrSuperseded
	case resp.StatusCode >= 500, resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusRequestTimeout:
		return Continue, &retryableError{fmt.Errorf("server answered %s: %s", resp.Status, serverMessage(msg))}
	default:
		return Continue, &ReportError{StatusCode: resp.StatusCode, Message: serverMessage(msg)}
	}
}

// serverMessage extracts a human message from an error body: the "error" or
// "message" field of a JSON object, or else the text itself.
func serverMessage(b []byte) string {
	var obj map[string]any
	if json.Unmarshal(b, &obj) == nil {
		for _, k := range []string{"error", "message", "detail"} {
			if s, ok := obj[k].(string); ok && s != "" {
				return s
			}
		}
	}
	s := strings.TrimSpace(truncate(b))
	if s == "" {
		return "(empty body)"
	}
	return s
}

// truncate returns at most the first 1 KiB of b as text.
func truncate(b []byte) string {
	const limit = 1 << 10
	if len(b) > limit {
		return string(b[:limit]) + "..."
	}
	return string(b)
}
