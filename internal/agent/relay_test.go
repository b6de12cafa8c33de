package agent

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestRelayNeedsTheTrialsToken: the agent's loopback listener passes on
// only reports that carry the trial's token; other processes on the node
// (or a web page) cannot report as the trial.
func TestRelayNeedsTheTrialsToken(t *testing.T) {
	r := &relayer{spec: &Spec{Token: "vt9.secret", AttemptID: 3, Server: "http://127.0.0.1:9"}}
	for _, c := range []struct {
		auth string
		want int
	}{{"", http.StatusUnauthorized}, {"Bearer vt9.other", http.StatusUnauthorized}, {"vt9.secret", http.StatusUnauthorized}, {"Bearer vt9.secret", http.StatusOK}} {
		req := httptest.NewRequest("POST", "/api/v1/attempts/3/report", strings.NewReader(`{"step": 1, "metrics": {"loss": 1}}`))
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req) // not the chief: a valid report is answered "continue" here
		if w.Code != c.want {
			t.Errorf("Authorization %q: status %d; want %d", c.auth, w.Code, c.want)
		}
	}
}

// TestRelayRefusesATooLargeReport: a report over the API's body limit is
// answered 413 by the agent, as the server would, not cut and passed on.
func TestRelayRefusesATooLargeReport(t *testing.T) {
	r := &relayer{spec: &Spec{Token: "vt9.secret", AttemptID: 3, Server: "http://127.0.0.1:9"}}
	body := `{"step": 1, "metrics": {"loss": 1}, "checkpoint": "` + strings.Repeat("x", maxReportBody) + `"}`
	req := httptest.NewRequest("POST", "/api/v1/attempts/3/report", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer vt9.secret")
	w := httptest.NewRecorder()
	r.ServeHTTP(w, req)
	if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), "at most 2097152 bytes") {
		t.Errorf("a report of %d bytes: HTTP %d %s, want 413 naming the limit", len(body), w.Code, w.Body)
	}
}
