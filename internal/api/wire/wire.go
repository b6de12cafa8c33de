// Package wire holds the types that cross Virga's HTTP API: the bodies of
// requests and responses, the operations on an experiment and the events the
// watch stream sends. The server (internal/api, internal/control) and the
// client (internal/api/client) both use them from here; it imports neither,
// nor the store or any backend, so a client links none of the control plane.
package wire

import (
	"encoding/json"
	"fmt"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/forecast"
	"github.com/virga-ml/virga/internal/spec"
)

// Error is the body of every error response.
type Error struct {
	Error    string         `json:"error"`
	Problems []spec.Problem `json:"problems,omitempty"`
}

// Health is the body of /api/v1/health.
type Health struct {
	Status  string `json:"status"`
	Version string `json:"version"`
}

// SubmitRequest is the body of POST /api/v1/experiments and /api/v1/validate.
type SubmitRequest struct {
	File string `json:"file"` // the file name, for messages
	Spec string `json:"spec"` // the experiment file's text
	// Estimate, optional, is the forecast of the run made before it (virga
	// estimate's JSON); it is kept as the experiment's "experiment.estimate"
	// event.
	Estimate json.RawMessage `json:"estimate,omitempty"`
}

// ExperimentView is an experiment with its progress summary and what it has
// cost (Spend: every attempt of every trial) and on which pools.
type ExperimentView struct {
	*virga.Experiment
	Objective spec.Objective           `json:"objective"`
	MaxTrials int                      `json:"max_trials"`
	Counts    map[virga.TrialState]int `json:"counts"`
	Best      *virga.Trial             `json:"best,omitempty"`
	SpecText  string                   `json:"spec,omitempty"`
	Spend
	// Pools breaks Spend down by the pool the attempts ran on, by pool name.
	Pools []PoolSpend `json:"pools,omitempty"`
	// Forecast is what is left of the run while it is active (and
	// something can be said): time and money to the end, P(deadline),
	// P(budget).
	Forecast *forecast.Forecast `json:"forecast,omitempty"`
}

// BestView is the body of /api/v1/experiments/{id}/best.
type BestView struct {
	Objective spec.Objective `json:"objective"`
	Trial     *virga.Trial   `json:"trial"`
	Metrics   *virga.Metric  `json:"metrics,omitempty"` // the report at the trial's best step
	// Checkpoint is the checkpoint saved at the best step, if it was (it is
	// kept beyond keep_last).
	Checkpoint *virga.Checkpoint `json:"checkpoint,omitempty"`
}

// TrialView is a trial with its attempts (a running one's Cost priced up to
// the moment of the answer) and what they cost together.
type TrialView struct {
	*virga.Trial
	AttemptList []*virga.Attempt `json:"attempt_list"`
	Spend
}

// ReportReply is the body of a successful report.
type ReportReply struct {
	Decision string `json:"decision"`
}

// CheckpointInfo describes an uploaded checkpoint (an empty ID: the
// directory was empty).
type CheckpointInfo struct {
	ID    string `json:"id"`
	Size  int64  `json:"size"`
	Files int    `json:"files"`
}

// CompleteRequest ends an API-driven attempt.
type CompleteRequest struct {
	OK bool `json:"ok"`
}

// Spend is what has been spent so far, in USD: the cost of every attempt, a
// running one's up to the moment of the answer.
type Spend struct {
	Cost float64 `json:"cost"`
	// LostCost is the part of Cost that preemptions threw away: what
	// preempted attempts cost after their last checkpoint.
	LostCost float64 `json:"lost_cost"`
}

// Add counts an attempt's cost and lost cost.
func (sp *Spend) Add(a *virga.Attempt) {
	sp.Cost += a.Cost
	sp.LostCost += a.LostCost
}

// PoolSpend is what an experiment's attempts spent on one capacity pool.
type PoolSpend struct {
	Pool     string `json:"pool"` // "" for the backend's default pool
	Attempts int    `json:"attempts"`
	Spend
}

// TrialSummary is a trial with what its attempts have cost: an element of
// an experiment's trial list.
type TrialSummary struct {
	*virga.Trial
	Spend
}

// ModelSummary is one entry of GET /api/v1/models: a model, its versions and
// its aliases (alias name to version).
type ModelSummary struct {
	virga.Model
	Aliases map[string]int64 `json:"aliases"`
}

// ModelView is the body of GET /api/v1/models/{name}: every version, oldest
// first, and every alias.
type ModelView struct {
	Name     string                `json:"name"`
	Versions []*virga.ModelVersion `json:"versions"`
	Aliases  []virga.ModelAlias    `json:"aliases"`
}

// ModelVersionView is a version with the aliases that point at it.
type ModelVersionView struct {
	*virga.ModelVersion
	Aliases []string `json:"aliases"`
}

// RegisterModelRequest is the JSON body of POST
// /api/v1/models/{name}/versions: the model of an experiment's best trial
// (experiment_id with best) or of a trial (trial_id), from its latest
// checkpoint that holds one. A model directory is uploaded instead as a tar
// archive (Content-Type: application/x-tar, description in the query).
type RegisterModelRequest struct {
	ExperimentID int64  `json:"experiment_id,omitempty"`
	Best         bool   `json:"best,omitempty"`
	TrialID      int64  `json:"trial_id,omitempty"`
	Description  string `json:"description,omitempty"`
}

// AliasRequest is the body of PUT /api/v1/models/{name}/aliases/{alias}.
type AliasRequest struct {
	Version int64 `json:"version"`
}

// WatchSnapshot is the first server-sent event of a watch ("snapshot"); later
// "update" events carry an Update; "end" says the experiment ended.
type WatchSnapshot struct {
	Experiment ExperimentView `json:"experiment"`
	Trials     []*virga.Trial `json:"trials"`
}

// Update tells subscribers what changed in one committed iteration.
type Update struct {
	ExperimentID int64
	Experiment   *virga.Experiment // set when the experiment changed
	Trials       []*virga.Trial    // trials that changed
}

// Asked is a trial created through the API (ask/tell): no process is started;
// the caller reports with the attempt ID and the token, and ends it with Tell.
type Asked struct {
	Trial     *virga.Trial `json:"trial"`
	AttemptID int64        `json:"attempt_id"`
	Token     string       `json:"token"`
}

// Report is one metric report of an attempt.
type Report struct {
	Step    int64              `json:"step"`
	Metrics map[string]float64 `json:"metrics"`
	// Checkpoint names a checkpoint this attempt uploaded (UploadCheckpoint)
	// that holds the state up to Step: sent by the agent of a remote
	// attempt, whose directory the server cannot read.
	Checkpoint string `json:"checkpoint,omitempty"`
}

// Validate checks a report's content: a step >= 0 and metrics within
// virga.CheckMetrics's limits.
func (r *Report) Validate() error {
	if r.Step < 0 {
		return fmt.Errorf("step: must be >= 0 (got %d)", r.Step)
	}
	return virga.CheckMetrics(r.Metrics)
}

// Op is a user action on an experiment.
type Op string

// Operations.
const (
	OpStop   Op = "stop"
	OpPause  Op = "pause"
	OpResume Op = "resume"
)
