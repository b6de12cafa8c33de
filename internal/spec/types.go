package spec

import "time"

// Experiment is a parsed, validated experiment file with defaults applied.
type Experiment struct {
	Name            string                     `json:"name"`
	Description     string                     `json:"description,omitempty"`
	Entrypoint      Entrypoint                 `json:"entrypoint"`
	Hyperparameters map[string]*Hyperparameter `json:"hyperparameters"`
	// Order lists hyperparameter names in file order (maps lose it).
	Order         []string    `json:"order"`
	Searcher      Searcher    `json:"searcher"`
	Objective     Objective   `json:"objective"`
	MaxTrials     int         `json:"max_trials"`     // default 1 for single, grid size for grid, 10 for random
	MaxConcurrent int         `json:"max_concurrent"` // default 1
	MaxRestarts   int         `json:"max_restarts"`   // per trial; default 3
	Timeout       Duration    `json:"timeout"`        // per attempt; 0 = none
	Resources     Resources   `json:"resources"`
	Checkpoints   Checkpoints `json:"checkpoints"`
	// StopGrace is the time between SIGTERM and SIGKILL; default 120s.
	StopGrace Duration `json:"stop_grace"`
	Seed      uint64   `json:"seed"` // searcher seed; 0 in the file means "pick one" (the chosen seed is recorded)
	// Deadline is when the experiment must be done; zero means none.
	Deadline Deadline `json:"deadline,omitzero"`
	// Budget is the most the experiment may cost, in US dollars; 0 means no
	// limit.
	Budget float64 `json:"budget,omitempty"`
}

// Deadline is either a duration from submission (After) or a time (At).
type Deadline struct {
	After Duration  `json:"after,omitempty"`
	At    time.Time `json:"at,omitzero"`
	// Line and Col locate it in the file, for messages at submission.
	Line int `json:"-"`
	Col  int `json:"-"`
}

// IsZero reports whether no deadline is set.
func (d Deadline) IsZero() bool { return d.After == 0 && d.At.IsZero() }

// Time returns the deadline of an experiment submitted at submitted.
func (d Deadline) Time(submitted time.Time) time.Time {
	if !d.At.IsZero() {
		return d.At
	}
	return submitted.Add(time.Duration(d.After))
}

// Entrypoint is the trial command. Argv elements may hold ${name} placeholders
// that are filled from the hyperparameters. An empty Argv means trials are
// driven through the API (ask/tell) and no process is started.
type Entrypoint struct {
	Argv    []string          `json:"argv"`
	Workdir string            `json:"workdir,omitempty"` // relative paths are relative to the experiment file's directory
	Env     map[string]string `json:"env,omitempty"`
}

// HPType is a hyperparameter's type.
type HPType string

// Hyperparameter types.
const (
	HPInt         HPType = "int"
	HPFloat       HPType = "float"
	HPCategorical HPType = "categorical"
	HPConst       HPType = "const"
)

// Hyperparameter is one dimension of the search space.
type Hyperparameter struct {
	Name string `json:"name"`
	Type HPType `json:"type"`
	// Min and Max bound int and float parameters (inclusive).
	Min float64 `json:"min,omitempty"`
	Max float64 `json:"max,omitempty"`
	// Log samples a float (or int) uniformly in log space; requires Min > 0.
	Log bool `json:"log,omitempty"`
	// Count is the number of grid points for int and float under the grid searcher;
	// 0 when the file gives none (see GridValues for what that means).
	Count int `json:"count,omitempty"`
	// Values lists a categorical parameter's choices. Like Value and Default, each
	// is an int64, float64, bool or string.
	Values []any `json:"values,omitempty"`
	// Value is a const parameter's value.
	Value any `json:"value,omitempty"`
	// Default is the value the single searcher uses (and a hint for others);
	// nil when the file gives none. Const parameters keep theirs in Value.
	Default any `json:"default,omitempty"`
}

// Searcher chooses the search algorithm and its settings. A search is a
// sampler, which chooses new trials' hyperparameters (single, grid, random,
// tpe), optionally with a stopper, which ends or pauses weak trials early
// (asha, hyperband, median, curve); or a searcher that does both in its own
// way (pbt). Name is the canonical name: the sampler's ("tpe"), the pair's
// ("tpe+asha") or the whole searcher's ("pbt"). Settings keeps the
// searcher-specific fields, validated by the parser's table.
type Searcher struct {
	Name     string         `json:"name"`
	Sampler  string         `json:"sampler,omitempty"` // empty for pbt
	Stopper  string         `json:"stopper,omitempty"` // empty when no trial is stopped early
	Settings map[string]any `json:"settings,omitempty"`
}

// Int returns an integer setting, or def when it is not set.
func (s Searcher) Int(key string, def int64) int64 {
	if v, ok := s.Settings[key].(int64); ok {
		return v
	}
	return def
}

// Float returns a number setting, or def when it is not set.
func (s Searcher) Float(key string, def float64) float64 {
	switch v := s.Settings[key].(type) {
	case float64:
		return v
	case int64:
		return float64(v)
	}
	return def
}

// Text returns a string setting, or def when it is not set.
func (s Searcher) Text(key, def string) string {
	if v, ok := s.Settings[key].(string); ok {
		return v
	}
	return def
}

// Bool returns a boolean setting, or def when it is not set.
func (s Searcher) Bool(key string, def bool) bool {
	if v, ok := s.Settings[key].(bool); ok {
		return v
	}
	return def
}

// Direction is minimize or maximize.
type Direction string

// Directions.
const (
	Minimize Direction = "minimize"
	Maximize Direction = "maximize"
)

// Objective names the metric the search optimises.
type Objective struct {
	Metric    string    `json:"metric"`
	Direction Direction `json:"direction"`
}

// Better reports whether a is better than b under the objective's direction.
func (o Objective) Better(a, b float64) bool {
	if o.Direction == Maximize {
		return a > b
	}
	return a < b
}

// Resources is what one trial needs: CPU, memory and GPUs on each of its
// nodes. A trial of more than one node is a gang: all of its nodes start
// together or none does, and losing one ends the whole attempt.
type Resources struct {
	CPU      float64 `json:"cpu"`       // cores per node; default 1
	MemoryMB int64   `json:"memory_mb"` // per node; default 0 (unaccounted)
	GPU      int     `json:"gpu"`       // per node
	// Nodes is the number of nodes of a gang; default 1.
	Nodes int `json:"nodes"`
	// ProcessesPerNode is the number of trial processes on each node (for
	// example one per GPU); default 1. Each gets PyTorch's rendezvous
	// variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
	ProcessesPerNode int `json:"processes_per_node"`
}

// MaxNodes bounds resources.nodes and resources.processes_per_node.
const MaxNodes = 1024

// Total is what the whole gang needs: each node's resources times the
// number of nodes.
func (r Resources) Total() (cpu float64, memoryMB int64, gpu int) {
	n := max(r.Nodes, 1)
	return r.CPU * float64(n), r.MemoryMB * int64(n), r.GPU * n
}

// Checkpoints sets checkpoint retention.
type Checkpoints struct {
	KeepLast int `json:"keep_last"` // default 2; at least 1
}

// Duration is a time.Duration written as "90s", "5m", "1h30m".
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats d like time.Duration does ("1m30s").
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes d as a Go duration string, so JSON shows "30m0s".
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads a Go duration string or an integer number of seconds.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}
