package main

import (
	"github.com/spf13/cobra"
)

func newLogsCmd(g *globals) *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs TRIAL",
		Short: "Print a trial's output (all attempts); -f follows it until the trial ends",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID("trial", args[0])
			if err != nil {
				return err
			}
			c, done, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			if g.json {
				v, err := c.Trial(cmd.Context(), id)
				if err != nil {
					return err
				}
				return g.printJSON(v)
			}
			return c.Logs(cmd.Context(), id, follow, g.stdout)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing until the trial ends")
	return cmd
}
