package main

import (
	"strconv"

	"github.com/spf13/cobra"
)

func newLsCmd(g *globals) *cobra.Command {
	var states []string
	var limit int
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List experiments, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			exps, err := c.Experiments(cmd.Context(), states, limit)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(exps)
			}
			rows := make([][]string, 0, len(exps))
			for _, e := range exps {
				best := "-"
				if e.Best != nil {
					best = fmtFloat(e.Best.Best) + " (trial " + strconv.FormatInt(e.Best.ID, 10) + ")"
				}
				rows = append(rows, []string{strconv.FormatInt(e.ID, 10), e.Name, string(e.State), countsLine(e.Counts),
					e.Objective.Metric + " " + string(e.Objective.Direction), best, fmtTime(e.CreatedAt)})
			}
			table(g.stdout, []string{"ID", "NAME", "STATE", "TRIALS", "OBJECTIVE", "BEST", "CREATED"}, rows)
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&states, "state", nil, "only these states (ACTIVE, PAUSED, STOPPING, COMPLETED, STOPPED, FAILED)")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many")
	return cmd
}
