package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/virga-ml/virga/internal/spec"
)

// validateReport is what validate --json prints: one document for all the
// files given.
type validateReport struct {
	Valid bool           `json:"valid"` // every file is
	Files []validateFile `json:"files"`
}

// validateFile is one file's verdict: its experiment (defaults applied) when
// valid, its problems otherwise.
type validateFile struct {
	File       string           `json:"file"`
	Valid      bool             `json:"valid"`
	Experiment *spec.Experiment `json:"experiment,omitempty"`
	Problems   []problemJSON    `json:"problems,omitempty"`
}

// problemJSON is one problem of a file; Line and Col are 0 when it concerns
// the whole file (it cannot be read, it is empty), Field is "" then too.
type problemJSON struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Col     int    `json:"col"`
	Field   string `json:"field"`
	Message string `json:"message"`
}

func newValidateCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check experiment files; print every problem with file:line:col (exit code 2 if any)",
		Long: `Validate checks experiment files without running them and prints every
problem as FILE:LINE:COL: FIELD: MESSAGE on stderr. It exits 0 when every file
is valid and 2 when any is not (or cannot be read).

With --json it prints one document on stdout:
  {"valid": false, "files": [{"file": ..., "valid": true, "experiment": {...}},
                             {"file": ..., "valid": false, "problems": [
                               {"file", "line", "col", "field", "message"}]}]}`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rep := validateReport{Valid: true, Files: []validateFile{}}
			for _, file := range args {
				e, _, err := spec.Load(file)
				if err != nil {
					rep.Valid = false
					fmt.Fprintln(g.stderr, err)
					rep.Files = append(rep.Files, validateFile{File: file, Problems: problemsOf(file, err)})
					continue
				}
				rep.Files = append(rep.Files, validateFile{File: file, Valid: true, Experiment: e})
				if !g.json {
					fmt.Fprintf(g.stdout, "%s: ok: experiment %q, searcher %s, %d hyperparameters, up to %d trials (%d at a time)\n",
						file, e.Name, e.Searcher.Name, len(e.Hyperparameters), e.MaxTrials, e.MaxConcurrent)
				}
			}
			if g.json {
				if err := g.printJSON(rep); err != nil {
					return err
				}
			}
			if !rep.Valid {
				return exitError{exitUsage}
			}
			return nil
		},
	}
}

// problemsOf lists the problems of err, an error of spec.Load(file).
func problemsOf(file string, err error) []problemJSON {
	var se *spec.Error
	if !errors.As(err, &se) {
		return []problemJSON{{File: file, Message: err.Error()}}
	}
	ps := make([]problemJSON, len(se.Problems))
	for i, p := range se.Problems {
		ps[i] = problemJSON{File: p.File, Line: p.Line, Col: p.Col, Field: p.Path, Message: p.Msg}
	}
	return ps
}
