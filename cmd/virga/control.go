package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/client"
	"github.com/virga-ml/virga/internal/api/wire"
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
		RunE: g.withID("experiment", func(ctx context.Context, c *client.Client, id int64) error {
			e, err := c.Control(ctx, id, wire.Op(op))
			if errors.Is(err, virga.ErrConflict) {
				if v, verr := c.Experiment(ctx, id); verr == nil && v.State.Terminal() {
					return fmt.Errorf("experiment %d has already ended (%s); nothing to %s", id, v.State, op)
				}
			}
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(e)
			}
			fmt.Fprintf(g.stdout, "experiment %d: %s\n", e.ID, e.State)
			return nil
		}),
	}
}
