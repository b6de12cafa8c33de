package main

import (
	"context"
	"errors"

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
			if follow && g.readOnly {
				return errors.New("following needs a running server (no Virga server runs on this data directory): start `virga server`, pass --server URL, or drop -f to print the output so far")
			}
			return c.Logs(ctx, id, follow, g.stdout)
		}),
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing until the trial ends")
	return cmd
}
