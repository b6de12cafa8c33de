package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/client"
	"github.com/virga-ml/virga/internal/api/wire"
)

func newTrialsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "trials EXPERIMENT",
		Short: "List an experiment's trials with their hyperparameters and objective",
		Args:  cobra.ExactArgs(1),
		RunE: g.withID("experiment", func(ctx context.Context, c *client.Client, id int64) error {
			sums, err := c.TrialSummaries(ctx, id)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(sums)
			}
			trials := make([]*virga.Trial, len(sums))
			costs := make(map[int64]wire.Spend, len(sums))
			for i, s := range sums {
				trials[i], costs[s.ID] = s.Trial, s.Spend
			}
			header, rows := trialTable(trials, costs, 0)
			table(g.stdout, header, rows)
			return nil
		}),
	}
}
