// Package client is the Go client of Virga's HTTP API, used by the CLI. It
// speaks only the public API: whatever it does, a script could do with curl.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/forecast"
)

// Client calls one Virga server.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// New returns a client for the server at base (e.g. "http://127.0.0.1:7070").
func New(base, token string) *Client {
	return &Client{base: strings.TrimRight(base, "/"), token: token, http: &http.Client{}}
}

// NewWithHTTP returns a client that sends its requests through hc.
func NewWithHTTP(base, token string, hc *http.Client) *Client {
	return &Client{base: strings.TrimRight(base, "/"), token: token, http: hc}
}

// Base returns the server's base URL.
func (c *Client) Base() string { return c.base }

// Error is an error response from the server.
type Error struct {
	Status int
	Body   wire.Error
}

func (e *Error) Error() string {
	if len(e.Body.Problems) > 0 {
		return e.Body.Error
	}
	return fmt.Sprintf("%s (HTTP %d)", e.Body.Error, e.Status)
}

// Is lets errors.Is match the server's status to Virga's sentinels.
func (e *Error) Is(target error) bool {
	switch target {
	case virga.ErrNotFound:
		return e.Status == http.StatusNotFound
	case virga.ErrConflict:
		return e.Status == http.StatusConflict
	}
	return false
}

// readError reads an error response: the server's JSON error body, or else
// the body as text (a proxy's page, say), or else the status text.
func readError(resp *http.Response) *Error {
	e := &Error{Status: resp.StatusCode}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if json.Unmarshal(b, &e.Body) != nil || e.Body.Error == "" {
		e.Body = wire.Error{Error: strings.TrimSpace(string(b))}
	}
	if e.Body.Error == "" {
		e.Body.Error = http.StatusText(resp.StatusCode)
	}
	return e
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	if method != http.MethodGet && method != http.MethodHead {
		// Even without a body: a server without a token refuses a change
		// that is not JSON, which a web page could send cross-site.
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("calling the Virga server at %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return readError(resp)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// Health returns the server's health.
func (c *Client) Health(ctx context.Context) (wire.Health, error) {
	var h wire.Health
	err := c.do(ctx, http.MethodGet, "/api/v1/health", nil, &h)
	return h, err
}

// Submit submits an experiment file.
func (c *Client) Submit(ctx context.Context, file string, data []byte) (*virga.Experiment, error) {
	return c.SubmitWithEstimate(ctx, file, data, nil)
}

// SubmitWithEstimate submits an experiment file with the forecast of its run
// (JSON), kept as its "experiment.estimate" event.
func (c *Client) SubmitWithEstimate(ctx context.Context, file string, data []byte, estimate json.RawMessage) (*virga.Experiment, error) {
	var e virga.Experiment
	err := c.do(ctx, http.MethodPost, "/api/v1/experiments", wire.SubmitRequest{File: file, Spec: string(data), Estimate: estimate}, &e)
	return &e, err
}

// Experiments lists experiments, newest first.
func (c *Client) Experiments(ctx context.Context, states []string, limit int) ([]wire.ExperimentView, error) {
	q := url.Values{}
	if len(states) > 0 {
		q.Set("state", strings.Join(states, ","))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out []wire.ExperimentView
	err := c.do(ctx, http.MethodGet, "/api/v1/experiments?"+q.Encode(), nil, &out)
	return out, err
}

// Calibration lists the calibration pairs (each completed experiment's
// estimate beside what its run took) of experiments named name, or of all
// if name is "", newest first.
func (c *Client) Calibration(ctx context.Context, name string) ([]forecast.Pair, error) {
	q := url.Values{}
	if name != "" {
		q.Set("name", name)
	}
	var out []forecast.Pair
	err := c.do(ctx, http.MethodGet, "/api/v1/calibration?"+q.Encode(), nil, &out)
	return out, err
}

// Experiment returns one experiment with its summary.
func (c *Client) Experiment(ctx context.Context, id int64) (*wire.ExperimentView, error) {
	var v wire.ExperimentView
	err := c.do(ctx, http.MethodGet, "/api/v1/experiments/"+itoa(id), nil, &v)
	return &v, err
}

// Control stops, pauses or resumes an experiment.
func (c *Client) Control(ctx context.Context, id int64, op wire.Op) (*virga.Experiment, error) {
	var e virga.Experiment
	err := c.do(ctx, http.MethodPost, "/api/v1/experiments/"+itoa(id)+"/"+string(op), nil, &e)
	return &e, err
}

// Trials lists an experiment's trials (TrialSummaries adds their costs).
func (c *Client) Trials(ctx context.Context, id int64) ([]*virga.Trial, error) {
	var out []*virga.Trial
	err := c.do(ctx, http.MethodGet, "/api/v1/experiments/"+itoa(id)+"/trials", nil, &out)
	return out, err
}

// TrialSummaries lists an experiment's trials with what each has cost.
func (c *Client) TrialSummaries(ctx context.Context, id int64) ([]wire.TrialSummary, error) {
	var out []wire.TrialSummary
	err := c.do(ctx, http.MethodGet, "/api/v1/experiments/"+itoa(id)+"/trials", nil, &out)
	return out, err
}

// Best returns an experiment's best trial.
func (c *Client) Best(ctx context.Context, id int64) (*wire.BestView, error) {
	var v wire.BestView
	err := c.do(ctx, http.MethodGet, "/api/v1/experiments/"+itoa(id)+"/best", nil, &v)
	return &v, err
}

// Trial returns one trial with its attempts.
func (c *Client) Trial(ctx context.Context, id int64) (*wire.TrialView, error) {
	var v wire.TrialView
	err := c.do(ctx, http.MethodGet, "/api/v1/trials/"+itoa(id), nil, &v)
	return &v, err
}

// Metrics returns a trial's metrics.
func (c *Client) Metrics(ctx context.Context, trialID int64) ([]virga.Metric, error) {
	var out []virga.Metric
	err := c.do(ctx, http.MethodGet, "/api/v1/trials/"+itoa(trialID)+"/metrics", nil, &out)
	return out, err
}

// Checkpoints returns a trial's checkpoints.
func (c *Client) Checkpoints(ctx context.Context, trialID int64) ([]virga.Checkpoint, error) {
	var out []virga.Checkpoint
	err := c.do(ctx, http.MethodGet, "/api/v1/trials/"+itoa(trialID)+"/checkpoints", nil, &out)
	return out, err
}

// Events returns an experiment's recorded events after an event ID.
func (c *Client) Events(ctx context.Context, id, after int64) ([]virga.Event, error) {
	var out []virga.Event
	err := c.do(ctx, http.MethodGet, "/api/v1/experiments/"+itoa(id)+"/events?after="+itoa(after), nil, &out)
	return out, err
}

// Ask creates a trial of an API-driven experiment.
func (c *Client) Ask(ctx context.Context, id int64) (*wire.Asked, error) {
	var a wire.Asked
	err := c.do(ctx, http.MethodPost, "/api/v1/experiments/"+itoa(id)+"/trials", nil, &a)
	return &a, err
}

// Report reports metrics for an attempt and returns the decision.
func (c *Client) Report(ctx context.Context, attemptID int64, step int64, metrics map[string]float64) (string, error) {
	var r wire.ReportReply
	err := c.do(ctx, http.MethodPost, "/api/v1/attempts/"+itoa(attemptID)+"/report", wire.Report{Step: step, Metrics: metrics}, &r)
	return r.Decision, err
}

// Complete ends an API-driven attempt.
func (c *Client) Complete(ctx context.Context, attemptID int64, ok bool) (*virga.Trial, error) {
	var t virga.Trial
	err := c.do(ctx, http.MethodPost, "/api/v1/attempts/"+itoa(attemptID)+"/complete", wire.CompleteRequest{OK: ok}, &t)
	return &t, err
}

// Logs copies a trial's output to w; with follow it returns when the trial has ended.
func (c *Client) Logs(ctx context.Context, trialID int64, follow bool, w io.Writer) error {
	return c.logs(ctx, trialID, "follow="+strconv.FormatBool(follow), w)
}

// AttemptLog copies the output of a trial's attempt number n (1-based) to w.
func (c *Client) AttemptLog(ctx context.Context, trialID int64, n int, w io.Writer) error {
	return c.logs(ctx, trialID, "attempt="+strconv.Itoa(n), w)
}

func (c *Client) logs(ctx context.Context, trialID int64, query string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/api/v1/trials/"+itoa(trialID)+"/logs?"+query, nil)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("calling the Virga server at %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return readError(resp)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// WatchEvent is one server-sent event of a watch.
type WatchEvent struct {
	// Kind is the server's "snapshot", "update" or "end"; or Watch's own
	// "unreachable" (Data: a JSON string saying so, sent once when reconnects
	// keep failing) and "reconnected" (Data: null, when the stream is back).
	Kind string
	Data json.RawMessage
}

// unreachableAfter is how many failed connections in a row make Watch say
// the server is unreachable.
const unreachableAfter = 3

// reconnectWait is the pause between reconnects.
var reconnectWait = 500 * time.Millisecond

// Watch follows an experiment's progress, calling fn for each event until the
// experiment ends ("end"), fn returns an error, or ctx ends. If the stream
// breaks (a server restart), it reconnects after a short wait, for as long as
// ctx lasts; when unreachableAfter tries in a row fail, fn gets one
// "unreachable" event, and a "reconnected" one once the stream is back.
func (c *Client) Watch(ctx context.Context, id int64, fn func(WatchEvent) error) error {
	failures, reported := 0, false
	for {
		err := c.watchOnce(ctx, id, func(ev WatchEvent) error {
			failures = 0
			if reported {
				reported = false
				if err := fn(WatchEvent{Kind: "reconnected", Data: json.RawMessage("null")}); err != nil {
					return callbackError{err}
				}
			}
			if err := fn(ev); err != nil {
				return callbackError{err}
			}
			return nil
		})
		if errors.Is(err, errWatchEnded) {
			return nil
		}
		var cbErr callbackError
		if errors.As(err, &cbErr) {
			return cbErr.err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !isTransient(err) {
			return err
		}
		failures++
		if failures >= unreachableAfter && !reported {
			reported = true
			msg, _ := json.Marshal(fmt.Sprintf("server unreachable at %s, retrying...: %v", c.base, err))
			if err := fn(WatchEvent{Kind: "unreachable", Data: msg}); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(reconnectWait):
		}
	}
}

var errWatchEnded = errors.New("watch ended")

// callbackError is an error of Watch's fn, which ends the watch.
type callbackError struct{ err error }

func (e callbackError) Error() string { return e.err.Error() }

// isTransient says whether a watch may be tried again after err: connection
// errors and 5xx (the server may be restarting), not other refusals.
func isTransient(err error) bool {
	var apiErr *Error
	if errors.As(err, &apiErr) {
		return apiErr.Status >= 500
	}
	return true
}

func (c *Client) watchOnce(ctx context.Context, id int64, fn func(WatchEvent) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/api/v1/experiments/"+itoa(id)+"/watch", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return readError(resp)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 64<<20)
	var ev WatchEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			ev.Kind = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.Data = append(ev.Data, strings.TrimPrefix(line, "data: ")...)
		case line == "":
			if ev.Kind != "" {
				if err := fn(ev); err != nil {
					return err
				}
				if ev.Kind == "end" {
					return errWatchEnded
				}
			}
			ev = WatchEvent{}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.ErrUnexpectedEOF
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Models lists the registered models.
func (c *Client) Models(ctx context.Context) ([]wire.ModelSummary, error) {
	var out []wire.ModelSummary
	err := c.do(ctx, http.MethodGet, "/api/v1/models", nil, &out)
	return out, err
}

// Model returns a model's versions and aliases.
func (c *Client) Model(ctx context.Context, name string) (*wire.ModelView, error) {
	var out wire.ModelView
	err := c.do(ctx, http.MethodGet, "/api/v1/models/"+url.PathEscape(name), nil, &out)
	return &out, err
}

// versionPath is the path of the version ref names.
func versionPath(ref virga.ModelRef) string {
	v := "latest"
	switch {
	case ref.Version > 0:
		v = itoa(ref.Version)
	case ref.Alias != "":
		v = url.PathEscape(ref.Alias)
	}
	return "/api/v1/models/" + url.PathEscape(ref.Name) + "/versions/" + v
}

// ModelVersion returns the version ref names.
func (c *Client) ModelVersion(ctx context.Context, ref virga.ModelRef) (*wire.ModelVersionView, error) {
	var out wire.ModelVersionView
	err := c.do(ctx, http.MethodGet, versionPath(ref), nil, &out)
	return &out, err
}

// RegisterModel registers the next version of name from a trial or an
// experiment's best trial.
func (c *Client) RegisterModel(ctx context.Context, name string, req wire.RegisterModelRequest) (*virga.ModelVersion, error) {
	var out virga.ModelVersion
	err := c.do(ctx, http.MethodPost, "/api/v1/models/"+url.PathEscape(name)+"/versions", req, &out)
	return &out, err
}

// RegisterModelArchive registers the next version of name from a tar
// archive of a model directory.
func (c *Client) RegisterModelArchive(ctx context.Context, name string, archive io.Reader, description string) (*virga.ModelVersion, error) {
	path := "/api/v1/models/" + url.PathEscape(name) + "/versions"
	if description != "" {
		path += "?" + url.Values{"description": {description}}.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, archive)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out virga.ModelVersion
	return &out, json.NewDecoder(resp.Body).Decode(&out)
}

// SetModelAlias points alias of name at version.
func (c *Client) SetModelAlias(ctx context.Context, name, alias string, version int64) (*virga.ModelAlias, error) {
	var out virga.ModelAlias
	err := c.do(ctx, http.MethodPut, "/api/v1/models/"+url.PathEscape(name)+"/aliases/"+url.PathEscape(alias), wire.AliasRequest{Version: version}, &out)
	return &out, err
}

// DeleteModelAlias deletes an alias and returns what it pointed at.
func (c *Client) DeleteModelAlias(ctx context.Context, name, alias string) (*virga.ModelAlias, error) {
	var out virga.ModelAlias
	err := c.do(ctx, http.MethodDelete, "/api/v1/models/"+url.PathEscape(name)+"/aliases/"+url.PathEscape(alias), nil, &out)
	return &out, err
}

// DeleteModelVersion deletes a version (and its files, unless shared).
func (c *Client) DeleteModelVersion(ctx context.Context, name string, version int64) (*virga.ModelVersion, error) {
	var out virga.ModelVersion
	err := c.do(ctx, http.MethodDelete, "/api/v1/models/"+url.PathEscape(name)+"/versions/"+itoa(version), nil, &out)
	return &out, err
}

// DownloadModel writes the files of the version ref names to w as a tar
// archive of its model directory.
func (c *Client) DownloadModel(ctx context.Context, ref virga.ModelRef, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+versionPath(ref)+"/files", nil)
	if err != nil {
		return err
	}
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("downloading %s: %w", ref, err)
	}
	return nil
}

// send sends req with the token and returns the response, or the server's
// error for a status >= 300.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("calling the Virga server at %s: %w", c.base, err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, readError(resp)
	}
	return resp, nil
}
