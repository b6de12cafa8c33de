package main

import (
	"context"
	"errors"
	"strings"

	"github.com/spf13/cobra"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/client"
	"github.com/virga-ml/virga/internal/api/wire"
)

func newLogsCmd(g *globals) *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs TRIAL",
		Short: "Print a trial's output (all attempts); -f follows it until the trial ends",
		Long: `Logs prints a trial's output, every attempt's in turn (each under a header
when there are several); -f keeps printing until the trial ends.

With --json it prints the trial (as virga trials --json does) with each
attempt of its attempt_list carrying its output as "log".`,
		Args: cobra.ExactArgs(1),
		RunE: g.withID("trial", func(ctx context.Context, c *client.Client, id int64) error {
			if g.json {
				if follow {
					return usageError{errors.New("--json prints the output so far and cannot follow: drop -f")}
				}
				v, err := trialLogs(ctx, c, id)
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

// attemptLog is an attempt with its output, for logs --json.
type attemptLog struct {
	*virga.Attempt
	Log string `json:"log"`
}

// trialLogsView is a trial whose attempts carry their output, for logs --json.
type trialLogsView struct {
	*wire.TrialView
	AttemptList []attemptLog `json:"attempt_list"` // shadows TrialView's
}

// trialLogs reads a trial and the output of each of its attempts.
func trialLogs(ctx context.Context, c *client.Client, id int64) (*trialLogsView, error) {
	tv, err := c.Trial(ctx, id)
	if err != nil {
		return nil, err
	}
	v := &trialLogsView{TrialView: tv, AttemptList: []attemptLog{}}
	for _, a := range tv.AttemptList {
		var b strings.Builder
		if err := c.AttemptLog(ctx, id, a.Number, &b); err != nil {
			return nil, err
		}
		v.AttemptList = append(v.AttemptList, attemptLog{Attempt: a, Log: b.String()})
	}
	return v, nil
}
