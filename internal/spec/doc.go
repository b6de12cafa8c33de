// Package spec owns the experiment file: its types, defaults, parsing and
// validation with file:line:col positions, and the placeholder and grid
// helpers derived from it. It never touches the store, the file system beyond
// Load's one read, or runs anything; a parsed *Experiment is a plain value
// the rest of Virga reads.
//
// # The file format
//
//	name: digits-mlp              # required; [a-zA-Z0-9][a-zA-Z0-9._-]{0,63}
//	description: free text        # optional
//	entrypoint:                   # omit it to drive trials through the API (ask/tell)
//	  command: [go, run, ./examples/digits-go, "--lr=${lr}"]
//	  workdir: .                  # relative to the file's directory; default that directory
//	  env: {OMP_NUM_THREADS: "1"} # values as written; names starting with VIRGA_ are reserved
//	hyperparameters:
//	  lr: {type: float, min: 1.0e-4, max: 0.3, log: true, default: 0.01}
//	  hidden: {type: int, min: 16, max: 128, count: 8}
//	  act: {type: categorical, values: [relu, tanh]}
//	  epochs: {type: const, value: 20}
//	  batch: 32                   # a bare scalar is a const
//	searcher: random              # or {name: random, SETTING: ...}; single (the default), grid, random, auto
//	objective: {metric: val_loss, direction: minimize}   # or just `objective: val_loss`
//	max_trials: 20
//	max_concurrent: 4             # default 1
//	max_restarts: 3               # default 3
//	timeout: 30m                  # per attempt; Go duration or whole seconds; default none
//	stop_grace: 120s              # SIGTERM to SIGKILL; default 120s
//	resources: {cpu: 1, memory: 512MiB, gpu: 0}   # see ParseMemory; cpu default 1
//	checkpoints: {keep_last: 2}   # default 2
//	seed: 42                      # uint64; 0 or absent: the server picks one
//
// The entrypoint may also be a list (`entrypoint: [python3, train.py]`) or a
// string split like a POSIX shell would, quotes and backslashes included but
// without any expansion (`entrypoint: "python3 train.py --lr ${lr}"`). In the
// command and in env values, ${name} stands for hyperparameter name's value
// (see FillString) and $${ for a literal ${; every ${name} must name a
// hyperparameter defined in the file.
//
// Hyperparameters: int and float take min < max (int bounds whole numbers),
// log (needs min > 0), count (grid points, 2 to MaxCount) and default (within
// [min, max]); categorical takes a non-empty list of unique scalar values and
// a default among them; const takes a value. Values are int64, float64, bool
// or string.
//
// Searchers: single runs one trial with every default, so each non-const
// parameter needs one, and max_trials may only be 1. grid runs the points of
// GridValues: a float without count gets DefaultFloatPoints points, and an int
// without count must span at most MaxImplicitIntPoints integers (all of them
// are tried); max_trials defaults to the grid size and caps it when given.
// random defaults to 10 trials. auto ({name: auto, max_resource: N}) stands
// for the combination AutoSearcher returns, and defaults to 20 trials.
//
// # Errors
//
// Parse reports every problem it finds as an *Error, one line per problem,
// sorted by position, each saying what would be right:
//
//	exp.yaml:12:5: hyperparameters.lr.max: must be > min (got 0.0 <= 0.1)
//	exp.yaml:3:1: unknown field "max_trails"; did you mean max_trials?
//
// Unknown fields, duplicate keys, wrong types, several YAML documents,
// aliases and files over MaxFileSize are all errors.
package spec
