package main

import (
	"context"
	"github.com/spf13/cobra"

	"github.com/virga-ml/virga/internal/api/client"
)

func newLogsCmd(g *globals) *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs TRIAL",
		Short: "Print a trial's output (all attempts); -f follows it until the trial ends",
		Args:  cobra.ExactArgs(1),
		RunE: g.withID("trial", func(ctx context.Context, c *client.Client, id int64) error {
			if g.json {
				v, err := c.Trial(ctx, id)
				if err != nil {
					return err
				}
				return g.printJSON(v)
			}
			return c.Logs(ctx, id, follow, g.stdout)
		}),
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing until the trial ends")
	return cmd
}
