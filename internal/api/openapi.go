package api

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/virga-ml/virga"
)

// route describes one operation for the OpenAPI document.
type route struct {
	method, path, summary string
	body, reply           string // schema names, "" for none
	stream                string // media type of a streamed reply
}

// apiRoutes lists every operation the server serves; TestOpenAPIMatchesRoutes
// checks that it agrees with the router.
var apiRoutes = []route{
	{"get", "/api/v1/health", "Server health and version", "", "Health", ""},
	{"get", "/metrics", "The control plane's Prometheus metrics, in the text exposition format (docs/operations.md lists them)", "", "", "text/plain"},
	{"post", "/api/v1/experiments", "Submit an experiment file; 400 lists its problems with positions", "SubmitRequest", "Experiment", ""},
	{"post", "/api/v1/validate", "Validate an experiment file without submitting it", "SubmitRequest", "Object", ""},
	{"get", "/api/v1/experiments", "List experiments, newest first (query: state=ACTIVE,PAUSED; limit=N)", "", "ExperimentViewList", ""},
	{"get", "/api/v1/experiments/{id}", "One experiment with its summary and spec", "", "ExperimentView", ""},
	{"post", "/api/v1/experiments/{id}/{op}", "Stop, pause or resume an experiment (op: stop|pause|resume)", "", "Experiment", ""},
	{"get", "/api/v1/experiments/{id}/trials", "An experiment's trials in order, with what each has cost", "", "TrialList", ""},
	{"post", "/api/v1/experiments/{id}/trials", "Ask: create a trial of an API-driven experiment (no entrypoint)", "", "Asked", ""},
	{"get", "/api/v1/experiments/{id}/best", "The best trial and its metrics at its best step", "", "BestView", ""},
	{"get", "/api/v1/experiments/{id}/events", "Recorded transitions (query: after=ID)", "", "EventList", ""},
	{"get", "/api/v1/experiments/{id}/watch", "Live progress as server-sent events: snapshot, update..., end", "", "", "text/event-stream"},
	{"get", "/api/v1/calibration", "Calibration pairs: each completed experiment submitted with an estimate, the estimate's plan beside the run's wall time and cost, newest first (query: name=NAME)", "", "CalibrationPairList", ""},
	{"get", "/api/v1/trials/{id}", "One trial with its attempts", "", "TrialView", ""},
	{"get", "/api/v1/trials/{id}/metrics", "A trial's reports ordered by step (query: after=STEP)", "", "MetricList", ""},
	{"get", "/api/v1/trials/{id}/checkpoints", "A trial's retained checkpoints", "", "CheckpointList", ""},
	{"get", "/api/v1/trials/{id}/logs", "A trial's output, all attempts (query: follow=true streams until it ends; attempt=N only attempt number N's, without a header)", "", "", "text/plain"},
	{"post", "/api/v1/attempts/{id}/report", "Report metrics of an attempt (at most 256, names of 1-250 bytes); the reply says continue or stop; 404 if no attempt has the ID; 409 if it is no longer running; 422 if the checkpoint directory holds what a checkpoint cannot", "Report", "ReportReply", ""},
	{"post", "/api/v1/attempts/{id}/checkpoints", "Upload a remote attempt's checkpoint directory (body: application/x-tar); a later report names it by the returned id", "tar", "CheckpointInfo", ""},
	{"get", "/api/v1/attempts/{id}/checkpoints/{checkpoint}", "Download the checkpoint a remote attempt resumes from, as application/x-tar", "", "", "application/x-tar"},
	{"post", "/api/v1/attempts/{id}/complete", "Tell: end an API-driven attempt (ok: completed, else failed)", "CompleteRequest", "Trial", ""},
	{"get", "/api/v1/models", "List the registered models, by name, with their aliases", "", "ModelSummaryList", ""},
	{"get", "/api/v1/models/{name}", "One model: every version, oldest first, and every alias", "", "ModelView", ""},
	{"post", "/api/v1/models/{name}/versions", "Register the next version of a model: the model/ folder of an experiment's best trial's or a trial's latest checkpoint that has one (JSON body), or a model directory uploaded as application/x-tar (query: description=); 409 if no checkpoint holds a model; 422 if its virga-model.json is missing or wrong", "RegisterModelRequest", "ModelVersion", ""},
	{"get", "/api/v1/models/{name}/versions/{version}", "One version (version: a number, latest, or an alias) with the aliases that point at it", "", "ModelVersionView", ""},
	{"delete", "/api/v1/models/{name}/versions/{version}", "Delete a version and its files (unless another version has the same); 409 while an alias points at it", "", "ModelVersion", ""},
	{"get", "/api/v1/models/{name}/versions/{version}/files", "Download a version's model directory as application/x-tar (version: a number, latest, or an alias)", "", "", "application/x-tar"},
	{"put", "/api/v1/models/{name}/aliases/{alias}", "Point an alias at a version, creating or moving it", "AliasRequest", "ModelAlias", ""},
	{"delete", "/api/v1/models/{name}/aliases/{alias}", "Delete an alias", "", "ModelAlias", ""},
}

func obj(props map[string]any, required ...string) map[string]any {
	m := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		m["required"] = required
	}
	return m
}

func ref(name string) map[string]any { return map[string]any{"$ref": "#/components/schemas/" + name} }

func list(name string) map[string]any { return map[string]any{"type": "array", "items": ref(name)} }

var (
	tInt    = map[string]any{"type": "integer", "format": "int64"}
	tNum    = map[string]any{"type": "number"}
	tStr    = map[string]any{"type": "string"}
	tBool   = map[string]any{"type": "boolean"}
	tTime   = map[string]any{"type": "string", "format": "date-time"}
	tObject = map[string]any{"type": "object", "additionalProperties": true}

	tCost     = map[string]any{"type": "number", "description": "USD spent so far: every attempt's cost, running ones up to the moment of the answer"}
	tLostCost = map[string]any{"type": "number", "description": "USD of cost that preemptions threw away (run time after the last checkpoint)"}
)

// enum is the strings of a list of string constants.
func enum[S ~string](vs []S) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

func schemas() map[string]any {
	return map[string]any{
		"Object": tObject,
		"Error": obj(map[string]any{"error": tStr, "problems": map[string]any{"type": "array", "items": obj(map[string]any{
			"File": tStr, "Line": tInt, "Col": tInt, "Path": tStr, "Msg": tStr})}}, "error"),
		"Health":        obj(map[string]any{"status": tStr, "version": tStr}),
		"SubmitRequest": obj(map[string]any{"file": tStr, "spec": map[string]any{"type": "string", "description": "the experiment file's YAML text"}, "estimate": map[string]any{"type": "object", "description": "optional forecast of the run (virga estimate --json), kept as the experiment.estimate event"}}, "spec"),
		"Experiment": obj(map[string]any{"id": tInt, "name": tStr, "state": map[string]any{"type": "string",
			"enum": []string{"ACTIVE", "PAUSED", "STOPPING", "COMPLETED", "STOPPED", "FAILED"}},
			"spec_file": tStr, "message": tStr, "created_at": tTime, "updated_at": tTime, "ended_at": tTime,
			"reason": map[string]any{"type": "string", "description": "why it is in its state, a stable word to decide on (message says it for people): " +
				"why it ended, or why it is paused or stopping (empty while it runs); a FAILED experiment's says whether it had no result or could not go on",
				"enum": enum(virga.ExperimentReasons())}}),
		"ExperimentView": map[string]any{"allOf": []any{ref("Experiment"), obj(map[string]any{
			"objective": obj(map[string]any{"metric": tStr, "direction": tStr}), "max_trials": tInt,
			"counts": map[string]any{"type": "object", "additionalProperties": tInt}, "best": ref("Trial"), "spec": tStr,
			"cost": tCost, "lost_cost": tLostCost, "pools": list("PoolSpend")})}},
		"PoolSpend": obj(map[string]any{"pool": map[string]any{"type": "string", "description": "the pool's name; empty for the backend's default pool"},
			"attempts": tInt, "cost": tCost, "lost_cost": tLostCost}),
		"ExperimentViewList": list("ExperimentView"),
		"Trial": obj(map[string]any{"id": tInt, "experiment_id": tInt, "seq": tInt, "request": tStr, "state": map[string]any{"type": "string",
			"enum": []string{"QUEUED", "RUNNING", "PAUSED", "COMPLETED", "STOPPED", "FAILED"}}, "hparams": tObject,
			"attempts": tInt, "restarts": tInt, "step": tInt, "latest": tNum, "best": tNum, "best_step": tInt, "checkpoint": tStr,
			"parent": map[string]any{"type": "integer", "format": "int64",
				"description": "the trial whose checkpoint parent_checkpoint, taken at parent_step, this trial continued from; absent when it started from scratch"},
			"parent_checkpoint": tStr, "parent_step": tInt, "prediction": ref("Prediction"),
			"reason": map[string]any{"type": "string", "description": "why it is in its state, a stable word to decide on (message says it for people); " +
				"e.g. PausedBySearcher (only the searcher resumes it), Moving (its attempt stops to run elsewhere), BudgetSpent",
				"enum": enum(virga.TrialReasons())},
			"message": tStr, "created_at": tTime, "updated_at": tTime, "ended_at": tTime}),
		"Prediction": map[string]any{"type": "object", "description": "the searcher's forecast of the trial's objective at step horizon, " +
			"from its learning curve up to step: mean and standard deviation, and the probability of ending better than the best so far",
			"properties": map[string]any{"step": tInt, "horizon": tInt, "mean": tNum, "std": tNum, "prob_better": tNum}},
		"TrialSummary": map[string]any{"allOf": []any{ref("Trial"), obj(map[string]any{"cost": tCost, "lost_cost": tLostCost})}},
		"TrialList":    list("TrialSummary"),
		"Attempt": obj(map[string]any{"id": tInt, "trial_id": tInt, "number": tInt, "state": tStr, "outcome": tStr, "backend": tStr,
			"pool":      map[string]any{"type": "string", "description": "the capacity pool it ran on; absent for the backend's default pool"},
			"cost":      map[string]any{"type": "number", "description": "USD billed for its run: final once it ended, up to the moment of the answer while it runs"},
			"lost_cost": map[string]any{"type": "number", "description": "USD of cost spent after its last checkpoint when it was preempted; absent otherwise"},
			"pid":       tInt, "exit_code": tInt, "signal": tStr, "restored": tStr, "dir": tStr, "message": tStr,
			"created_at": tTime, "started_at": tTime, "ended_at": tTime}),
		"TrialView": map[string]any{"allOf": []any{ref("Trial"), obj(map[string]any{"attempt_list": list("Attempt"),
			"cost": tCost, "lost_cost": tLostCost})}},
		"Metric":         obj(map[string]any{"trial_id": tInt, "attempt_id": tInt, "step": tInt, "values": map[string]any{"type": "object", "additionalProperties": tNum}, "time": tTime}),
		"MetricList":     list("Metric"),
		"Checkpoint":     obj(map[string]any{"id": tStr, "trial_id": tInt, "attempt_id": tInt, "step": tInt, "size": tInt, "files": tInt, "time": tTime}),
		"CheckpointList": list("Checkpoint"),
		"Event": obj(map[string]any{"id": tInt, "experiment_id": tInt, "trial_id": tInt, "attempt_id": tInt,
			"kind": map[string]any{"type": "string", "enum": enum(virga.EventKinds())}, "message": tStr, "time": tTime}),
		"EventList": list("Event"),
		"CalibrationPair": obj(map[string]any{"experiment_id": tInt, "name": tStr, "entrypoint": map[string]any{"type": "array", "items": tStr}, "ended_at": tTime,
			"predicted": obj(map[string]any{"plan": tStr, "wall": tInt, "wall_p10": tInt, "wall_p50": tInt, "wall_p90": tInt,
				"cost": tNum, "cost_p10": tNum, "cost_p50": tNum, "cost_p90": tNum,
				"shift": map[string]any{"type": "number", "description": "the factor the estimate's calibration had applied (1: none)"}}),
			"wall": map[string]any{"type": "integer", "format": "int64", "description": "the run's wall time, submission to end, in nanoseconds"},
			"cost": map[string]any{"type": "number", "description": "USD all its attempts cost"}}),
		"CalibrationPairList": list("CalibrationPair"),
		"BestView":            obj(map[string]any{"objective": tObject, "trial": ref("Trial"), "metrics": ref("Metric"), "checkpoint": ref("Checkpoint")}),
		"Asked":               obj(map[string]any{"trial": ref("Trial"), "attempt_id": tInt, "token": tStr}),
		"Report":              obj(map[string]any{"step": tInt, "metrics": map[string]any{"type": "object", "additionalProperties": tNum}, "checkpoint": tStr}, "step", "metrics"),
		"CheckpointInfo":      obj(map[string]any{"id": tStr, "size": tInt, "files": tInt}),
		"ReportReply":         obj(map[string]any{"decision": map[string]any{"type": "string", "enum": []string{"continue", "stop"}}}),
		"CompleteRequest":     obj(map[string]any{"ok": tBool}),
		"ModelTensor":         obj(map[string]any{"name": tStr, "datatype": tStr, "shape": map[string]any{"type": "array", "items": tInt, "description": "-1 is a variable dimension"}}),
		"ModelSignature":      obj(map[string]any{"inputs": list("ModelTensor"), "outputs": list("ModelTensor")}),
		"ModelVersion": obj(map[string]any{"name": tStr, "version": tInt,
			"files_id": map[string]any{"type": "string", "description": "content ID of the model directory in the checkpoint storage"},
			"size":     tInt, "files": tInt, "format": tStr, "signature": ref("ModelSignature"),
			"experiment_id": tInt, "trial_id": tInt, "step": tInt, "checkpoint_id": tStr, "hparams": tObject,
			"metrics":     map[string]any{"type": "object", "additionalProperties": tNum, "description": "the trial's report at step"},
			"description": tStr, "created_at": tTime}),
		"ModelVersionView":     map[string]any{"allOf": []any{ref("ModelVersion"), obj(map[string]any{"aliases": map[string]any{"type": "array", "items": tStr}})}},
		"ModelAlias":           obj(map[string]any{"name": tStr, "alias": tStr, "version": tInt, "updated_at": tTime}),
		"Model":                obj(map[string]any{"name": tStr, "versions": tInt, "latest": tInt, "updated_at": tTime}),
		"ModelSummary":         map[string]any{"allOf": []any{ref("Model"), obj(map[string]any{"aliases": map[string]any{"type": "object", "additionalProperties": tInt}})}},
		"ModelSummaryList":     list("ModelSummary"),
		"ModelView":            obj(map[string]any{"name": tStr, "versions": list("ModelVersion"), "aliases": list("ModelAlias")}),
		"RegisterModelRequest": obj(map[string]any{"experiment_id": tInt, "best": tBool, "trial_id": tInt, "description": tStr}),
		"AliasRequest":         obj(map[string]any{"version": tInt}, "version"),
	}
}

func errorReply(what string) map[string]any {
	return map[string]any{"description": what, "content": map[string]any{"application/json": map[string]any{"schema": ref("Error")}}}
}

// errorStatuses returns the error statuses an operation documents beside
// its default, by code.
func errorStatuses(r route) map[string]string {
	out := map[string]string{}
	if r.body != "" && r.body != "tar" {
		out["400"] = "the body is not one JSON value of the schema (nothing may follow it), or breaks a limit; the error says which"
		out["413"] = fmt.Sprintf("the body is over %d bytes", MaxBody)
	}
	if strings.HasPrefix(r.path, "/api/v1/attempts/{id}/") {
		out["404"] = "no attempt has this ID"
		out["409"] = "the attempt is no longer running (it ended, or the trial runs as another attempt)"
	}
	if strings.HasPrefix(r.path, "/api/v1/models/") {
		out["400"] = "a bad model name, version or alias, or body; the error names the field"
		out["404"] = "no such model, version, alias, experiment or trial"
		if r.method != "get" {
			out["409"] = "the change contradicts the registry's state (the error says how)"
		}
	}
	if r.path == "/api/v1/models/{name}/versions" && r.method == "post" {
		out["422"] = "the model directory's virga-model.json is missing or wrong, or the archive is malformed"
	}
	if r.path == "/api/v1/attempts/{id}/report" {
		out["422"] = "the checkpoint directory holds what a checkpoint cannot, or names a checkpoint not uploaded"
	}
	return out
}

// OpenAPI returns the OpenAPI 3.0 document of the API.
func OpenAPI(version string) map[string]any {
	paths := map[string]any{}
	for _, r := range apiRoutes {
		op := map[string]any{"summary": r.summary, "responses": map[string]any{}}
		resp := op["responses"].(map[string]any)
		ok := map[string]any{"description": "success"}
		switch {
		case r.stream != "":
			ok["content"] = map[string]any{r.stream: map[string]any{"schema": tStr}}
		case r.reply != "":
			ok["content"] = map[string]any{"application/json": map[string]any{"schema": ref(r.reply)}}
		}
		code := "200"
		if r.method == "post" && (r.path == "/api/v1/experiments" || strings.HasSuffix(r.path, "/trials") || strings.HasSuffix(r.path, "/versions")) {
			code = "201"
		}
		resp[code] = ok
		for code, what := range errorStatuses(r) {
			resp[code] = errorReply(what)
		}
		resp["default"] = errorReply("error")
		if r.body == "tar" {
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{"application/x-tar": map[string]any{"schema": map[string]any{"type": "string", "format": "binary"}}}}
		} else if r.body != "" {
			content := map[string]any{"application/json": map[string]any{"schema": ref(r.body)}}
			if r.body == "RegisterModelRequest" {
				content["application/x-tar"] = map[string]any{"schema": map[string]any{"type": "string", "format": "binary"}}
			}
			op["requestBody"] = map[string]any{"required": true, "content": content}
		}
		var params []any
		for _, name := range []string{"id", "op", "checkpoint", "name", "version", "alias"} {
			if strings.Contains(r.path, "{"+name+"}") {
				sch := tInt
				if name != "id" && name != "op" {
					sch = tStr
				}
				if name == "op" {
					sch = map[string]any{"type": "string", "enum": []string{"stop", "pause", "resume"}}
				}
				params = append(params, map[string]any{"name": name, "in": "path", "required": true, "schema": sch})
			}
		}
		if params != nil {
			op["parameters"] = params
		}
		item, _ := paths[r.path].(map[string]any)
		if item == nil {
			item = map[string]any{}
			paths[r.path] = item
		}
		item[r.method] = op
	}
	return map[string]any{
		"openapi": "3.0.3",
		"info": map[string]any{"title": "Virga API", "version": version,
			"description": "Experiments, trials, metrics, checkpoints and the model registry. Send 'Authorization: Bearer <token>' when the server requires it. Without a token (a server on loopback), a request with an Origin header, for a non-loopback Host, or a POST, PUT or DELETE without 'Content-Type: application/json' (or application/x-tar for an upload) is refused (403): a web page could send it."},
		"paths":      paths,
		"components": map[string]any{"schemas": schemas(), "securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}}},
		"security":   []any{map[string]any{"bearer": []any{}}},
	}
}

func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, OpenAPI(s.cfg.Version))
}
