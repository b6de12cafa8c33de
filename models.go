package virga

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ModelVersion is one registered version of a named model: its files (a
// model directory holding virga-model.json, stored once in the checkpoint
// storage under FilesID) and where it came from. A version is immutable: it
// is registered once and may be deleted, never changed.
type ModelVersion struct {
	Name    string `json:"name"`
	Version int64  `json:"version"` // 1, 2, ... within Name, in order of registration
	// FilesID is the content ID of the model directory in the checkpoint
	// storage (a checkpoint ID of its own, never one of a trial's).
	FilesID   string         `json:"files_id"`
	Size      int64          `json:"size"`  // bytes of file content
	Files     int            `json:"files"` // number of regular files
	Format    string         `json:"format"`
	Signature ModelSignature `json:"signature"`
	// Lineage: the trial and the checkpoint the files were taken from; zero
	// (and "") for a version uploaded from a directory.
	ExperimentID int64          `json:"experiment_id,omitempty"`
	TrialID      int64          `json:"trial_id,omitempty"`
	Step         int64          `json:"step,omitempty"`
	CheckpointID string         `json:"checkpoint_id,omitempty"`
	HParams      map[string]any `json:"hparams,omitempty"`
	// Metrics are the trial's report at Step (for its latest checkpoint, its
	// final metrics).
	Metrics     map[string]float64 `json:"metrics,omitempty"`
	Description string             `json:"description,omitempty"`
	CreatedAt   time.Time          `json:"created_at"`
}

// ModelSignature is what a model takes and gives (the signature of its
// virga-model.json).
type ModelSignature struct {
	Inputs  []ModelTensor `json:"inputs"`
	Outputs []ModelTensor `json:"outputs"`
}

// ModelTensor describes one input or output of a model: its name, its Open
// Inference Protocol datatype (FP32, INT64, ...) and its shape, where -1 is
// a variable dimension.
type ModelTensor struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

// ModelAlias is a name for one version of a model, such as "prod"; it may be
// moved to another version of the same model.
type ModelAlias struct {
	Name      string    `json:"name"`
	Alias     string    `json:"alias"`
	Version   int64     `json:"version"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Model summarises a registered model: how many versions it has and the
// newest one.
type Model struct {
	Name      string    `json:"name"`
	Versions  int       `json:"versions"`
	Latest    int64     `json:"latest"`     // the highest version number
	UpdatedAt time.Time `json:"updated_at"` // when its newest version was registered
}

// MaxModelName is the longest model or alias name, in bytes.
const MaxModelName = 128

// CheckModelName returns why name cannot name a model, or nil. A name is 1
// to MaxModelName letters, digits, '.', '_' and '-', starting with a letter
// or a digit.
func CheckModelName(name string) error {
	return checkName("model name", name, false)
}

// CheckAliasName returns why alias cannot name an alias, or nil. An alias is
// a model name that starts with a letter (so it is never read as a version
// number) and is not "latest" (which means the newest version).
func CheckAliasName(alias string) error {
	if alias == "latest" {
		return fmt.Errorf("alias %q: reserved for the newest version; pick another name", alias)
	}
	return checkName("alias", alias, true)
}

func checkName(what, s string, letterFirst bool) error {
	if s == "" {
		return fmt.Errorf("%s: empty; want 1 to %d letters, digits, '.', '_' or '-'", what, MaxModelName)
	}
	if len(s) > MaxModelName {
		return fmt.Errorf("%s %.20q...: %d bytes, longer than the limit of %d", what, s, len(s), MaxModelName)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		digit := '0' <= c && c <= '9'
		switch {
		case i == 0 && letterFirst && !letter:
			return fmt.Errorf("%s %q: must start with a letter", what, s)
		case i == 0 && !letter && !digit:
			return fmt.Errorf("%s %q: must start with a letter or a digit", what, s)
		case !letter && !digit && c != '.' && c != '_' && c != '-':
			return fmt.Errorf("%s %q: character %q at offset %d is not allowed; want letters, digits, '.', '_' or '-'", what, s, c, i)
		}
	}
	return nil
}

// ModelRef names a version of a model: Version when it is > 0, else the
// version Alias points at when Alias is set, else the newest version.
type ModelRef struct {
	Name    string
	Version int64
	Alias   string
}

// String returns the reference as ParseModelRef reads it.
func (r ModelRef) String() string {
	switch {
	case r.Version > 0:
		return r.Name + ":" + strconv.FormatInt(r.Version, 10)
	case r.Alias != "":
		return r.Name + "@" + r.Alias
	}
	return r.Name
}

// Latest reports whether r means the newest version.
func (r ModelRef) Latest() bool { return r.Version == 0 && r.Alias == "" }

// ParseModelRef reads a model reference: "name" (the newest version),
// "name@alias" (the version the alias points at) or "name:N" (version N, a
// positive integer).
func ParseModelRef(s string) (ModelRef, error) {
	if i := strings.IndexAny(s, ":@"); i >= 0 {
		name, rest := s[:i], s[i+1:]
		if err := CheckModelName(name); err != nil {
			return ModelRef{}, fmt.Errorf("model reference %q: %w", s, err)
		}
		if s[i] == '@' {
			if err := CheckAliasName(rest); err != nil {
				return ModelRef{}, fmt.Errorf("model reference %q: %w", s, err)
			}
			return ModelRef{Name: name, Alias: rest}, nil
		}
		v, err := strconv.ParseInt(rest, 10, 64)
		if err != nil || v < 1 || rest[0] == '+' {
			return ModelRef{}, fmt.Errorf("model reference %q: version %q: want a positive integer (name:N), or name@alias, or name for the newest version", s, rest)
		}
		return ModelRef{Name: name, Version: v}, nil
	}
	if err := CheckModelName(s); err != nil {
		return ModelRef{}, fmt.Errorf("model reference %q: %w", s, err)
	}
	return ModelRef{Name: s}, nil
}
