package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/checkpoint"
)

// modelTrainer is an experiment whose trials write a model directory (the
// trial's x in mlp.json) into their checkpoint and report loss = x, so the
// best trial is the one with the lowest x.
const modelTrainer = `name: models
entrypoint: [sh, -c, 'm="$VIRGA_CHECKPOINT_DIR/model" && mkdir -p "$m" && printf "{\"x\":${x}}" > "$m/mlp.json" && printf "{\"format\":\"virga.mlp/v1\",\"file\":\"mlp.json\",\"signature\":{\"inputs\":[{\"name\":\"pixels\",\"datatype\":\"FP32\",\"shape\":[-1,64]}],\"outputs\":[{\"name\":\"label\",\"datatype\":\"INT64\",\"shape\":[-1]}]}}" > "$m/virga-model.json" && echo "VIRGA_METRIC {\"step\":3,\"metrics\":{\"loss\":${x}}}"']
hyperparameters:
  x: {type: float, min: 0, max: 1}
searcher: random
objective: {metric: loss, direction: minimize}
max_trials: 3
max_concurrent: 3
seed: 5
`

func TestModelRegistryAPI(t *testing.T) {
	e := newEnv(t, false)
	exp := e.submit(modelTrainer)
	e.eventually("the experiment to complete", func() bool { return e.exp(exp.ID).State.Terminal() })
	if st := e.exp(exp.ID).State; st != virga.ExperimentCompleted {
		t.Fatalf("experiment %s, want COMPLETED", st)
	}
	var best wire.BestView
	e.want(http.StatusOK, "GET", fmt.Sprintf("/api/v1/experiments/%d/best", exp.ID), "", nil, &best)

	// Register the best trial's model, then another trial's.
	var v1, v2 virga.ModelVersion
	e.want(http.StatusCreated, "POST", "/api/v1/models/digits/versions", "",
		wire.RegisterModelRequest{ExperimentID: exp.ID, Best: true, Description: "best"}, &v1)
	if v1.Version != 1 || v1.TrialID != best.Trial.ID || v1.ExperimentID != exp.ID || v1.Step != 3 ||
		v1.Metrics["loss"] != *best.Trial.Best || v1.CheckpointID != best.Trial.Checkpoint || v1.Description != "best" {
		t.Errorf("registered %+v; want version 1 of the best trial %d", v1, best.Trial.ID)
	}
	var trials []*virga.Trial
	e.want(http.StatusOK, "GET", fmt.Sprintf("/api/v1/experiments/%d/trials", exp.ID), "", nil, &trials)
	other := trials[slices.IndexFunc(trials, func(t *virga.Trial) bool { return t.ID != best.Trial.ID })]
	e.want(http.StatusCreated, "POST", "/api/v1/models/digits/versions", "", wire.RegisterModelRequest{TrialID: other.ID}, &v2)
	if v2.Version != 2 || v2.TrialID != other.ID {
		t.Errorf("registered %+v; want version 2 of trial %d", v2, other.ID)
	}

	// Aliases, and the three ways to name a version.
	var a virga.ModelAlias
	e.want(http.StatusOK, "PUT", "/api/v1/models/digits/aliases/prod", "", wire.AliasRequest{Version: 1}, &a)
	if a.Version != 1 || a.Alias != "prod" {
		t.Errorf("alias %+v", a)
	}
	for ref, want := range map[string]int64{"latest": 2, "1": 1, "prod": 1} {
		var got wire.ModelVersionView
		e.want(http.StatusOK, "GET", "/api/v1/models/digits/versions/"+ref, "", nil, &got)
		if got.Version != want {
			t.Errorf("version %s = %d, want %d", ref, got.Version, want)
		}
		if want == 1 && !slices.Equal(got.Aliases, []string{"prod"}) {
			t.Errorf("version 1's aliases %v, want [prod]", got.Aliases)
		}
	}
	var list []wire.ModelSummary
	e.want(http.StatusOK, "GET", "/api/v1/models", "", nil, &list)
	if len(list) != 1 || list[0].Name != "digits" || list[0].Versions != 2 || list[0].Latest != 2 || list[0].Aliases["prod"] != 1 {
		t.Errorf("models %+v", list)
	}
	var mv wire.ModelView
	e.want(http.StatusOK, "GET", "/api/v1/models/digits", "", nil, &mv)
	if len(mv.Versions) != 2 || len(mv.Aliases) != 1 {
		t.Errorf("model %+v", mv)
	}

	// The files: the best trial's model/ folder.
	code, body := e.do("GET", "/api/v1/models/digits/versions/prod/files", "", nil)
	if code != http.StatusOK {
		t.Fatalf("download: HTTP %d %s", code, body)
	}
	dir := filepath.Join(t.TempDir(), "out")
	if _, err := checkpoint.ExtractArchive(bytes.NewReader(body), dir, -1); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "mlp.json"))
	if want := fmt.Sprintf(`{"x":%g}`, best.Trial.HParams["x"]); err != nil || string(got) != want {
		t.Errorf("downloaded mlp.json %q, %v; want %q", got, err, want)
	}

	// Uploading a directory.
	up := t.TempDir()
	os.WriteFile(filepath.Join(up, "mlp.json"), []byte("{}"), 0o644)
	os.WriteFile(filepath.Join(up, "virga-model.json"), []byte(`{"format":"onnx","file":"mlp.json","signature":{"inputs":[{"name":"x","datatype":"FP32","shape":[-1]}],"outputs":[{"name":"y","datatype":"FP32","shape":[-1]}]}}`), 0o644)
	var tarball bytes.Buffer
	if _, err := checkpoint.WriteArchive(&tarball, up); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", e.srv.URL+"/api/v1/models/other/versions?description=by+hand", bytes.NewReader(tarball.Bytes()))
	req.Header.Set("Content-Type", "application/x-tar")
	code, body = e.send(req)
	var v3 virga.ModelVersion
	if code != http.StatusCreated || json.Unmarshal(body, &v3) != nil || v3.Name != "other" || v3.Version != 1 || v3.Description != "by hand" || v3.Format != "onnx" {
		t.Errorf("upload: HTTP %d %s", code, body)
	}

	// Errors: 400 naming the field, 404, 409, 422.
	os.Remove(filepath.Join(up, "virga-model.json"))
	tarball.Reset()
	checkpoint.WriteArchive(&tarball, up)
	req, _ = http.NewRequest("POST", e.srv.URL+"/api/v1/models/other/versions", bytes.NewReader(tarball.Bytes()))
	req.Header.Set("Content-Type", "application/x-tar")
	if code, body = e.send(req); code != http.StatusUnprocessableEntity || !strings.Contains(string(body), "virga-model.json: missing") {
		t.Errorf("upload without a manifest: HTTP %d %s, want 422", code, body)
	}
	for _, tc := range []struct {
		method, path string
		body         any
		code         int
		msg          string
	}{
		{"POST", "/api/v1/models/digits/versions", wire.RegisterModelRequest{ExperimentID: exp.ID}, 400, "best: want true"},
		{"POST", "/api/v1/models/digits/versions", wire.RegisterModelRequest{ExperimentID: exp.ID, TrialID: 1, Best: true}, 400, "not both"},
		{"POST", "/api/v1/models/digits/versions", wire.RegisterModelRequest{}, 400, "experiment_id, trial_id: give one"},
		{"POST", "/api/v1/models/digits/versions", `{"trial": 1}`, 400, `unknown field \"trial\"`},
		{"POST", "/api/v1/models/bad%20name/versions", wire.RegisterModelRequest{TrialID: other.ID}, 400, "model name"},
		{"POST", "/api/v1/models/digits/versions", wire.RegisterModelRequest{TrialID: 9999}, 404, "trial 9999"},
		{"POST", "/api/v1/models/digits/versions", wire.RegisterModelRequest{ExperimentID: 9999, Best: true}, 404, "experiment 9999"},
		{"GET", "/api/v1/models/nothing", nil, 404, "no model named nothing"},
		{"GET", "/api/v1/models/nothing/versions/latest", nil, 404, "no model named nothing"},
		{"GET", "/api/v1/models/digits/versions/7", nil, 404, "version 7"},
		{"GET", "/api/v1/models/digits/versions/dev", nil, 404, `has no alias \"dev\"`},
		{"GET", "/api/v1/models/digits/versions/-1", nil, 400, "version: want a version number"},
		{"PUT", "/api/v1/models/digits/aliases/prod", wire.AliasRequest{Version: 9}, 404, "no version 9"},
		{"PUT", "/api/v1/models/digits/aliases/prod", wire.AliasRequest{}, 400, "version: want the number"},
		{"PUT", "/api/v1/models/digits/aliases/latest", wire.AliasRequest{Version: 1}, 400, "reserved"},
		{"PUT", "/api/v1/models/digits/aliases/9x", wire.AliasRequest{Version: 1}, 400, "must start with a letter"},
		{"DELETE", "/api/v1/models/digits/versions/1", nil, 409, "digits@prod still points at it"},
		{"DELETE", "/api/v1/models/digits/versions/prod", nil, 400, "version: want the number"},
		{"DELETE", "/api/v1/models/digits/aliases/dev", nil, 404, "no such alias"},
		{"PATCH", "/api/v1/models/digits/aliases/prod", nil, 405, "allowed: PUT, DELETE"},
	} {
		code, body := e.do(tc.method, tc.path, "", tc.body)
		if code != tc.code || !strings.Contains(string(body), tc.msg) {
			t.Errorf("%s %s: HTTP %d %s; want %d with %q", tc.method, tc.path, code, body, tc.code, tc.msg)
		}
	}

	// Move the alias, then version 1 may go; its files with it.
	e.want(http.StatusOK, "PUT", "/api/v1/models/digits/aliases/prod", "", wire.AliasRequest{Version: 2}, nil)
	e.want(http.StatusOK, "DELETE", "/api/v1/models/digits/versions/1", "", nil, nil)
	if _, err := os.Stat(e.ck.Path(v1.FilesID)); !os.IsNotExist(err) {
		t.Errorf("version 1's files are still stored: %v", err)
	}
	e.want(http.StatusOK, "DELETE", "/api/v1/models/digits/aliases/prod", "", nil, nil)
	e.want(http.StatusNotFound, "GET", "/api/v1/models/digits/versions/prod", "", nil, nil)
}

// TestRegisterTrialWithoutModel: a trial whose checkpoints hold no model/ is 409, saying so.
func TestRegisterTrialWithoutModel(t *testing.T) {
	e := newEnv(t, false)
	exp := e.submit(strings.Replace(modelTrainer, `m="$VIRGA_CHECKPOINT_DIR/model"`, `m="$VIRGA_CHECKPOINT_DIR/elsewhere"`, 1))
	e.eventually("the experiment to complete", func() bool { return e.exp(exp.ID).State.Terminal() })
	code, body := e.do("POST", "/api/v1/models/digits/versions", "", wire.RegisterModelRequest{ExperimentID: exp.ID, Best: true})
	if code != http.StatusConflict || !strings.Contains(string(body), "has a model/ folder holding virga-model.json") {
		t.Errorf("register without a model: HTTP %d %s; want 409 saying no checkpoint has a model/", code, body)
	}
}
