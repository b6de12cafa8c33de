package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/virga-ml/virga/internal/spec"
)

func newValidateCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check experiment files; print every problem with file:line:col (exit code 2 if any)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bad := false
			for _, file := range args {
				e, _, err := spec.Load(file)
				if err != nil {
					bad = true
					fmt.Fprintln(g.stderr, err)
					continue
				}
				if g.json {
					_ = g.printJSON(e)
					continue
				}
				fmt.Fprintf(g.stdout, "%s: ok: experiment %q, searcher %s, %d hyperparameters, up to %d trials (%d at a time)\n",
					file, e.Name, e.Searcher.Name, len(e.Hyperparameters), e.MaxTrials, e.MaxConcurrent)
			}
			if bad {
				return exitError{exitUsage}
			}
			return nil
		},
	}
}
