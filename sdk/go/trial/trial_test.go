package trial

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fastRetry keeps retry tests quick.
var fastRetry = Retry{Initial: time.Millisecond, Max: 4 * time.Millisecond, Total: 5 * time.Second, PerTry: 2 * time.Second}

// recordedRequest is what the fake server saw of one request.
type recordedRequest struct {
	Method, Path, Auth, ContentType string
	Body                            map[string]any
}

// fakeServer answers reports with the replies it is given, in order (the
// last one repeats), and records every request.
type fakeServer struct {
	t       testing.TB
	mu      sync.Mutex
	replies []reply
	got     []recordedRequest
}

type reply struct {
	status int
	body   string
}

func newFakeServer(t testing.TB, replies ...reply) (*fakeServer, *httptest.Server) {
	fs := &fakeServer{t: t, replies: replies}
	srv := httptest.NewServer(fs)
	t.Cleanup(srv.Close)
	return fs, srv
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		f.t.Errorf("reading request body: %v", err)
	}
	var body map[string]any
	if err := json.Unmarshal(b, &body); err != nil {
		f.t.Errorf("request body %q is not a JSON object: %v", b, err)
	}
	f.mu.Lock()
	f.got = append(f.got, recordedRequest{r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Content-Type"), body})
	rep := f.replies[min(len(f.got)-1, len(f.replies)-1)]
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rep.status)
	io.WriteString(w, rep.body)
}

func (f *fakeServer) requests() []recordedRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recordedRequest(nil), f.got...)
}

func newManaged(t *testing.T, url string) *Trial {
	t.Helper()
	tr, err := New(Config{ReportURL: url + "/api/v1/attempts/7/report", Token: "tok-7", AttemptID: 7, Retry: fastRetry})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return tr
}

func TestReportRequestShape(t *testing.T) {
	fs, srv := newFakeServer(t, reply{200, `{"decision":"continue"}`})
	tr := newManaged(t, srv.URL)

	d, err := tr.Report(context.Background(), 3, map[string]float64{"val_loss": 0.25, "val_accuracy": 0.9})
	if err != nil {
		t.Fatalf("Report: %v", err)
	}
	if d != Continue {
		t.Errorf("decision = %v, want continue", d)
	}
	reqs := fs.requests()
	if len(reqs) != 1 {
		t.Fatalf("server saw %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Method != http.MethodPost || r.Path != "/api/v1/attempts/7/report" {
		t.Errorf("request = %s %s, want POST /api/v1/attempts/7/report", r.Method, r.Path)
	}
	if r.Auth != "Bearer tok-7" {
		t.Errorf("Authorization = %q, want %q", r.Auth, "Bearer tok-7")
	}
	if r.ContentType != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", r.ContentType)
	}
	wantBody := `{"metrics":{"val_accuracy":0.9,"val_loss":0.25},"step":3}`
	gotBody, _ := json.Marshal(r.Body)
	if string(gotBody) != wantBody {
		t.Errorf("body = %s, want %s", gotBody, wantBody)
	}
}

func TestReportDecisions(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want Decision
		// wantErr is a substring of the error, or "" for none.
		wantErr string
	}{
		{name: "continue", body: `{"decision":"continue"}`, want: Continue},
		{name: "stop", body: `{"decision":"stop"}`, want: Stop},
		{name: "unknown decision", body: `{"decision":"explode"}`, wantErr: `decision "explode"`},
		{name: "not json", body: `ok`, wantErr: "decoding reply"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, srv := newFakeServer(t, reply{200, tc.body})
			d, err := newManaged(t, srv.URL).Report(context.Background(), 1, map[string]float64{"loss": 1})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || d != tc.want {
				t.Fatalf("Report = %v, %v; want %v, nil", d, err, tc.want)
			}
		})
	}
}

func TestReportRetriesOn5xxThenSucceeds(t *testing.T) {
	fs, srv := newFakeServer(t,
		reply{503, `{"error":"restarting"}`},
		reply{502, `bad gateway`},
		reply{500, ``},
		reply{200, `{"decision":"stop"}`})
	tr := newManaged(t, srv.URL)

	d, err := tr.Report(context.Background(), 5, map[string]float64{"loss": 0.5})
	if err != nil || d != Stop {
		t.Fatalf("Report = %v, %v; want stop, nil", d, err)
	}
	reqs := fs.requests()
	if len(reqs) != 4 {
		t.Fatalf("server saw %d requests, want 4 (three failures, one success)", len(reqs))
	}
	for i, r := range reqs {
		if r.Body["step"] != float64(5) {
			t.Errorf("request %d has step %v, want the same report (step 5) each time", i, r.Body["step"])
		}
	}
}

func TestReportRetriesConnectionErrorsUntilServerComesUp(t *testing.T) {
	// Reserve an address, close it (connections are refused), and start the server there later.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	fs := &fakeServer{t: t, replies: []reply{{200, `{"decision":"continue"}`}}}
	srv := httptest.NewUnstartedServer(fs)
	t.Cleanup(srv.Close)
	go func() {
		time.Sleep(50 * time.Millisecond)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("relistening on %s: %v", addr, err)
			return
		}
		srv.Listener = l
		srv.Start()
	}()

	tr := newManaged(t, "http://"+addr)
	d, err := tr.Report(context.Background(), 1, map[string]float64{"loss": 1})
	if err != nil || d != Continue {
		t.Fatalf("Report = %v, %v; want continue, nil", d, err)
	}
	if n := len(fs.requests()); n != 1 {
		t.Errorf("server saw %d requests, want 1", n)
	}
}

func TestReportGivesUpAfterTotal(t *testing.T) {
	fs, srv := newFakeServer(t, reply{503, `{"error":"still restarting"}`})
	tr, err := New(Config{ReportURL: srv.URL, Retry: Retry{Initial: time.Millisecond, Max: 2 * time.Millisecond, Total: 40 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = tr.Report(context.Background(), 1, nil)
	if err == nil || !strings.Contains(err.Error(), "not acknowledged") || !strings.Contains(err.Error(), "still restarting") {
		t.Fatalf("err = %v, want a 'not acknowledged' error carrying the server's message", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("gave up after %s, want about 40ms", el)
	}
	if n := len(fs.requests()); n < 3 {
		t.Errorf("server saw %d requests, want several tries", n)
	}
}

func TestReportStopsRetryingWhenContextEnds(t *testing.T) {
	_, srv := newFakeServer(t, reply{503, ``})
	tr := newManaged(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err := tr.Report(ctx, 1, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
}

func TestReportSuperseded(t *testing.T) {
	fs, srv := newFakeServer(t, reply{409, `{"error":"attempt 7 is not current"}`})
	tr := newManaged(t, srv.URL)
	if _, err := tr.Report(context.Background(), 2, map[string]float64{"loss": 1}); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("err = %v, want ErrSuperseded", err)
	}
	// Later reports fail fast without contacting the server.
	if _, err := tr.Report(context.Background(), 3, map[string]float64{"loss": 1}); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("second report: err = %v, want ErrSuperseded", err)
	}
	if n := len(fs.requests()); n != 1 {
		t.Errorf("server saw %d requests, want 1 (no retry after 409)", n)
	}
}

func TestReportBadRequest(t *testing.T) {
	fs, srv := newFakeServer(t, reply{400, `{"error":"metric \"x\": want a number"}`})
	_, err := newManaged(t, srv.URL).Report(context.Background(), 1, map[string]float64{"x": 1})
	var re *ReportError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v (%T), want *ReportError", err, err)
	}
	if re.StatusCode != 400 || re.Message != `metric "x": want a number` {
		t.Errorf("ReportError = %+v, want 400 with the server's message", re)
	}
	if n := len(fs.requests()); n != 1 {
		t.Errorf("server saw %d requests, want 1 (a 400 is not retried)", n)
	}
}

func TestReportRejectsNonFiniteMetrics(t *testing.T) {
	fs, srv := newFakeServer(t, reply{200, `{"decision":"continue"}`})
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		_, err := newManaged(t, srv.URL).Report(context.Background(), 1, map[string]float64{"val_loss": v})
		if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), "val_loss") {
			t.Errorf("metric %v: err = %v, want ErrNonFinite naming val_loss", v, err)
		}
	}
	if n := len(fs.requests()); n != 0 {
		t.Errorf("server saw %d requests, want none", n)
	}
}

func TestUnmanagedTrial(t *testing.T) {
	tr, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Managed() {
		t.Error("Managed() = true without a report URL")
	}
	d, err := tr.Report(context.Background(), 1, map[string]float64{"loss": 1})
	if err != nil || d != Continue {
		t.Errorf("Report = %v, %v; want continue, nil", d, err)
	}
	if _, err := tr.Report(context.Background(), -1, nil); err == nil {
		t.Error("Report(step -1) succeeded, want an error even without a server")
	}
	if len(tr.HParams()) != 0 {
		t.Errorf("HParams() = %v, want empty", tr.HParams())
	}
	if got := tr.Float("lr", 0.1); got != 0.1 {
		t.Errorf("Float default = %v, want 0.1", got)
	}

	dir := tr.CheckpointDir()
	t.Cleanup(func() { os.RemoveAll(dir) })
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("CheckpointDir() = %q, not a directory: %v", dir, err)
	}
	if again := tr.CheckpointDir(); again != dir {
		t.Errorf("CheckpointDir changed from %q to %q", dir, again)
	}
}

func TestCheckpointDirPrecedence(t *testing.T) {
	base := t.TempDir()
	envDir := filepath.Join(base, "from-env")
	flagDir := filepath.Join(base, "from-flag")

	managed, _ := New(Config{CheckpointDir: envDir, ReportURL: "http://127.0.0.1:1/r"})
	managed.SetDefaultCheckpointDir(flagDir)
	if got := managed.CheckpointDir(); got != envDir {
		t.Errorf("with VIRGA_CHECKPOINT_DIR: CheckpointDir() = %q, want %q", got, envDir)
	}

	byHand, _ := New(Config{})
	byHand.SetDefaultCheckpointDir(flagDir)
	if got := byHand.CheckpointDir(); got != flagDir {
		t.Errorf("by hand: CheckpointDir() = %q, want %q", got, flagDir)
	}
	if _, err := os.Stat(flagDir); err != nil {
		t.Errorf("CheckpointDir did not create %q: %v", flagDir, err)
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv(EnvExperimentID, "3")
	t.Setenv(EnvTrialID, "14")
	t.Setenv(EnvAttemptID, "15")
	t.Setenv(EnvHParams, `{"lr":0.05,"hidden":64,"l2":"1e-4","act":"relu","momentum":true,"frac":2.5}`)
	t.Setenv(EnvCheckpointDir, t.TempDir())
	t.Setenv(EnvReportURL, "http://127.0.0.1:9/api/v1/attempts/15/report")
	t.Setenv(EnvToken, "secret")

	tr, err := FromEnv()
	if err != nil {
		t.Fatalf("FromEnv: %v", err)
	}
	if !tr.Managed() || tr.ExperimentID() != 3 || tr.TrialID() != 14 || tr.AttemptID() != 15 {
		t.Errorf("ids = %d/%d/%d managed=%v, want 3/14/15 managed", tr.ExperimentID(), tr.TrialID(), tr.AttemptID(), tr.Managed())
	}
	if tr.CheckpointDir() != os.Getenv(EnvCheckpointDir) {
		t.Errorf("CheckpointDir() = %q, want %q", tr.CheckpointDir(), os.Getenv(EnvCheckpointDir))
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"Float(lr)", tr.Float("lr", 1), 0.05},
		{"Float(l2) from string", tr.Float("l2", 1), 1e-4},
		{"Float(missing)", tr.Float("missing", 7), 7.0},
		{"Float(act) wrong type", tr.Float("act", 7), 7.0},
		{"Int(hidden)", tr.Int("hidden", 1), 64},
		{"Int(frac) fractional", tr.Int("frac", 9), 9},
		{"Int(missing)", tr.Int("missing", 9), 9},
		{"String(act)", tr.String("act", ""), "relu"},
		{"String(lr) formats numbers", tr.String("lr", ""), "0.05"},
		{"String(momentum) formats bools", tr.String("momentum", ""), "true"},
		{"String(missing)", tr.String("missing", "d"), "d"},
		{"Bool(momentum)", tr.Bool("momentum", false), true},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v (%T), want %v (%T)", c.name, c.got, c.got, c.want, c.want)
		}
	}

	hp := tr.HParams()
	hp["lr"] = 99.0
	if tr.Float("lr", 0) != 0.05 {
		t.Error("modifying the map HParams returned changed the trial's hyperparameters")
	}

	var s struct {
		LR     float64 `json:"lr"`
		Hidden int     `json:"hidden"`
	}
	if err := tr.Decode(&s); err != nil || s.LR != 0.05 || s.Hidden != 64 {
		t.Errorf("Decode = %+v, %v; want {0.05 64}", s, err)
	}
	var bad struct {
		Act int `json:"act"`
	}
	if err := tr.Decode(&bad); err == nil {
		t.Error("Decode of a string into an int succeeded, want an error")
	}
}

func TestFromEnvErrors(t *testing.T) {
	for _, tc := range []struct {
		name, key, value, wantErr string
	}{
		{"bad id", EnvTrialID, "fourteen", "VIRGA_TRIAL_ID"},
		{"hparams not json", EnvHParams, "{lr: 1}", "VIRGA_HPARAMS"},
		{"hparams not an object", EnvHParams, "[1,2]", "VIRGA_HPARAMS"},
		{"hparams null", EnvHParams, "null", "VIRGA_HPARAMS"},
		{"report url not http", EnvReportURL, "localhost:8080/report", "http://"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.key, tc.value)
			_, err := FromEnv()
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("FromEnv err = %v, want one mentioning %q", err, tc.wantErr)
			}
		})
	}
}

func TestFromEnvUnset(t *testing.T) {
	for _, k := range []string{EnvExperimentID, EnvTrialID, EnvAttemptID, EnvHParams, EnvCheckpointDir, EnvReportURL, EnvToken} {
		t.Setenv(k, "") // restored after the test
		os.Unsetenv(k)
	}
	tr, err := FromEnv()
	if err != nil {
		t.Fatalf("FromEnv with nothing set: %v", err)
	}
	if tr.Managed() || len(tr.HParams()) != 0 || tr.TrialID() != 0 {
		t.Errorf("trial = managed %v, hparams %v, trial %d; want a hand-run trial", tr.Managed(), tr.HParams(), tr.TrialID())
	}
}

func TestStoppingClosesOnSIGTERM(t *testing.T) {
	tr, _ := New(Config{})
	ch := tr.Stopping()
	if tr.StopRequested() {
		// The state is process-wide: an earlier run of this test (go test -count=2) already
		// stopped the process, and a second SIGTERM would now kill it.
		t.Skip("the process already received its stop signal")
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("Stopping() not closed 5s after SIGTERM")
	}
	if !tr.StopRequested() {
		t.Error("StopRequested() = false after SIGTERM")
	}
	other, _ := New(Config{})
	if !other.StopRequested() {
		t.Error("a second Trial does not see the process-wide stop")
	}
}

func TestDecisionString(t *testing.T) {
	if Continue.String() != "continue" || Stop.String() != "stop" || Decision(9).String() != "Decision(9)" {
		t.Errorf("String() = %q, %q, %q", Continue, Stop, Decision(9))
	}
}
