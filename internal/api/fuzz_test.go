package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/virga-ml/virga/internal/api/wire"
)

// FuzzReportDecode posts arbitrary bodies to the report endpoint of a live
// attempt through the real handler and control loop. The server must never
// panic nor answer 5xx other than 503, and accepts only a body that is one
// JSON value (white space around it aside).
func FuzzReportDecode(f *testing.F) {
	for _, s := range []string{
		`{"step": 1, "metrics": {"loss": 0.5}}`,
		`{"step": 0, "metrics": {}}`,
		`{"step": -1, "metrics": {"loss": 1}}`,
		`{"step": 9223372036854775807, "metrics": {"a": 1e308, "b": -1e-308}}`,
		`{"step": 1.5, "metrics": {"loss": 1}}`,
		`{"step": 1, "metrics": {"": 1}}`,
		`{"step": 1, "metrics": {"loss": "NaN"}}`,
		`{"step": 1, "metrics": null}`,
		`{"step": 1, "extra": true}`,
		`{"step": 1, "metrics": {"loss": 1}} trailing`,
		`{"step": 1, "metrics": {"loss": 1}}]`,
		"{\"step\": 1, \"metrics\": {}}\n{\"step\": 2, \"metrics\": {}}",
		"{\"step\": 1, \"metrics\": {}} \r\n",
		`[]`, `null`, ``, `{`, "\x00\xff",
		`{"metrics": {"\u0000": 1, "\ud800": 2}}`,
	} {
		f.Add([]byte(s))
	}
	e := newEnv(f, false)
	exp := e.submit(apiDriven)
	var a wire.Asked
	e.want(http.StatusCreated, "POST", fmt.Sprintf("/api/v1/experiments/%d/trials", exp.ID), "", nil, &a)
	path := fmt.Sprintf("/api/v1/attempts/%d/report", a.AttemptID)
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Host = "127.0.0.1"
		e.api.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusConflict, http.StatusServiceUnavailable:
		default:
			t.Fatalf("body %q: HTTP %d %s", body, rec.Code, rec.Body)
		}
		if rec.Code == http.StatusOK && !json.Valid(body) {
			t.Fatalf("body %q is not one JSON value, yet it was accepted", body)
		}
		if rec.Code == http.StatusConflict {
			t.Fatalf("body %q: the live attempt was refused: %s", body, rec.Body)
		}
	})
}
