package oip

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/serve"
)

// restEnv is the REST front end over a testService behind a real HTTP server.
type restEnv struct {
	t   *testing.T
	svc *testService
	srv *httptest.Server
}

func newRESTEnv(t *testing.T, opts Options) *restEnv {
	t.Helper()
	svc := newTestService()
	srv := httptest.NewServer(NewHandler(svc, opts))
	t.Cleanup(srv.Close)
	return &restEnv{t: t, svc: svc, srv: srv}
}

// do sends a request and returns the status, the Content-Type and the body.
func (e *restEnv) do(method, path, body string, header ...string) (int, string, []byte) {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// jsonEqual reports whether two JSON texts hold the same value.
func jsonEqual(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("response is not JSON: %v: %s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want is not JSON: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("got  %s\nwant %s", bytes.TrimSpace(got), want)
	}
}

// The request of the specification's "Inference Request Examples"
// (inference_rest.md), verbatim.
const specRequest = `{
  "id" : "42",
  "inputs" : [
    {
      "name" : "input0",
      "shape" : [ 2, 2 ],
      "datatype" : "UINT32",
      "data" : [ 1, 2, 3, 4 ]
    },
    {
      "name" : "input1",
      "shape" : [ 3 ],
      "datatype" : "BOOL",
      "data" : [ true ]
    }
  ],
  "outputs" : [
    {
      "name" : "output0"
    }
  ]
}`

// The specification's response to it, with the comma its text lacks after
// "id" : "42", and the model_name the response object requires.
const specResponse = `{
  "model_name" : "mymodel",
  "id" : "42",
  "outputs" : [
    {
      "name" : "output0",
      "shape" : [ 3, 2 ],
      "datatype"  : "FP32",
      "data" : [ 1.0, 1.1, 2.0, 2.1, 3.0, 3.1 ]
    }
  ]
}`

// TestSpecExample runs the specification's own inference example. Its
// request declares input1 with shape [3] but gives one value: the server
// refuses that with a 400 naming the input, and answers the request with
// input1's three values exactly as the specification's response shows.
func TestSpecExample(t *testing.T) {
	e := newRESTEnv(t, Options{})
	code, ctype, body := e.do("POST", "/v2/models/mymodel/infer", specRequest)
	if code != http.StatusBadRequest || !strings.Contains(string(body), `inputs[1].data: 1 values for shape [3] (3 expected)`) {
		t.Errorf("verbatim example: HTTP %d %s; want 400 naming inputs[1].data", code, body)
	}
	if ctype != "application/json" {
		t.Errorf("error Content-Type %q, want application/json", ctype)
	}
	var eb Error
	if err := json.Unmarshal(body, &eb); err != nil || eb.Error == "" {
		t.Errorf("error body %s is not {\"error\": \"...\"}", body)
	}

	fixed := strings.Replace(specRequest, `"data" : [ true ]`, `"data" : [ true, false, true ]`, 1)
	code, ctype, body = e.do("POST", "/v2/models/mymodel/infer", fixed)
	if code != http.StatusOK || ctype != "application/json" {
		t.Fatalf("HTTP %d %s %s, want 200 application/json", code, ctype, body)
	}
	jsonEqual(t, body, specResponse)
	// The same through the versioned path.
	code, _, body = e.do("POST", "/v2/models/sum/versions/1/infer", `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4.5]}],"outputs":[{"name":"sum"}]}`)
	if code != http.StatusOK {
		t.Fatalf("versioned infer: HTTP %d %s", code, body)
	}
	jsonEqual(t, body, `{"model_name":"sum","model_version":"1","outputs":[{"name":"sum","datatype":"FP64","shape":[1],"data":[10.5]}]}`)
}

func TestHealthAndMetadata(t *testing.T) {
	e := newRESTEnv(t, Options{})
	for _, c := range []struct {
		path     string
		wantCode int
		want     string
	}{
		{"/v2/health/live", 200, `{"live":true}`},
		{"/v2/health/ready", 200, `{"ready":true}`},
		{"/v2", 200, `{"name":"virga","version":"test","extensions":["model_repository","binary_tensor_data","system_shared_memory"]}`},
		{"/v2/", 200, `{"name":"virga","version":"test","extensions":["model_repository","binary_tensor_data","system_shared_memory"]}`},
		{"/v2/models/sum", 200, `{"name":"sum","versions":["1"],"platform":"virga_test",
			"inputs":[{"name":"x","datatype":"FP32","shape":[-1,4]}],
			"outputs":[{"name":"sum","datatype":"FP64","shape":[-1]},{"name":"double","datatype":"FP32","shape":[-1,4]}]}`},
		{"/v2/models/sum/versions/1", 200, `{"name":"sum","versions":["1"],"platform":"virga_test",
			"inputs":[{"name":"x","datatype":"FP32","shape":[-1,4]}],
			"outputs":[{"name":"sum","datatype":"FP64","shape":[-1]},{"name":"double","datatype":"FP32","shape":[-1,4]}]}`},
		{"/v2/models/identity", 200, `{"name":"identity","platform":"virga_test","inputs":[],"outputs":[]}`},
		{"/v2/models/sum/ready", 200, `{"name":"sum","ready":true}`},
		{"/v2/models/sum/versions/1/ready", 200, `{"name":"sum","ready":true}`},
		{"/v2/models/broken/ready", 503, `{"name":"broken","ready":false}`},
		{"/v2/models/nope", 404, `{"error":"model not found"}`},
		{"/v2/models/sum/versions/7", 404, `{"error":"model not found"}`},
		{"/v2/models/nope/ready", 404, `{"error":"model not found"}`},
	} {
		code, _, body := e.do("GET", c.path, "")
		if code != c.wantCode {
			t.Errorf("GET %s: HTTP %d %s, want %d", c.path, code, body, c.wantCode)
			continue
		}
		jsonEqual(t, body, c.want)
	}
	code, _, body := e.do("POST", "/v2/health/live", "{}")
	if code != http.StatusMethodNotAllowed || !strings.Contains(string(body), "allowed: GET") {
		t.Errorf("POST /v2/health/live: HTTP %d %s, want 405 naming GET", code, body)
	}
	code, _, body = e.do("GET", "/v3/models", "")
	if code != http.StatusNotFound || !strings.Contains(string(body), `"error"`) {
		t.Errorf("GET /v3/models: HTTP %d %s, want 404 with an error body", code, body)
	}
}

// TestInferErrors: each bad request gets the status its convention gives
// and an error that names the field and what would be right.
func TestInferErrors(t *testing.T) {
	e := newRESTEnv(t, Options{MaxBody: 4096})
	x := func(shape, dt, data string) string {
		return `{"inputs":[{"name":"x","shape":` + shape + `,"datatype":"` + dt + `","data":` + data + `}]}`
	}
	for _, c := range []struct {
		name, path, body string
		wantCode         int
		want             string // a substring of the error
	}{
		{"too few values", "sum", x("[1,4]", "FP32", "[1,2,3]"), 400, `inputs[0].data: 3 values for shape [1,4] (4 expected)`},
		{"too many values", "sum", x("[1,4]", "FP32", "[1,2,3,4,5]"), 400, `inputs[0].data: 5 values for shape [1,4] (4 expected)`},
		{"string for FP32", "sum", x("[1,4]", "FP32", `[1,2,"three",4]`), 400, `inputs[0].data[2]: "three" is not a FP32 value (want a number`},
		{"bool for FP32", "sum", x("[1,4]", "FP32", `[1,2,true,4]`), 400, `inputs[0].data[2]: true is not a FP32 value`},
		{"fraction for INT32", "identity", x("[2]", "INT32", `[1,2.5]`), 400, `inputs[0].data[1]: 2.5 is not a INT32 value (want an integer from -2147483648 to 2147483647)`},
		{"UINT8 out of range", "identity", x("[2]", "UINT8", `[1,256]`), 400, `inputs[0].data[1]: 256 is not a UINT8 value (want an integer from 0 to 255)`},
		{"negative UINT64", "identity", x("[1]", "UINT64", `[-1]`), 400, `inputs[0].data[0]: -1 is not a UINT64 value (want an integer from 0 to 18446744073709551615)`},
		{"number for BOOL", "identity", x("[1]", "BOOL", `[1]`), 400, `inputs[0].data[0]: 1 is not a BOOL value (want true or false)`},
		{"number for BYTES", "identity", x("[1]", "BYTES", `[1]`), 400, `inputs[0].data[0]: 1 is not a BYTES value (want a JSON string)`},
		{"FP32 overflow", "identity", x("[1]", "FP32", `[1e39]`), 400, `inputs[0].data[0]: 1e39 is not a FP32 value (want a number within FP32's range`},
		{"object in data", "identity", x("[1]", "FP32", `[{"a":1}]`), 400, `inputs[0].data[0]: an object is not a FP32 value`},
		{"data not an array", "identity", x("[1]", "FP32", `7`), 400, `inputs[0].data: want a JSON array of 1 FP32 values, got 7`},
		{"no data", "identity", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32"}]}`, 400, `inputs[0].data: missing`},
		{"no shape", "identity", `{"inputs":[{"name":"x","datatype":"FP32","data":[1]}]}`, 400, `inputs[0].shape: missing`},
		{"negative dimension", "identity", x("[-1,4]", "FP32", "[]"), 400, `inputs[0].shape: dimension 0 is -1`},
		{"huge shape", "identity", x("[100000,100000]", "FP32", "[1]"), 400, `inputs[0].shape: shape [100000,100000] holds more elements than a request can carry`},
		{"fractional dimension", "identity", x("[1.5]", "FP32", "[1]"), 400, `inputs[0].shape: want an array of integers, got [1.5]`},
		{"unknown datatype", "identity", x("[1]", "FLOAT", "[1]"), 400, `inputs[0].datatype: unknown datatype "FLOAT" (want one of BOOL,`},
		{"no name", "identity", `{"inputs":[{"shape":[1],"datatype":"FP32","data":[1]}]}`, 400, `inputs[0].name: missing`},
		{"duplicate input", "identity", `{"inputs":[{"name":"a","shape":[1],"datatype":"FP32","data":[1]},{"name":"a","shape":[1],"datatype":"FP32","data":[1]}]}`, 400, `inputs[1].name: input "a" is also inputs[0]`},
		{"duplicate output", "sum", `{"inputs":[],"outputs":[{"name":"sum"},{"name":"sum"}]}`, 400, `outputs[1].name: output "sum" is also outputs[0]`},
		{"unknown field", "identity", `{"inputs":[],"input":[]}`, 400, `request body: unknown field "input" at offset 13 (an inference request has id, parameters, inputs and outputs)`},
		{"unknown input field", "identity", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1],"dtype":"FP32"}]}`, 400, `inputs[0]: unknown field "dtype" at offset 64 (an input has name, shape, datatype, parameters and data)`},
		{"malformed JSON", "identity", `{"inputs":[{"name":"x",]}`, 400, `request body: malformed JSON at offset 23: ']' where a string was expected`},
		{"truncated JSON", "identity", `{"inputs":[`, 400, `request body: the JSON value ends early, at offset 11 (want '{')`},
		{"empty body", "identity", ` `, 400, `request body: empty: want a JSON object`},
		{"trailing data", "identity", `{"inputs":[]} {}`, 400, `request body: data after the JSON object at offset 14`},
		{"model_name disagrees", "identity", `{"model_name":"sum","inputs":[]}`, 400, `model_name: "sum", but the path names "identity"`},
		{"id not a string", "identity", `{"id":42,"inputs":[]}`, 400, `id: want a string, got 42`},
		{"priority not an integer", "identity", `{"parameters":{"priority":"high"},"inputs":[]}`, 400, `parameters.priority: want a non-negative integer, got "high"`},
		{"negative timeout", "identity", `{"parameters":{"timeout":-5},"inputs":[]}`, 400, `parameters.timeout: want a non-negative integer, got -5`},
		{"parameter an object", "identity", `{"parameters":{"timeout":{}},"inputs":[]}`, 400, `parameters.timeout: want a string, number or boolean`},
		{"sequence batching", "identity", `{"parameters":{"sequence_id":7},"inputs":[]}`, 400, `parameters.sequence_id: sequence batching is not supported`},
		{"binary input", "identity", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":4},"data":[1]}]}`, 400, `inputs[0].parameters.binary_data_size: binary data needs the Inference-Header-Content-Length header`},
		{"body over the limit", "identity", x("[1100]", "FP32", "["+strings.Repeat("1.5,", 1099)+"1]"), 413, `larger than the limit of 4096 bytes`},
		{"model refuses the shape", "sum", x("[1,3]", "FP32", "[1,2,3]"), 400, `inputs: input "x" has shape [1 3], the model takes [-1 4]`},
		{"unknown model", "nope", x("[1]", "FP32", "[1]"), 404, `model not found`},
		{"unavailable model", "broken", x("[1]", "FP32", "[1]"), 503, `model unavailable`},
		{"refused", "busy", x("[1]", "FP32", "[1]"), 429, `the model's queue is full (QueueFull)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, body := e.do("POST", "/v2/models/"+c.path+"/infer", c.body)
			var eb Error
			if err := json.Unmarshal(body, &eb); err != nil {
				t.Fatalf("HTTP %d, body %s is not an error object: %v", code, body, err)
			}
			if code != c.wantCode || !strings.Contains(eb.Error, c.want) {
				t.Errorf("HTTP %d %q\nwant %d %q", code, eb.Error, c.wantCode, c.want)
			}
		})
	}
}

// TestBodyLimitChunked: a body over the limit is refused with 413 also when
// its length is not announced.
func TestBodyLimitChunked(t *testing.T) {
	e := newRESTEnv(t, Options{MaxBody: 100})
	body := `{"inputs":[{"name":"x","shape":[40],"datatype":"FP32","data":[` + strings.Repeat("1,", 39) + `1]}]}`
	req, err := http.NewRequest("POST", e.srv.URL+"/v2/models/identity/infer", io.MultiReader(strings.NewReader(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = -1
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "larger than the limit of 100 bytes") {
		t.Errorf("HTTP %d %s, want 413 naming the limit", resp.StatusCode, b)
	}
}

// TestInferTypes sends every datatype through the identity model, flat and
// nested, and checks the values come back as they went.
func TestInferTypes(t *testing.T) {
	e := newRESTEnv(t, Options{})
	for _, c := range []struct {
		dt, data, want string
	}{
		{"BOOL", `[true,false]`, ``},
		{"UINT8", `[0,255]`, ``},
		{"UINT16", `[0,65535]`, ``},
		{"UINT32", `[0,4294967295]`, ``},
		{"UINT64", `[0,18446744073709551615]`, ``},
		{"INT8", `[-128,127]`, ``},
		{"INT16", `[-32768,32767]`, ``},
		{"INT32", `[-2147483648,2147483647]`, ``},
		{"INT64", `[-9223372036854775808,9223372036854775807]`, ``},
		{"FP16", `[1.5,-65504]`, ``},
		{"FP16", `[0.1,70000]`, `[0.099975586,"Infinity"]`},
		{"FP32", `[1.1,-3.4e38]`, ``},
		{"FP32", `["NaN","-Infinity"]`, ``},
		{"FP64", `[1.1,1e300]`, ``},
		{"BYTES", `["héllo","a\"b\\c\n"]`, ``},
	} {
		want := c.want
		if want == "" {
			want = c.data
		}
		for _, form := range []string{"flat", "nested"} {
			data := c.data
			shape := "[2]"
			if form == "nested" {
				data = "[" + c.data + "]"
				shape = "[1,2]"
			}
			req := `{"id":"r1","inputs":[{"name":"t","shape":` + shape + `,"datatype":"` + c.dt + `","data":` + data + `}]}`
			code, _, body := e.do("POST", "/v2/models/identity/infer", req)
			if code != http.StatusOK {
				t.Errorf("%s %s: HTTP %d %s", c.dt, form, code, body)
				continue
			}
			var resp struct {
				ID      string `json:"id"`
				Outputs []struct {
					Datatype string          `json:"datatype"`
					Shape    []int64         `json:"shape"`
					Data     json.RawMessage `json:"data"`
				} `json:"outputs"`
			}
			if err := json.Unmarshal(body, &resp); err != nil {
				t.Fatalf("%s: %v: %s", c.dt, err, body)
			}
			if resp.ID != "r1" || len(resp.Outputs) != 1 || resp.Outputs[0].Datatype != c.dt {
				t.Errorf("%s %s: response %s", c.dt, form, body)
				continue
			}
			jsonEqual(t, resp.Outputs[0].Data, want)
		}
	}
}

// TestParameters: Triton's priority and timeout reach the Service as Virga
// reads them, with the arrival stamped by the injected clock.
func TestParameters(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	e := newRESTEnv(t, Options{Now: func() time.Time { return now }})
	for _, c := range []struct {
		params       string
		wantPriority int
		wantTimeout  time.Duration
	}{
		{`{}`, 0, 0},
		{`{"priority":0}`, 0, 0},
		{`{"priority":1,"timeout":2500}`, 0, 2500 * time.Microsecond},
		{`{"priority":3,"timeout":0,"binary_data_output":false,"custom":"ignored"}`, 2, 0},
	} {
		req := `{"parameters":` + c.params + `,"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`
		code, _, body := e.do("POST", "/v2/models/sum/infer", req)
		if code != http.StatusOK {
			t.Fatalf("%s: HTTP %d %s", c.params, code, body)
		}
		r := e.svc.lastRequest()
		if r.Priority != c.wantPriority || r.Timeout != c.wantTimeout || !r.Arrived.Equal(now) || r.Model != "sum" || r.Version != "" {
			t.Errorf("%s: request priority %d timeout %v arrived %v model %q; want %d %v %v sum",
				c.params, r.Priority, r.Timeout, r.Arrived, r.Model, c.wantPriority, c.wantTimeout, now)
		}
	}
	code, _, body := e.do("POST", "/v2/models/sum/infer", `{"inputs":[{"name":"x","shape":[2,4],"datatype":"FP32","data":[[1,2,3,4],[5,6,7,8]]}],"outputs":[{"name":"double","parameters":{"binary_data":false}}]}`)
	if code != http.StatusOK {
		t.Fatalf("HTTP %d %s", code, body)
	}
	jsonEqual(t, body, `{"model_name":"sum","outputs":[{"name":"double","datatype":"FP32","shape":[2,4],"data":[2,4,6,8,10,12,14,16]}]}`)
	if got := e.svc.lastRequest().Outputs; !reflect.DeepEqual(got, []string{"double"}) {
		t.Errorf("requested outputs %q, want [double]", got)
	}
}

func TestRepository(t *testing.T) {
	e := newRESTEnv(t, Options{})
	code, _, body := e.do("POST", "/v2/repository/index", "")
	if code != 200 {
		t.Fatalf("index: HTTP %d %s", code, body)
	}
	jsonEqual(t, body, `[{"name":"broken","state":"UNAVAILABLE","reason":"unloaded"},{"name":"busy","state":"READY"},
		{"name":"identity","state":"READY"},{"name":"mymodel","state":"READY"},{"name":"sum","state":"READY"}]`)
	if code, _, body := e.do("POST", "/v2/repository/models/sum/unload", `{"parameters":{"unload_dependents":false}}`); code != 200 {
		t.Fatalf("unload: HTTP %d %s", code, body)
	}
	if code, _, _ := e.do("GET", "/v2/models/sum/ready", ""); code != http.StatusServiceUnavailable {
		t.Errorf("ready after unload: HTTP %d, want 503", code)
	}
	_, _, body = e.do("POST", "/v2/repository/index", `{"ready":true}`)
	jsonEqual(t, body, `[{"name":"busy","state":"READY"},{"name":"identity","state":"READY"},{"name":"mymodel","state":"READY"}]`)
	if code, _, body := e.do("POST", "/v2/repository/models/sum/load", ""); code != 200 {
		t.Fatalf("load: HTTP %d %s", code, body)
	}
	if code, _, _ := e.do("GET", "/v2/models/sum/ready", ""); code != 200 {
		t.Errorf("ready after load: HTTP %d, want 200", code)
	}
	for _, c := range []struct {
		path, body string
		wantCode   int
		want       string
	}{
		{"/v2/repository/models/nope/load", "", 404, "model not found"},
		{"/v2/repository/models/broken/load", "", 503, "model unavailable"},
		{"/v2/repository/models/sum/load", `{"parameters":{"config":"{}"}}`, 400, "parameters.config: not supported"},
		{"/v2/repository/models/sum/unload", `{"parameters":{"force":true}}`, 400, "parameters.force: unknown parameter"},
		{"/v2/repository/index", `{"ready":"yes"}`, 400, "ready: want true or false"},
	} {
		code, _, body := e.do("POST", c.path, c.body)
		if code != c.wantCode || !strings.Contains(string(body), c.want) {
			t.Errorf("POST %s %s: HTTP %d %s, want %d %q", c.path, c.body, code, body, c.wantCode, c.want)
		}
	}
}

// TestAuth: with CheckToken set, everything but the health checks needs a
// bearer token the check accepts.
func TestAuth(t *testing.T) {
	errBad := errors.New("not an admin token")
	var checked []string
	e := newRESTEnv(t, Options{CheckToken: func(ctx context.Context, tok string) error {
		checked = append(checked, tok)
		if tok != "secret" {
			return errBad
		}
		return nil
	}})
	infer := `{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`
	for _, c := range []struct {
		method, path, body, auth string
		wantCode                 int
		want                     string
	}{
		{"GET", "/v2/health/live", "", "", 200, "live"},
		{"GET", "/v2/health/ready", "", "", 200, "ready"},
		{"POST", "/v2/models/sum/infer", infer, "", 401, "a token is required: send 'Authorization: Bearer <token>'"},
		{"POST", "/v2/models/sum/infer", infer, "Basic abc", 401, "not 'Bearer <token>'"},
		{"POST", "/v2/models/sum/infer", infer, "Bearer wrong", 401, "the token is not accepted: not an admin token"},
		{"POST", "/v2/models/sum/infer", infer, "Bearer secret", 200, "model_name"},
		{"GET", "/v2", "", "", 401, "a token is required"},
		{"GET", "/v2/models/sum", "", "", 401, "a token is required"},
		{"POST", "/v2/repository/index", "", "", 401, "a token is required"},
		{"POST", "/v2/repository/models/sum/unload", "", "Bearer wrong", 401, "not accepted"},
		{"GET", "/v2/models/sum", "", "Bearer secret", 200, "inputs"},
	} {
		var h []string
		if c.auth != "" {
			h = []string{"Authorization", c.auth}
		}
		code, _, body := e.do(c.method, c.path, c.body, h...)
		if code != c.wantCode || !strings.Contains(string(body), c.want) {
			t.Errorf("%s %s (Authorization %q): HTTP %d %s, want %d %q", c.method, c.path, c.auth, code, body, c.wantCode, c.want)
		}
	}
	if len(checked) == 0 || checked[0] != "wrong" {
		t.Errorf("tokens checked %q, want the one sent first", checked)
	}
}

// TestOutputChecked: a Service answering a tensor whose data disagrees with
// its shape is a server error, not a malformed response.
func TestOutputChecked(t *testing.T) {
	resp := &serve.Response{Outputs: []serve.Tensor{{Name: "y", Datatype: serve.FP32, Shape: []int64{3}, Data: []float32{1, 2}}}}
	err := finishResponse(&serve.Request{Model: "m", ID: "a"}, resp)
	if err == nil || !strings.Contains(err.Error(), `output "y": 2 values for shape [3] (3 expected)`) {
		t.Errorf("finishResponse = %v, want the output's count error", err)
	}
	resp.Outputs[0].Data = []float64{1, 2, 3}
	if err := finishResponse(&serve.Request{Model: "m"}, resp); err == nil || !strings.Contains(err.Error(), "data of Go type []float64 for datatype FP32") {
		t.Errorf("finishResponse = %v, want the Go type error", err)
	}
}

// TestBrowserRefused: without tokens (on loopback), a request a web page
// could send is refused, and health checks still answer.
func TestBrowserRefused(t *testing.T) {
	e := newRESTEnv(t, Options{})
	for _, c := range []struct {
		method, path string
		header       []string
		wantCode     int
		want         string
	}{
		{"POST", "/v2/repository/models/sum/unload", []string{"Origin", "https://example.com"}, 403, `refusing a request from a web page (Origin "https://example.com")`},
		{"GET", "/v2/models/sum", []string{"Host", "attacker.example:8000"}, 403, `refusing a request for host "attacker.example:8000"`},
		{"GET", "/v2/health/ready", []string{"Origin", "https://example.com"}, 200, `"ready"`},
		{"GET", "/v2/models/sum", []string{"Host", "localhost:8000"}, 200, `"inputs"`},
	} {
		req, err := http.NewRequest(c.method, e.srv.URL+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(c.header[0], c.header[1])
		if c.header[0] == "Host" {
			req.Host = c.header[1]
		}
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var eb Error
		_ = json.Unmarshal(b, &eb)
		if resp.StatusCode != c.wantCode || !strings.Contains(string(b)+eb.Error, c.want) {
			t.Errorf("%s %s %v: HTTP %d %s, want %d %q", c.method, c.path, c.header, resp.StatusCode, b, c.wantCode, c.want)
		}
	}
	if !e.svc.loaded["sum"] {
		t.Error("the refused unload unloaded the model")
	}
}

// The request of the binary tensor data extension's example (Triton's
// docs/protocol/extension_binary_data.md), verbatim: its inputs follow the
// JSON as 19 bytes of binary data, and output0 is asked for as binary.
const binaryExampleJSON = `{
  "model_name" : "mymodel",
  "inputs" : [
    {
      "name" : "input0",
      "shape" : [ 2, 2 ],
      "datatype" : "UINT32",
      "parameters" : {
        "binary_data_size" : 16
      }
    },
    {
      "name" : "input1",
      "shape" : [ 3 ],
      "datatype" : "BOOL",
      "parameters" : {
        "binary_data_size" : 3
      }
    }
  ],
  "outputs" : [
    {
      "name" : "output0",
      "parameters" : {
        "binary_data" : true
      }
    }
  ]
}`

// postBinary sends a JSON object followed by binary data with the
// Inference-Header-Content-Length header.
func (e *restEnv) postBinary(path, js string, bin []byte, headerLen string) (*http.Response, []byte) {
	e.t.Helper()
	req, err := http.NewRequest("POST", e.srv.URL+path, bytes.NewReader(append([]byte(js), bin...)))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	if headerLen == "" {
		headerLen = strconv.Itoa(len(js))
	}
	req.Header.Set("Inference-Header-Content-Length", headerLen)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp, b
}

// TestBinaryExtension runs the binary tensor data extension's example and
// checks the response is laid out as the extension's example response.
func TestBinaryExtension(t *testing.T) {
	e := newRESTEnv(t, Options{})
	bin := append(encodeRaw(serve.Uint32, []uint32{1, 2, 3, 4}), 1, 0, 1)
	resp, body := e.postBinary("/v2/models/mymodel/infer", binaryExampleJSON, bin, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP %d %s", resp.StatusCode, body)
	}
	hl, err := strconv.Atoi(resp.Header.Get("Inference-Header-Content-Length"))
	if err != nil || hl > len(body) || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("headers %v for a body of %d bytes", resp.Header, len(body))
	}
	jsonEqual(t, body[:hl], `{"model_name":"mymodel","outputs":[{"name":"output0","shape":[3,2],"datatype":"FP32","parameters":{"binary_data_size":24}}]}`)
	if got, want := body[hl:], encodeRaw(serve.FP32, []float32{1, 1.1, 2, 2.1, 3, 3.1}); !bytes.Equal(got, want) {
		t.Errorf("binary output %x, want %x", got, want)
	}
	if in := e.svc.lastRequest().Inputs; !reflect.DeepEqual(in[0].Data, []uint32{1, 2, 3, 4}) || !reflect.DeepEqual(in[1].Data, []bool{true, false, true}) {
		t.Errorf("inputs decoded to %v and %v", in[0].Data, in[1].Data)
	}

	// binary_data_output asks for every output in binary, unless one says otherwise.
	js := `{"parameters":{"binary_data_output":true},"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}],
		"outputs":[{"name":"sum"},{"name":"double","parameters":{"binary_data":false}}]}`
	code, ctype, body := e.do("POST", "/v2/models/sum/infer", js)
	if code != 200 || ctype != "application/octet-stream" {
		t.Fatalf("binary_data_output: HTTP %d %s", code, ctype)
	}
	sum := encodeRaw(serve.FP64, []float64{10})
	hl = len(body) - len(sum)
	jsonEqual(t, body[:hl], `{"model_name":"sum","outputs":[{"name":"sum","datatype":"FP64","shape":[1],"parameters":{"binary_data_size":8}},
		{"name":"double","datatype":"FP32","shape":[1,4],"data":[2,4,6,8]}]}`)
	if !bytes.Equal(body[hl:], sum) {
		t.Errorf("binary sum %x, want %x", body[hl:], sum)
	}

	for _, c := range []struct {
		name, js  string
		bin       []byte
		headerLen string
		want      string
	}{
		{"header past the body", binaryExampleJSON, bin, "100000", "Inference-Header-Content-Length: 100000 is more than the body's"},
		{"header not a number", binaryExampleJSON, bin, "abc", `Inference-Header-Content-Length: want the length in bytes of the JSON object that begins the body, got "abc"`},
		{"too little binary data", binaryExampleJSON, bin[:18], "", "inputs[1].parameters.binary_data_size: want a byte count of at most 2 (the binary data left after the inputs before), got 3"},
		{"binary data left over", binaryExampleJSON, append(bin, 9), "", "request body: 1 bytes of binary data after the inputs' binary_data_size bytes (19)"},
		{"wrong size for the shape", strings.Replace(binaryExampleJSON, `"binary_data_size" : 16`, `"binary_data_size" : 12`, 1), bin[4:], "", "inputs[0] (binary data): 12 bytes for shape [2,2] of UINT32 (16 expected: 4 values of 4 bytes)"},
		{"data and binary", `{"inputs":[{"name":"x","shape":[1],"datatype":"UINT8","parameters":{"binary_data_size":1},"data":[1]}]}`, []byte{1}, "", "inputs[0].data: given with binary_data_size"},
		{"binary_data not a bool", `{"inputs":[],"outputs":[{"name":"y","parameters":{"binary_data":1}}]}`, nil, "", "outputs[0].parameters.binary_data: want true or false, got 1"},
	} {
		resp, body := e.postBinary("/v2/models/mymodel/infer", c.js, c.bin, c.headerLen)
		var eb Error
		_ = json.Unmarshal(body, &eb)
		if resp.StatusCode != 400 || !strings.Contains(eb.Error, c.want) {
			t.Errorf("%s: HTTP %d %q\nwant 400 %q", c.name, resp.StatusCode, eb.Error, c.want)
		}
	}
}

// TestConcurrentInfer: requests in parallel each get their own answer (the
// pooled request and response buffers are never shared).
func TestConcurrentInfer(t *testing.T) {
	e := newRESTEnv(t, Options{})
	const workers, each = 8, 40
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := range each {
				v := strconv.Itoa(w*1000 + i)
				n := 1 + (w*7+i)%300 // sizes differ, so buffers grow and are reused
				data := strings.Repeat(v+",", n-1) + v
				body := `{"id":"` + v + `","inputs":[{"name":"t","shape":[` + strconv.Itoa(n) + `],"datatype":"INT32","data":[` + data + `]}]}`
				resp, err := e.srv.Client().Post(e.srv.URL+"/v2/models/identity/infer", "application/json", strings.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				want := `{"model_name":"identity","id":"` + v + `","outputs":[{"name":"t","datatype":"INT32","shape":[` + strconv.Itoa(n) + `],"data":[` + data + `]}]}` + "\n"
				if string(b) != want {
					errs <- fmt.Errorf("request %s: got %.200s\nwant %.200s", v, b, want)
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
