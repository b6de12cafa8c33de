package main

import (
	"github.com/spf13/cobra"
)

func newTrialsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "trials EXPERIMENT",
		Short: "List an experiment's trials with their hyperparameters and objective",
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
			trials, err := c.Trials(cmd.Context(), id)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(trials)
			}
			rows := make([][]string, 0, len(trials))
			for _, t := range trials {
				rows = append(rows, trialRow(t, 0))
			}
			table(g.stdout, trialHeader, rows)
			return nil
		},
	}
}
