package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/control"
)

func TestAuth(t *testing.T) {
	e := newEnv(t, true)
	code, body := e.do("GET", "/api/v1/health", "", nil)
	if code != http.StatusUnauthorized || !strings.Contains(string(body), "admin-token") {
		t.Errorf("no token: HTTP %d %s; want 401 naming the admin-token file", code, body)
	}
	if code, _ := e.do("GET", "/api/v1/experiments", "wrong", nil); code != http.StatusUnauthorized {
		t.Errorf("wrong token: HTTP %d, want 401", code)
	}
	if code, body := e.do("GET", "/metrics", "", nil); code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: HTTP %d %s; want 401", code, body)
	}
	e.want(http.StatusOK, "GET", "/api/v1/experiments", e.admin, nil, nil)
	if body := e.want(http.StatusOK, "GET", "/metrics", e.admin, nil, nil); !strings.Contains(string(body), "virga_control_loop_up 1") {
		t.Errorf("/metrics with the admin token: no virga_control_loop_up 1 in\n%s", body)
	}
	exp := e.submit(apiDriven)
	var a1, a2 wire.Asked
	e.want(http.StatusCreated, "POST", fmt.Sprintf("/api/v1/experiments/%d/trials", exp.ID), e.admin, nil, &a1)
	e.want(http.StatusCreated, "POST", fmt.Sprintf("/api/v1/experiments/%d/trials", exp.ID), e.admin, nil, &a2)
	if a1.Token != control.TrialToken(testSecret, a1.Trial.ID) {
		t.Errorf("asked token %q is not the trial's token", a1.Token)
	}
	rep := wire.Report{Step: 1, Metrics: map[string]float64{"loss": 1}}
	e.want(http.StatusOK, "POST", fmt.Sprintf("/api/v1/attempts/%d/report", a1.AttemptID), a1.Token, rep, nil)

	refused := []struct{ method, path string }{
		{"POST", fmt.Sprintf("/api/v1/attempts/%d/report", a2.AttemptID)},   // another trial's attempt
		{"POST", fmt.Sprintf("/api/v1/attempts/%d/complete", a2.AttemptID)}, // another trial's attempt
		{"GET", fmt.Sprintf("/api/v1/trials/%d", a1.Trial.ID)},
		{"GET", fmt.Sprintf("/api/v1/trials/%d/metrics", a1.Trial.ID)},
		{"GET", "/api/v1/experiments"},
		{"GET", "/api/openapi.json"},
		{"GET", "/metrics"},
		{"POST", fmt.Sprintf("/api/v1/experiments/%d/stop", exp.ID)},
		{"POST", fmt.Sprintf("/api/v1/experiments/%d/trials", exp.ID)},
	}
	for _, r := range refused {
		code, body := e.do(r.method, r.path, a1.Token, rep)
		// Another trial's attempt: authenticated but not permitted (403); anything else: 401.
		if code != http.StatusUnauthorized && !(code == http.StatusForbidden && strings.HasPrefix(r.path, "/api/v1/attempts/")) {
			t.Errorf("trial token on %s %s: HTTP %d %s, want 401 (403 for another trial's attempt)", r.method, r.path, code, body)
		}
	}
	var tr virga.Trial
	e.want(http.StatusOK, "POST", fmt.Sprintf("/api/v1/attempts/%d/complete", a1.AttemptID), a1.Token, wire.CompleteRequest{OK: true}, &tr)
	if tr.State != virga.TrialCompleted {
		t.Errorf("completed trial is %s", tr.State)
	}
	// Its attempt is over: the token gets a 409, telling the trial to exit.
	e.want(http.StatusConflict, "POST", fmt.Sprintf("/api/v1/attempts/%d/report", a1.AttemptID), a1.Token, rep, nil)
	// The experiment is still running (trial 2 is live): the stop is refused for the trial token.
	if got := e.exp(exp.ID).State; got != virga.ExperimentActive {
		t.Errorf("experiment %s, want ACTIVE", got)
	}
}

// TestForgedTrialTokenBeforeAttemptExists sends a report with a forged trial
// token to the next attempt's ID before that attempt exists, and its body
// only once the attempt is live. Authorisation must hold when the report is
// taken, not only when the headers arrive.
func TestForgedTrialTokenBeforeAttemptExists(t *testing.T) {
	e := newEnv(t, true)
	exp := e.submit(apiDriven)
	var a1 wire.Asked
	e.want(http.StatusCreated, "POST", fmt.Sprintf("/api/v1/experiments/%d/trials", exp.ID), e.admin, nil, &a1)
	next := a1.AttemptID + 1
	body := `{"step": 7, "metrics": {"loss": -1000}}`
	conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /api/v1/attempts/%d/report HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer vtforged\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", next, len(body))
	time.Sleep(200 * time.Millisecond) // the server authorises on the headers
	var a2 wire.Asked
	e.want(http.StatusCreated, "POST", fmt.Sprintf("/api/v1/experiments/%d/trials", exp.ID), e.admin, nil, &a2)
	if a2.AttemptID != next {
		t.Skipf("attempt IDs are not sequential (%d after %d)", a2.AttemptID, a1.AttemptID)
	}
	io.WriteString(conn, body)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("forged token report to attempt %d: HTTP %d %s, want 401", next, resp.StatusCode, b)
	}
	var tv wire.TrialView
	e.want(http.StatusOK, "GET", fmt.Sprintf("/api/v1/trials/%d", a2.Trial.ID), e.admin, nil, &tv)
	if tv.Best != nil {
		t.Errorf("a forged report was recorded: trial %d best %v at step %d", a2.Trial.ID, *tv.Best, tv.BestStep)
	}
}

func (e *env) exp(id int64) *wire.ExperimentView {
	e.t.Helper()
	var v wire.ExperimentView
	e.want(http.StatusOK, "GET", fmt.Sprintf("/api/v1/experiments/%d", id), e.admin, nil, &v)
	return &v
}

var routeRE = regexp.MustCompile(`m\.HandleFunc\("([A-Z]+) ([^"]+)"`)

func TestOpenAPIMatchesRoutes(t *testing.T) {
	src, err := os.ReadFile("api.go")
	if err != nil {
		t.Fatal(err)
	}
	var registered []string
	for _, m := range routeRE.FindAllStringSubmatch(string(src), -1) {
		if m[2] == "/api/openapi.json" {
			continue // the document does not describe itself
		}
		registered = append(registered, strings.ToLower(m[1])+" "+m[2])
	}
	if len(registered) < 10 {
		t.Fatalf("found only %d routes in api.go: %v", len(registered), registered)
	}
	var listed []string
	for _, r := range apiRoutes {
		listed = append(listed, r.method+" "+r.path)
	}
	slices.Sort(registered)
	slices.Sort(listed)
	for _, r := range registered {
		if !slices.Contains(listed, r) {
			t.Errorf("route %s is served but not in apiRoutes", r)
		}
	}
	for _, r := range listed {
		if !slices.Contains(registered, r) {
			t.Errorf("apiRoutes lists %s, which is not served", r)
		}
	}

	e := newEnv(t, false)
	var doc struct {
		OpenAPI    string                               `json:"openapi"`
		Paths      map[string]map[string]map[string]any `json:"paths"`
		Components struct {
			Schemas map[string]any `json:"schemas"`
		} `json:"components"`
	}
	raw := e.want(http.StatusOK, "GET", "/api/openapi.json", "", nil, &doc)
	if !strings.HasPrefix(doc.OpenAPI, "3.0.") {
		t.Errorf("openapi %q, want 3.0.x", doc.OpenAPI)
	}
	var inDoc []string
	for p, ops := range doc.Paths {
		for m := range ops {
			inDoc = append(inDoc, m+" "+p)
		}
	}
	slices.Sort(inDoc)
	if !slices.Equal(inDoc, registered) {
		t.Errorf("document paths\n%v\nwant the served routes\n%v", inDoc, registered)
	}
	for _, ref := range regexp.MustCompile(`"\$ref": "#/components/schemas/([^"]+)"`).FindAllStringSubmatch(string(raw), -1) {
		if _, ok := doc.Components.Schemas[ref[1]]; !ok {
			t.Errorf("$ref to missing schema %s", ref[1])
		}
	}
}

func TestAskTell(t *testing.T) {
	e := newEnv(t, false)
	exp := e.submit(apiDriven)
	seen := map[int64]bool{}
	for i := range 2 {
		var a wire.Asked
		e.want(http.StatusCreated, "POST", fmt.Sprintf("/api/v1/experiments/%d/trials", exp.ID), "", nil, &a)
		if a.Trial == nil || a.AttemptID == 0 || a.Token == "" || seen[a.Trial.ID] {
			t.Fatalf("ask %d: %+v", i, a)
		}
		seen[a.Trial.ID] = true
		if a.Trial.State != virga.TrialRunning || a.Trial.HParams["x"] == nil {
			t.Errorf("asked trial %+v, want RUNNING with x", a.Trial)
		}
		var rr wire.ReportReply
		for step := range 3 {
			e.want(http.StatusOK, "POST", fmt.Sprintf("/api/v1/attempts/%d/report", a.AttemptID), a.Token,
				wire.Report{Step: int64(step), Metrics: map[string]float64{"loss": float64(10*i + 3 - step)}}, &rr)
			if rr.Decision != "continue" {
				t.Errorf("decision %q, want continue", rr.Decision)
			}
		}
		var tr virga.Trial
		e.want(http.StatusOK, "POST", fmt.Sprintf("/api/v1/attempts/%d/complete", a.AttemptID), a.Token, wire.CompleteRequest{OK: true}, &tr)
		if tr.State != virga.TrialCompleted || tr.Step != 2 || tr.Best == nil || *tr.Best != float64(10*i+1) {
			t.Errorf("completed trial %+v", tr)
		}
		var ms []virga.Metric
		e.want(http.StatusOK, "GET", fmt.Sprintf("/api/v1/trials/%d/metrics", a.Trial.ID), "", nil, &ms)
		if len(ms) != 3 {
			t.Errorf("%d metrics, want 3", len(ms))
		}
	}
	code, body := e.do("POST", fmt.Sprintf("/api/v1/experiments/%d/trials", exp.ID), "", nil)
	if code != http.StatusConflict {
		t.Errorf("ask past max_trials: HTTP %d %s, want 409", code, body)
	}
	e.eventually("the experiment to complete", func() bool { return e.exp(exp.ID).State == virga.ExperimentCompleted })
	var best wire.BestView
	e.want(http.StatusOK, "GET", fmt.Sprintf("/api/v1/experiments/%d/best", exp.ID), "", nil, &best)
	if best.Trial == nil || *best.Trial.Best != 1 || best.Metrics == nil || best.Metrics.Step != 2 {
		t.Errorf("best %+v", best)
	}
}

func TestErrors(t *testing.T) {
	e := newEnv(t, false)
	exp := e.submit(apiDriven)
	var a wire.Asked
	e.want(http.StatusCreated, "POST", fmt.Sprintf("/api/v1/experiments/%d/trials", exp.ID), "", nil, &a)
	report := fmt.Sprintf("/api/v1/attempts/%d/report", a.AttemptID)
	cases := []struct {
		name         string
		method, path string
		body         any
		wantCode     int
		wantInBody   string
	}{
		{"bad JSON", "POST", report, `{"step": 1,`, 400, "request body"},
		{"unknown field", "POST", report, `{"step": 1, "metrics": {}, "loss": 3}`, 400, `unknown field "loss"`},
		{"data after the report", "POST", report, `{"step": 1, "metrics": {"loss": 1}} trailing`, 400, `data after the JSON value at offset 36: "trailing"`},
		{"a second report after the report", "POST", report, "{\"step\": 1, \"metrics\": {}}\n{\"step\": 2, \"metrics\": {}}", 400, `data after the JSON value at offset 27: "{\"step\": 2`},
		{"data after a submission", "POST", "/api/v1/validate", `{"file": "a.yaml", "spec": "name: a"}]`, 400, `data after the JSON value at offset 37: "]"`},
		{"white space after the report", "POST", report, "{\"step\": 0, \"metrics\": {}}\r\n\t \n", 200, ""},
		{"empty body", "POST", report, ``, 400, "request body: empty: want a JSON object"},
		{"report cut short", "POST", report, `{"step": 1, "metrics": {"loss"`, 400, "the JSON value ends early, at offset"},
		{"body over the limit", "POST", report, `{"step": 1, "metrics": {"loss": 1}, "checkpoint": "` + strings.Repeat("x", MaxBody) + `"}`, 413, "larger than the limit of 2097152 bytes (2 MiB)"},
		{"too many metrics", "POST", report, tooManyMetrics(), 400, fmt.Sprintf("metrics: %d values; a report may carry at most %d", virga.MaxMetricsPerReport+1, virga.MaxMetricsPerReport)},
		{"metric name too long", "POST", report, `{"step": 1, "metrics": {"` + strings.Repeat("n", virga.MaxMetricName+1) + `": 1}}`, 400, fmt.Sprintf("is %d bytes long; at most %d are allowed", virga.MaxMetricName+1, virga.MaxMetricName)},
		{"metric name with a newline", "POST", report, `{"step": 1, "metrics": {"a\nb": 1}}`, 400, "holds the control character U+000A"},
		{"negative step", "POST", report, `{"step": -1, "metrics": {"loss": 1}}`, 400, "step"},
		{"empty metric name", "POST", report, `{"step": 1, "metrics": {"": 1}}`, 400, "names must not be empty"},
		{"unknown attempt", "POST", "/api/v1/attempts/99999/report", `{"step": 1, "metrics": {"loss": 1}}`, 404, "attempt 99999 does not exist"},
		{"complete of an unknown attempt", "POST", "/api/v1/attempts/99999/complete", `{"ok": true}`, 404, "attempt 99999 does not exist"},
		{"bad id", "POST", "/api/v1/attempts/abc/report", `{"step": 1}`, 400, "positive integer"},
		{"unknown experiment", "GET", "/api/v1/experiments/99999", nil, 404, "not found"},
		{"unknown trial", "GET", "/api/v1/trials/99999/metrics", nil, 404, "not found"},
		{"unknown op", "POST", fmt.Sprintf("/api/v1/experiments/%d/explode", exp.ID), nil, 404, "want stop, pause or resume"},
		{"bad list limit", "GET", "/api/v1/experiments?limit=-1", nil, 400, "limit"},
		{"bad list state", "GET", "/api/v1/experiments?state=active,bogus", nil, 400, "ACTIVE, PAUSED, STOPPING, COMPLETED, STOPPED, FAILED"},
		{"events of an unknown experiment", "GET", "/api/v1/experiments/99999/events", nil, 404, "not found"},
		{"unknown route", "GET", "/api/v1/nothing", nil, 404, "no such API route"},
		{"unknown route under the API", "POST", "/api/v2/experiments", nil, 404, "no such API route"},
		{"wrong method", "DELETE", fmt.Sprintf("/api/v1/experiments/%d", exp.ID), nil, 405, "allowed: GET, HEAD"},
		{"wrong method on a POST route", "GET", "/api/v1/validate", nil, 405, "allowed: POST"},
		{"ask of an experiment with an entrypoint", "POST", "/api/v1/experiments/%s/trials", nil, 409, "entrypoint"},
	}
	// An experiment that runs its own trials, for the last case; paused so nothing runs.
	own := e.submit("name: own\nentrypoint: [sh, -c, 'sleep 30']\nhyperparameters:\n  x: {type: float, min: 0, max: 1}\nsearcher: random\nobjective: {metric: loss, direction: minimize}\nmax_trials: 1\nstop_grace: 1s\n")
	cases[len(cases)-1].path = fmt.Sprintf("/api/v1/experiments/%d/trials", own.ID)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := e.do(c.method, c.path, "", c.body)
			if c.wantCode == http.StatusOK {
				if code != c.wantCode {
					t.Errorf("HTTP %d %s; want 200", code, body)
				}
				return
			}
			var eb wire.Error
			if code != c.wantCode || json.Unmarshal(body, &eb) != nil || !strings.Contains(eb.Error, c.wantInBody) {
				t.Errorf("HTTP %d %s; want %d with %q", code, body, c.wantCode, c.wantInBody)
			}
		})
	}
	e.want(http.StatusOK, "POST", fmt.Sprintf("/api/v1/experiments/%d/stop", own.ID), "", nil, nil)

	t.Run("bad spec lists problems", func(t *testing.T) {
		code, body := e.do("POST", "/api/v1/experiments", "", wire.SubmitRequest{File: "bad.yaml", Spec: "name: x\nobjective: {metric: loss, direction: maximise}\nmax_trials: 0\n"})
		var eb wire.Error
		if code != http.StatusBadRequest || json.Unmarshal(body, &eb) != nil {
			t.Fatalf("HTTP %d %s, want 400", code, body)
		}
		if len(eb.Problems) < 2 {
			t.Fatalf("problems %+v, want at least 2", eb.Problems)
		}
		for _, p := range eb.Problems {
			if p.File != "bad.yaml" || p.Line == 0 || p.Col == 0 {
				t.Errorf("problem %+v lacks file, line or col", p)
			}
		}
	})
	t.Run("finished attempt and stop of a completed experiment", func(t *testing.T) {
		e.want(http.StatusOK, "POST", fmt.Sprintf("/api/v1/attempts/%d/complete", a.AttemptID), "", wire.CompleteRequest{OK: true}, nil)
		e.want(http.StatusConflict, "POST", report, "", `{"step": 5, "metrics": {"loss": 1}}`, nil)
		e.want(http.StatusConflict, "POST", fmt.Sprintf("/api/v1/attempts/%d/complete", a.AttemptID), "", wire.CompleteRequest{OK: true}, nil)
		var b wire.Asked
		e.want(http.StatusCreated, "POST", fmt.Sprintf("/api/v1/experiments/%d/trials", exp.ID), "", nil, &b)
		e.want(http.StatusOK, "POST", fmt.Sprintf("/api/v1/attempts/%d/report", b.AttemptID), "", `{"step": 1, "metrics": {"loss": 1}}`, nil)
		e.want(http.StatusOK, "POST", fmt.Sprintf("/api/v1/attempts/%d/complete", b.AttemptID), "", wire.CompleteRequest{OK: true}, nil)
		// An API-driven experiment learns that its search is over from the next ask.
		e.want(http.StatusConflict, "POST", fmt.Sprintf("/api/v1/experiments/%d/trials", exp.ID), "", nil, nil)
		e.eventually("completion", func() bool { return e.exp(exp.ID).State == virga.ExperimentCompleted })
		for _, op := range []string{"stop", "pause", "resume"} {
			e.want(http.StatusConflict, "POST", fmt.Sprintf("/api/v1/experiments/%d/%s", exp.ID, op), "", nil, nil)
		}
	})
}

// tooManyMetrics is a report with one metric more than a report may carry.
func tooManyMetrics() string {
	var ms []string
	for i := range virga.MaxMetricsPerReport + 1 {
		ms = append(ms, fmt.Sprintf(`"m%d": 1`, i))
	}
	return `{"step": 1, "metrics": {` + strings.Join(ms, ", ") + `}}`
}

// sseEvent is one parsed server-sent event.
type sseEvent struct {
	kind string
	data string
}

func readSSE(r *bufio.Reader) (sseEvent, error) {
	var ev sseEvent
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			ev.kind = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data += strings.TrimPrefix(line, "data: ")
		case line == "" && ev.kind != "":
			return ev, nil
		}
	}
}

func TestWatch(t *testing.T) {
	e := newEnv(t, false)
	exp := e.submit(apiDriven)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/api/v1/experiments/%d/watch", e.srv.URL, exp.ID), nil)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	br := bufio.NewReader(resp.Body)
	first, err := readSSE(br)
	if err != nil || first.kind != "snapshot" {
		t.Fatalf("first event %+v, %v; want snapshot", first, err)
	}
	var snap wire.WatchSnapshot
	if err := json.Unmarshal([]byte(first.data), &snap); err != nil || snap.Experiment.Experiment == nil || snap.Experiment.ID != exp.ID {
		t.Fatalf("snapshot %s: %v", first.data, err)
	}
	for range 2 {
		var a wire.Asked
		e.want(http.StatusCreated, "POST", fmt.Sprintf("/api/v1/experiments/%d/trials", exp.ID), "", nil, &a)
		e.want(http.StatusOK, "POST", fmt.Sprintf("/api/v1/attempts/%d/report", a.AttemptID), "", wire.Report{Step: 0, Metrics: map[string]float64{"loss": 1}}, nil)
		e.want(http.StatusOK, "POST", fmt.Sprintf("/api/v1/attempts/%d/complete", a.AttemptID), "", wire.CompleteRequest{OK: true}, nil)
	}
	// The ask past max_trials ends the search.
	e.want(http.StatusConflict, "POST", fmt.Sprintf("/api/v1/experiments/%d/trials", exp.ID), "", nil, nil)
	updates := 0
	for {
		ev, err := readSSE(br)
		if err != nil {
			t.Fatalf("after %d updates: %v (no end event)", updates, err)
		}
		switch ev.kind {
		case "update":
			var u wire.Update
			if err := json.Unmarshal([]byte(ev.data), &u); err != nil || u.ExperimentID != exp.ID {
				t.Fatalf("update %s: %v", ev.data, err)
			}
			updates++
			continue
		case "end":
			var end virga.Experiment
			if err := json.Unmarshal([]byte(ev.data), &end); err != nil || end.State != virga.ExperimentCompleted {
				t.Errorf("end %s: %v", ev.data, err)
			}
		default:
			t.Fatalf("event %q", ev.kind)
		}
		break
	}
	if updates < 4 {
		t.Errorf("%d updates before end, want at least one per ask and complete", updates)
	}
	// A watch of an ended experiment is a snapshot and an end.
	code, body := e.do("GET", fmt.Sprintf("/api/v1/experiments/%d/watch", exp.ID), "", nil)
	if code != 200 || !strings.Contains(string(body), "event: snapshot") || !strings.Contains(string(body), "event: end") {
		t.Errorf("watch of an ended experiment: HTTP %d %s", code, body)
	}
	if code, _ := e.do("GET", "/api/v1/experiments/99999/watch", "", nil); code != 404 {
		t.Errorf("watch of an unknown experiment: HTTP %d, want 404", code)
	}
}

func TestLogsOfARealProcess(t *testing.T) {
	e := newEnv(t, true) // the shim relays VIRGA_METRIC with the trial token
	exp := e.submit(`name: logs
entrypoint: [sh, -c, 'echo hello; sleep 0.3; echo "VIRGA_METRIC {\"step\":0,\"metrics\":{\"loss\":1}}"; echo bye']
hyperparameters:
  x: {type: float, min: 0, max: 1}
searcher: random
objective: {metric: loss, direction: minimize}
max_trials: 1
`)
	var trials []*virga.Trial
	e.eventually("the trial to be created", func() bool {
		e.want(http.StatusOK, "GET", fmt.Sprintf("/api/v1/experiments/%d/trials", exp.ID), e.admin, nil, &trials)
		return len(trials) == 1
	})
	id := trials[0].ID
	start := time.Now()
	code, body := e.do("GET", fmt.Sprintf("/api/v1/trials/%d/logs?follow=true", id), e.admin, nil)
	if code != 200 || !strings.Contains(string(body), "hello\n") || !strings.Contains(string(body), "bye\n") {
		t.Fatalf("followed logs: HTTP %d %q", code, body)
	}
	t.Logf("follow returned after %v", time.Since(start))
	var tv wire.TrialView
	e.want(http.StatusOK, "GET", fmt.Sprintf("/api/v1/trials/%d", id), e.admin, nil, &tv)
	if tv.State != virga.TrialCompleted {
		t.Errorf("follow returned with the trial %s, want it ended", tv.State)
	}
	code, body2 := e.do("GET", fmt.Sprintf("/api/v1/trials/%d/logs", id), e.admin, nil)
	if code != 200 || string(body2) != string(body) {
		t.Errorf("logs after the end: HTTP %d %q, want %q", code, body2, body)
	}
	for q, want := range map[string]int{"attempt=1": 200, "attempt=2": 404, "attempt=x": 400, "attempt=-1": 400} {
		code, body3 := e.do("GET", fmt.Sprintf("/api/v1/trials/%d/logs?%s", id, q), e.admin, nil)
		if code != want || code == 200 && string(body3) != string(body) {
			t.Errorf("logs?%s: HTTP %d %q, want %d", q, code, body3, want)
		}
	}
	var ms []virga.Metric
	e.want(http.StatusOK, "GET", fmt.Sprintf("/api/v1/trials/%d/metrics", id), e.admin, nil, &ms)
	if len(ms) != 1 || ms[0].Values["loss"] != 1 {
		t.Errorf("metrics %+v, want the relayed step 0", ms)
	}
	e.eventually("the experiment to complete", func() bool { return e.exp(exp.ID).State == virga.ExperimentCompleted })
}

// TestCrossSiteRefusedOnLoopback: a server on loopback takes requests without
// a token, but not those a web page the user visits could send it: a
// request with an Origin header, for another Host (DNS rebinding), or a
// change that is not JSON (a "simple" cross-origin POST). A token that is
// sent must be valid.
func TestCrossSiteRefusedOnLoopback(t *testing.T) {
	e := newEnv(t, false)
	exp := e.submit(apiDriven) // JSON without a token: a local client
	spec, _ := json.Marshal(wire.SubmitRequest{File: "evil.yaml", Spec: apiDriven})
	req := func(method, path, ctype, origin, token string, body []byte) *http.Request {
		r, err := http.NewRequest(method, e.srv.URL+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if ctype != "" {
			r.Header.Set("Content-Type", ctype)
		}
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		return r
	}
	stop := fmt.Sprintf("/api/v1/experiments/%d/stop", exp.ID)
	rebound := req("GET", "/api/v1/experiments", "", "", "", nil)
	rebound.Host = "evil.example:80"
	refused := []struct {
		name string
		r    *http.Request
		want string
	}{
		{"text/plain POST", req("POST", "/api/v1/experiments", "text/plain", "", "", spec), "Content-Type: application/json"},
		{"form POST", req("POST", "/api/v1/experiments", "application/x-www-form-urlencoded", "", "", spec), "Content-Type: application/json"},
		{"bodiless POST without a type", req("POST", stop, "", "", "", nil), "Content-Type: application/json"},
		{"JSON POST with an Origin", req("POST", "/api/v1/experiments", "application/json", "http://evil.example", "", spec), "web page"},
		{"text/plain POST with an Origin", req("POST", stop, "text/plain", "null", "", nil), "web page"},
		{"GET with an Origin", req("GET", "/api/v1/experiments", "", "http://evil.example", "", nil), "web page"},
		{"metrics for a web page", req("GET", "/metrics", "", "http://evil.example", "", nil), "web page"},
		{"GET for another host", rebound, "host"},
	}
	for _, c := range refused {
		code, body := e.send(c.r)
		var eb wire.Error
		if code != http.StatusForbidden || json.Unmarshal(body, &eb) != nil || !strings.Contains(eb.Error, c.want) || !strings.Contains(eb.Error, "admin-token") {
			t.Errorf("%s: HTTP %d %s; want 403 saying %q and what to do", c.name, code, body, c.want)
		}
	}
	var exps []wire.ExperimentView
	e.want(http.StatusOK, "GET", "/api/v1/experiments", "", nil, &exps)
	if len(exps) != 1 || exps[0].State != virga.ExperimentActive {
		t.Fatalf("experiments after refused requests: %+v; want only experiment %d, active", exps, exp.ID)
	}
	// An admin token is proof enough, Origin or not.
	if code, body := e.send(req("GET", "/api/v1/experiments", "", "http://evil.example", e.admin, nil)); code != http.StatusOK {
		t.Errorf("admin token with an Origin: HTTP %d %s, want 200", code, body)
	}
	// A token that is sent must be valid, on loopback too.
	var a wire.Asked
	e.want(http.StatusCreated, "POST", fmt.Sprintf("/api/v1/experiments/%d/trials", exp.ID), "", nil, &a)
	rep := wire.Report{Step: 1, Metrics: map[string]float64{"loss": 1}}
	report := fmt.Sprintf("/api/v1/attempts/%d/report", a.AttemptID)
	for _, tok := range []string{"garbage", "vtgarbage", a.Token + "x"} {
		if code, body := e.do("POST", report, tok, rep); code != http.StatusUnauthorized {
			t.Errorf("token %q on loopback: HTTP %d %s, want 401", tok, code, body)
		}
	}
	if code, body := e.do("GET", "/api/v1/experiments", "garbage", nil); code != http.StatusUnauthorized {
		t.Errorf("bad admin token on loopback: HTTP %d %s, want 401", code, body)
	}
	e.want(http.StatusOK, "POST", report, a.Token, rep, nil)
	e.want(http.StatusOK, "POST", stop, "", nil, nil)
}

// TestCheckpointRefusedIs422: a checkpoint directory holding what a
// checkpoint cannot (a link leading outside it) is the trial's doing: the
// report gets 422 with the reason, not a 5xx the SDKs would retry.
func TestCheckpointRefusedIs422(t *testing.T) {
	e := newEnv(t, false)
	exp := e.submit("name: badlink\nentrypoint: [sh, -c, 'ln -s /etc \"$VIRGA_CHECKPOINT_DIR/etc\" && sleep 30']\nhyperparameters:\n  x: {type: float, min: 0, max: 1}\nsearcher: random\nobjective: {metric: loss, direction: minimize}\nmax_trials: 1\nstop_grace: 1s\n")
	var tv wire.TrialView
	e.eventually("a running attempt with its link", func() bool {
		var trials []*virga.Trial
		e.want(http.StatusOK, "GET", fmt.Sprintf("/api/v1/experiments/%d/trials", exp.ID), "", nil, &trials)
		if len(trials) == 0 {
			return false
		}
		e.want(http.StatusOK, "GET", fmt.Sprintf("/api/v1/trials/%d", trials[0].ID), "", nil, &tv)
		_, err := os.Lstat(filepath.Join(e.ctl.TrialDir(tv.ID), "etc"))
		return len(tv.AttemptList) > 0 && err == nil
	})
	a := tv.AttemptList[len(tv.AttemptList)-1]
	code, body := e.do("POST", fmt.Sprintf("/api/v1/attempts/%d/report", a.ID), control.TrialToken(testSecret, tv.ID),
		wire.Report{Step: 1, Metrics: map[string]float64{"loss": 1}})
	var eb wire.Error
	if code != http.StatusUnprocessableEntity || json.Unmarshal(body, &eb) != nil || !strings.Contains(eb.Error, "outside the checkpoint directory") {
		t.Errorf("report with a link to /etc in the checkpoint directory: HTTP %d %s, want 422 saying why", code, body)
	}
	if strings.Count(eb.Error, "saving checkpoint") > 1 {
		t.Errorf("message %q repeats itself", eb.Error)
	}
	e.want(http.StatusOK, "POST", fmt.Sprintf("/api/v1/experiments/%d/stop", exp.ID), "", nil, nil)
}
