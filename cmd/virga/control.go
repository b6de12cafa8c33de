package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/virga-ml/virga/internal/control"
)

var controlHelp = map[string]string{
	"stop":   "Stop an experiment: running trials get SIGTERM (then SIGKILL after the grace period); checkpoints are kept",
	"pause":  "Pause an experiment: running trials are stopped with their checkpoints kept; resume continues them",
	"resume": "Resume a paused experiment: paused trials continue from their checkpoints",
}

func newControlCmd(g *globals, op string) *cobra.Command {
	return &cobra.Command{
		Use:   op + " EXPERIMENT",
		Short: controlHelp[op],
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID("experiment", args[0])
			if err != nil {
				return err
			}
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			e, err := c.Control(cmd.Context(), id, control.Op(op))
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(e)
			}
			fmt.Fprintf(g.stdout, "experiment %d: %s\n", e.ID, e.State)
			return nil
		},
	}
}
