package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/virga-ml/virga/internal/api/client"
)

func newTrialsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "trials EXPERIMENT",
		Short: "List an experiment's trials with their hyperparameters and objective",
		Args:  cobra.ExactArgs(1),
		RunE: g.withID("experiment", func(ctx context.Context, c *client.Client, id int64) error {
			trials, err := c.Trials(ctx, id)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(trials)
			}
			header, rows := trialTable(trials, 0)
			table(g.stdout, header, rows)
			return nil
		}),
	}
}
