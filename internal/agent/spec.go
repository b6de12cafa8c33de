// Package agent runs one attempt of a trial on a compute node that is not the
// server's machine (a Slurm node, a Kubernetes pod): `virga agent`. The
// remote backends start it with the attempt's Spec in the environment
// (EnvSpec). On each node of the attempt's gang it fetches the checkpoint to
// resume from the server, starts the node's trial processes with the trial
// protocol's variables and PyTorch's rendezvous variables, and on the first
// node relays the trial's reports to the server, uploading the checkpoint
// directory first whenever it changed. It speaks to the server only over
// HTTP with the trial's token, which may write that trial's reports and
// checkpoints and nothing else.
package agent

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/virga-ml/virga/internal/backend"
)

// Environment variables the remote backends set for the agent.
const (
	// EnvSpec holds the attempt's Spec (Encode).
	EnvSpec = "VIRGA_AGENT_SPEC"
	// EnvNodeRank is this node's rank in the gang (0 first), when the
	// backend knows it (Kubernetes: the pod's index). Under Slurm the agent
	// reads SLURM_NODEID instead.
	EnvNodeRank = "VIRGA_NODE_RANK"
	// EnvMasterAddr is the address of the gang's first node, when the
	// backend knows it (Kubernetes: the first pod's name under the headless
	// Service). Under Slurm the agent takes the first host of
	// SLURM_JOB_NODELIST.
	EnvMasterAddr = "VIRGA_MASTER_ADDR"
)

// Spec is what the agent needs to run one attempt.
type Spec struct {
	AttemptID    int64             `json:"attempt_id"`
	TrialID      int64             `json:"trial_id"`
	ExperimentID int64             `json:"experiment_id"`
	Argv         []string          `json:"argv"`
	Env          map[string]string `json:"env,omitempty"`
	Workdir      string            `json:"workdir,omitempty"`
	// Server is the server's base URL as the node reaches it, e.g.
	// http://virga.example:7070.
	Server string `json:"server"`
	// Token is the trial's token.
	Token string `json:"token"`
	// Checkpoint is the checkpoint to restore first; empty for none.
	Checkpoint string `json:"checkpoint,omitempty"`
	// Nodes and ProcessesPerNode shape the gang; MasterPort is where rank 0
	// listens for the rendezvous.
	Nodes            int `json:"nodes"`
	ProcessesPerNode int `json:"processes_per_node"`
	MasterPort       int `json:"master_port"`
	// StopGrace is the time between SIGTERM and SIGKILL of the trial's
	// processes when the agent itself is told to stop.
	StopGrace time.Duration `json:"stop_grace"`
}

// FromStart builds the agent's Spec for a start.
func FromStart(s *backend.StartSpec) *Spec {
	server, _, ok := strings.Cut(s.ReportURL, "/api/v1/")
	if !ok {
		server = s.ReportURL
	}
	env := make(map[string]string, len(s.Env))
	for k, v := range s.Env {
		switch k {
		case "VIRGA_CHECKPOINT_DIR", "VIRGA_REPORT_URL":
			// the agent sets these on the node
		default:
			env[k] = v
		}
	}
	return &Spec{
		AttemptID: s.AttemptID, TrialID: s.TrialID, ExperimentID: s.ExperimentID,
		Argv: s.Argv, Env: env, Workdir: s.Workdir, Server: server, Token: s.Token,
		Checkpoint: s.Checkpoint, Nodes: max(s.Nodes, 1), ProcessesPerNode: max(s.ProcessesPerNode, 1),
		MasterPort: MasterPort(s.AttemptID), StopGrace: s.StopGrace,
	}
}

// MasterPort is the rendezvous port of an attempt: distinct for attempts
// that may share a node (unless their IDs are 20,000 apart), in
// 10000-29999, below Linux's ephemeral ports (32768-60999) so that no
// outgoing connection holds it.
func MasterPort(attemptID int64) int {
	return 10000 + int(attemptID%20000)
}

// Encode returns s as one environment-safe string (base64 of JSON).
func (s *Spec) Encode() string {
	b, _ := json.Marshal(s)
	return base64.StdEncoding.EncodeToString(b)
}

// Decode reads a Spec that Encode wrote.
func Decode(v string) (*Spec, error) {
	if v == "" {
		return nil, fmt.Errorf("%s is not set: `virga agent` runs attempts that a remote backend started", EnvSpec)
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
	if err != nil {
		return nil, fmt.Errorf("%s: not base64: %w", EnvSpec, err)
	}
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", EnvSpec, err)
	}
	switch {
	case s.AttemptID <= 0 || s.TrialID <= 0:
		return nil, errors.New(EnvSpec + ": attempt_id and trial_id must be positive")
	case len(s.Argv) == 0:
		return nil, errors.New(EnvSpec + ": argv must not be empty")
	case s.Server == "" || s.Token == "":
		return nil, errors.New(EnvSpec + ": server and token are required")
	case s.Nodes < 1 || s.ProcessesPerNode < 1:
		return nil, errors.New(EnvSpec + ": nodes and processes_per_node must be at least 1")
	}
	return &s, nil
}
