// Package trial is the Go side of Virga's trial protocol: it reads the VIRGA_*
// variables a trial is started with, exposes the hyperparameters and the
// checkpoint directory, reports metrics to the server (retrying while the
// server restarts) and turns SIGTERM into a channel a trainer can watch.
//
// It imports only the standard library, so any Go trainer can vendor it, and
// it must never decide anything on the trainer's behalf beyond the protocol:
// it does not exit the process, write checkpoints or read other files.
//
// A Trial also works without Virga, for running a trainer by hand: Report is
// then a no-op that returns Continue, the hyperparameters are empty, and the
// checkpoint directory is one the trainer chooses (or a temporary one).
package trial

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Environment variables of the trial protocol (docs/architecture.md, "The trial protocol").
const (
	EnvExperimentID  = "VIRGA_EXPERIMENT_ID"
	EnvTrialID       = "VIRGA_TRIAL_ID"
	EnvAttemptID     = "VIRGA_ATTEMPT_ID"
	EnvHParams       = "VIRGA_HPARAMS"
	EnvCheckpointDir = "VIRGA_CHECKPOINT_DIR"
	EnvReportURL     = "VIRGA_REPORT_URL"
	EnvToken         = "VIRGA_TOKEN"
)

// StoppedExitCode is the exit code a trainer should use when it exits because
// of SIGTERM (128 + 15, what the shell reports for a process killed by it).
// Exiting 0 would tell Virga that the trial completed.
const StoppedExitCode = 143

// Errors returned by Report. Test with errors.Is.
var (
	// ErrSuperseded means the server answered 409: this attempt is no longer
	// the trial's current one (it was stopped, or restarted elsewhere). The
	// process should exit without reporting again.
	ErrSuperseded = errors.New("trial: attempt superseded")
	// ErrNonFinite means a metric was NaN or infinite, which JSON cannot carry.
	ErrNonFinite = errors.New("trial: metric is not a finite number")
)

// ReportError is a report the server refused for good (a 4xx other than 409,
// usually 400 for a malformed report). Retrying the same report cannot succeed.
type ReportError struct {
	StatusCode int    // the HTTP status
	Message    string // the server's explanation, from the response body
}

// Error implements error.
func (e *ReportError) Error() string {
	return fmt.Sprintf("trial: server refused report (%d %s): %s",
		e.StatusCode, http.StatusText(e.StatusCode), e.Message)
}

// Decision is the server's answer to a report.
type Decision int

// Decisions. The zero value is Continue.
const (
	// Continue means train on.
	Continue Decision = iota
	// Stop means the searcher has ended the trial: exit 0 soon (the process is
	// sent SIGTERM otherwise).
	Stop
)

// String returns "continue" or "stop", the words of the protocol.
func (d Decision) String() string {
	switch d {
	case Continue:
		return "continue"
	case Stop:
		return "stop"
	default:
		return fmt.Sprintf("Decision(%d)", int(d))
	}
}

// Retry is how Report retries a report that was not acknowledged (a
// connection error, a timeout, or a 5xx). The zero value means the defaults.
type Retry struct {
	// Initial is the first wait between tries (default 100 ms); each further
	// wait doubles it, up to Max.
	Initial time.Duration
	// Max caps one wait (default 2 s).
	Max time.Duration
	// Total bounds the whole report, tries and waits together (default 10
	// minutes: long enough for the server to restart). A negative Total
	// means a single try.
	Total time.Duration
	// PerTry bounds one HTTP exchange (default 5 minutes: the server saves
	// the checkpoint directory before it answers, which can take a while).
	PerTry time.Duration
}

func (r Retry) withDefaults() Retry {
	if r.Initial <= 0 {
		r.Initial = 100 * time.Millisecond
	}
	if r.Max <= 0 {
		r.Max = 2 * time.Second
	}
	if r.Total == 0 {
		r.Total = 10 * time.Minute
	}
	if r.PerTry <= 0 {
		r.PerTry = 5 * time.Minute
	}
	return r
}

// Config is everything a Trial knows. FromEnv fills it from the environment;
// tests and embedders may build one directly and call New.
type Config struct {
	ExperimentID, TrialID, AttemptID int64

	// HParams are the trial's hyperparameters (decoded JSON values:
	// float64, string, bool, nil, []any, map[string]any).
	HParams map[string]any
	// CheckpointDir is the directory Virga saves on each report and restores
	// before each attempt. Empty when running by hand.
	CheckpointDir string
	// ReportURL is where reports go. Empty means no server: Report is a
	// no-op returning Continue.
	ReportURL string
	// Token is sent as "Authorization: Bearer <Token>".
	Token string

	// HTTPClient sends reports (default: a client of its own, no overall timeout).
	HTTPClient *http.Client
	// Retry governs retries of unacknowledged reports.
	Retry Retry
}

// Trial is one attempt of a Virga trial, as seen from inside the process.
// Its methods are safe for concurrent use.
type Trial struct {
	cfg    Config
	client *http.Client

	mu           sync.Mutex
	defaultCkpt  string // set by SetDefaultCheckpointDir, used when cfg.CheckpointDir is empty
	resolvedCkpt string // the directory CheckpointDir settled on
	superseded   bool   // a 409 was seen; every later Report fails fast
}

// New returns a Trial for cfg. It does not contact the server.
func New(cfg Config) (*Trial, error) {
	if cfg.ReportURL != "" && !strings.HasPrefix(cfg.ReportURL, "http://") && !strings.HasPrefix(cfg.ReportURL, "https://") {
		return nil, fmt.Errorf("trial: report URL %q: want an http:// or https:// URL", cfg.ReportURL)
	}
	hp := make(map[string]any, len(cfg.HParams))
	for k, v := range cfg.HParams {
		hp[k] = v
	}
	cfg.HParams = hp
	cfg.Retry = cfg.Retry.withDefaults()
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{}
	}
	return &Trial{cfg: cfg, client: client}, nil
}

// FromEnv returns the Trial described by the VIRGA_* environment variables.
// Unset variables are fine (a trainer run by hand sets none); malformed ones
// are errors that name the variable.
func FromEnv() (*Trial, error) {
	cfg, err := configFromEnv(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	return New(cfg)
}

// configFromEnv reads a Config through lookup (os.LookupEnv in production).
func configFromEnv(lookup func(string) (string, bool)) (Config, error) {
	var cfg Config
	for _, id := range []struct {
		name string
		dst  *int64
	}{
		{EnvExperimentID, &cfg.ExperimentID},
		{EnvTrialID, &cfg.TrialID},
		{EnvAttemptID, &cfg.AttemptID},
	} {
		s, ok := lookup(id.name)
		if !ok || s == "" {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return Config{}, fmt.Errorf("trial: %s=%q: want an integer", id.name, s)
		}
		*id.dst = n
	}
	if s, ok := lookup(EnvHParams); ok && strings.TrimSpace(s) != "" {
		if err := json.Unmarshal([]byte(s), &cfg.HParams); err != nil {
			return Config{}, fmt.Errorf("trial: %s: want a JSON object: %w", EnvHParams, err)
		}
		if cfg.HParams == nil { // the JSON text was null
			return Config{}, fmt.Errorf("trial: %s=%q: want a JSON object", EnvHParams, s)
		}
	}
	cfg.CheckpointDir, _ = lookup(EnvCheckpointDir)
	cfg.ReportURL, _ = lookup(EnvReportURL)
	cfg.Token, _ = lookup(EnvToken)
	return cfg, nil
}

// Managed reports whether the process runs under Virga (a report URL is set).
func (t *Trial) Managed() bool { return t.cfg.ReportURL != "" }

// ExperimentID returns VIRGA_EXPERIMENT_ID, or 0 when running by hand.
func (t *Trial) ExperimentID() int64 { return t.cfg.ExperimentID }

// TrialID returns VIRGA_TRIAL_ID, or 0 when running by hand.
func (t *Trial) TrialID() int64 { return t.cfg.TrialID }

// AttemptID returns VIRGA_ATTEMPT_ID, or 0 when running by hand.
func (t *Trial) AttemptID() int64 { return t.cfg.AttemptID }

// HParams returns a copy of the hyperparameters (empty when running by hand).
// Numbers are float64, as encoding/json decodes them.
func (t *Trial) HParams() map[string]any {
	out := make(map[string]any, len(t.cfg.HParams))
	for k, v := range t.cfg.HParams {
		out[k] = v
	}
	return out
}

// Decode stores the hyperparameters in the struct v points to, with
// encoding/json's rules and field tags. Unlike the typed getters it reports
// a value of the wrong type as an error.
func (t *Trial) Decode(v any) error {
	b, err := json.Marshal(t.cfg.HParams)
	if err != nil {
		return fmt.Errorf("trial: encoding hyperparameters: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("trial: decoding hyperparameters: %w", err)
	}
	return nil
}

// Float returns hyperparameter name as a float64: a number, or a string that
// parses as one. It returns def when name is absent or is neither.
func (t *Trial) Float(name string, def float64) float64 {
	switch v := t.cfg.HParams[name].(type) {
	case float64:
		return v
	case json.Number:
		if f, err := v.Float64(); err == nil {
			return f
		}
	case string:
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			return f
		}
	}
	return def
}

// Int returns hyperparameter name as an int: an integral number (64 or 64.0),
// or a string that parses as one. It returns def when name is absent, is
// fractional, or is out of range.
func (t *Trial) Int(name string, def int) int {
	f := math.NaN()
	switch v := t.cfg.HParams[name].(type) {
	case float64:
		f = v
	case json.Number:
		if n, err := v.Int64(); err == nil {
			f = float64(n)
		} else if x, err := v.Float64(); err == nil {
			f = x
		}
	case string:
		s := strings.TrimSpace(v)
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			f = float64(n)
		} else if x, err := strconv.ParseFloat(s, 64); err == nil {
			f = x
		}
	}
	if f != math.Trunc(f) || f < math.MinInt || f > math.MaxInt || math.IsInf(f, 0) {
		return def
	}
	return int(f)
}

// String returns hyperparameter name as a string. Numbers and booleans are
// formatted the way the command line's ${name} placeholders are (shortest
// form; true/false). It returns def when name is absent or null.
func (t *Trial) String(name string, def string) string {
	switch v := t.cfg.HParams[name].(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case json.Number:
		return v.String()
	case bool:
		return strconv.FormatBool(v)
	}
	return def
}

// Bool returns hyperparameter name as a bool: a JSON boolean, or a string
// strconv.ParseBool accepts. It returns def otherwise.
func (t *Trial) Bool(name string, def bool) bool {
	switch v := t.cfg.HParams[name].(type) {
	case bool:
		return v
	case string:
		if b, err := strconv.ParseBool(strings.TrimSpace(v)); err == nil {
			return b
		}
	}
	return def
}

// SetDefaultCheckpointDir names the checkpoint directory to use when Virga
// gave none (a trainer run by hand, typically from a flag). Under Virga it
// has no effect: VIRGA_CHECKPOINT_DIR wins, since only that directory is
// saved. It must be called before the first CheckpointDir.
func (t *Trial) SetDefaultCheckpointDir(dir string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.defaultCkpt = dir
}

// CheckpointDir returns the directory to write checkpoints into and to resume
// from, creating it if needed: VIRGA_CHECKPOINT_DIR under Virga; otherwise
// the directory given to SetDefaultCheckpointDir; otherwise a new temporary
// directory (so a hand run starts fresh). The answer never changes once given.
func (t *Trial) CheckpointDir() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.resolvedCkpt != "" {
		return t.resolvedCkpt
	}
	dir := t.cfg.CheckpointDir
	if dir == "" {
		dir = t.defaultCkpt
	}
	if dir == "" {
		tmp, err := os.MkdirTemp("", "virga-trial-")
		if err != nil {
			// Rare (no writable temp dir); a fixed per-process name is the best remaining choice,
			// and the trainer's own write will surface the real problem.
			tmp = fmt.Sprintf("%s/virga-trial-%d", os.TempDir(), os.Getpid())
		}
		dir = tmp
	}
	_ = os.MkdirAll(dir, 0o755) // best effort; the trainer's write reports a failure with its path
	t.resolvedCkpt = dir
	return dir
}
