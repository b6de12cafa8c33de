package main

import (
	"context"
	"fmt"
	"sort"

	"github.com/spf13/cobra"

	"github.com/virga-ml/virga/internal/api/client"
)

func newBestCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "best EXPERIMENT",
		Short: "Print an experiment's best trial: hyperparameters, metrics, checkpoint",
		Args:  cobra.ExactArgs(1),
		RunE: g.withID("experiment", func(ctx context.Context, c *client.Client, id int64) error {
			b, err := c.Best(ctx, id)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(b)
			}
			w, t := g.stdout, b.Trial
			fmt.Fprintf(w, "best trial %d of experiment %d (%s)\n", t.ID, id, t.State)
			fmt.Fprintf(w, "  %s %s: %s at step %d\n", b.Objective.Direction, b.Objective.Metric, fmtFloat(t.Best), t.BestStep)
			fmt.Fprintf(w, "  hyperparameters: %s\n", fmtHParams(t.HParams, 0))
			if b.Metrics != nil {
				names := make([]string, 0, len(b.Metrics.Values))
				for k := range b.Metrics.Values {
					names = append(names, k)
				}
				sort.Strings(names)
				fmt.Fprintf(w, "  metrics at step %d:", b.Metrics.Step)
				for _, k := range names {
					fmt.Fprintf(w, " %s=%g", k, b.Metrics.Values[k])
				}
				fmt.Fprintln(w)
			}
			if b.Checkpoint != nil {
				fmt.Fprintf(w, "  checkpoint at the best step: %s (checkpoints/%s in the server's data directory)\n", b.Checkpoint.ID[:12], b.Checkpoint.ID)
			}
			if t.Checkpoint != "" && (b.Checkpoint == nil || b.Checkpoint.ID != t.Checkpoint) {
				fmt.Fprintf(w, "  latest checkpoint: %s\n", t.Checkpoint)
			}
			return nil
		}),
	}
}
