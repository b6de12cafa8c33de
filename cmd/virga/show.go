package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/client"
	"github.com/virga-ml/virga/internal/api/wire"
)

func newShowCmd(g *globals) *cobra.Command {
	var events bool
	cmd := &cobra.Command{
		Use:   "show EXPERIMENT",
		Short: "Show one experiment: state, progress, best trial, recent events",
		Args:  cobra.ExactArgs(1),
		RunE: g.withID("experiment", func(ctx context.Context, c *client.Client, id int64) error {
			v, err := c.Experiment(ctx, id)
			if err != nil {
				return err
			}
			evs, err := c.Events(ctx, id, 0)
			if err != nil {
				return err
			}
			if g.json {
				return g.printJSON(map[string]any{"experiment": v, "events": evs})
			}
			w := g.stdout
			fmt.Fprintf(w, "experiment %d: %s\n", v.ID, v.Name)
			fmt.Fprintf(w, "  state:      %s", v.State)
			if v.Reason != "" && v.Reason != virga.ReasonSearchFinished {
				fmt.Fprintf(w, ", %s", v.Reason)
			}
			if v.Message != "" {
				fmt.Fprintf(w, " (%s)", v.Message)
			}
			fmt.Fprintln(w)
			fmt.Fprintf(w, "  file:       %s\n", v.SpecFile)
			fmt.Fprintf(w, "  objective:  %s %s\n", v.Objective.Direction, v.Objective.Metric)
			fmt.Fprintf(w, "  trials:     %s (max %d)\n", countsLine(v.Counts), v.MaxTrials)
			fmt.Fprintf(w, "  cost:       %s", fmtCost(v.Cost))
			if v.LostCost != 0 {
				fmt.Fprintf(w, ", of which %s lost to preemptions", fmtCost(v.LostCost))
			}
			fmt.Fprintln(w)
			if len(v.Pools) > 1 || len(v.Pools) == 1 && v.Pools[0].Pool != "" {
				fmt.Fprintf(w, "  pools:      %s\n", fmtPools(v.Pools))
			}
			printEstimateBeside(w, v, evs)
			if v.Forecast != nil {
				fmt.Fprintf(w, "  forecast:   %s\n", fmtForecast(v.Forecast))
			}
			fmt.Fprintf(w, "  created:    %s\n", fmtTime(v.CreatedAt))
			if !v.EndedAt.IsZero() {
				fmt.Fprintf(w, "  ended:      %s (%s)\n", fmtTime(v.EndedAt), fmtDuration(v.EndedAt.Sub(v.CreatedAt)))
			}
			if v.Best != nil {
				fmt.Fprintf(w, "  best:       trial %d, %s=%s at step %d, %s\n", v.Best.ID, v.Objective.Metric,
					fmtFloat(v.Best.Best), v.Best.BestStep, fmtHParams(v.Best.HParams, 0))
			}
			start := 0
			if !events && len(evs) > 15 {
				start = len(evs) - 15
				fmt.Fprintf(w, "\nlast %d of %d events (--events for all):\n", 15, len(evs))
			} else {
				fmt.Fprintf(w, "\nevents:\n")
			}
			for _, e := range evs[start:] {
				if e.Kind == virga.EventExperimentEstimate {
					e.Message = "(shown above)"
				}
				who := ""
				if e.TrialID != 0 {
					who = fmt.Sprintf("trial %d ", e.TrialID)
				}
				fmt.Fprintf(w, "  %s  %s%s %s\n", e.Time.Local().Format("15:04:05.000"), who, e.Kind, e.Message)
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&events, "events", false, "print every event")
	return cmd
}

// printEstimateBeside prints the forecast recorded before the run (the
// experiment.estimate event) beside what happened.
func printEstimateBeside(w io.Writer, v *wire.ExperimentView, evs []virga.Event) {
	var rep *estimateReport
	for _, e := range evs {
		if e.Kind == virga.EventExperimentEstimate {
			var r estimateReport
			if json.Unmarshal([]byte(e.Message), &r) == nil && len(r.Plans) > 0 {
				rep = &r
			}
		}
	}
	if rep == nil {
		return
	}
	var parts []string
	for _, p := range rep.Plans {
		part := fmt.Sprintf("%s %s in %s", p.Plan, fmtCost(p.Cost), fmtDuration(p.Wall.Round(time.Second)))
		if !rep.Deadline.IsZero() {
			part += fmt.Sprintf(" (P(deadline) %.0f%%)", 100*p.PMeet)
		}
		parts = append(parts, part)
	}
	basis := fmt.Sprintf("before the run: %s of node time", fmtDuration(rep.Work.Round(time.Second)))
	if c := rep.Calibration; c != nil {
		basis += fmt.Sprintf("; calibrated on %d earlier runs of %s, actual/predicted median %.2f", c.Pairs, c.Of, c.Median)
	}
	fmt.Fprintf(w, "  estimated:  %s (%s)\n", strings.Join(parts, "; "), basis)
	end := v.EndedAt
	verb := "took"
	if end.IsZero() {
		end, verb = time.Now(), "so far"
	}
	actual := fmt.Sprintf("%s, %s %s", fmtCost(v.Cost), verb, fmtDuration(end.Sub(v.CreatedAt).Round(time.Second)))
	if !rep.Deadline.IsZero() && !v.EndedAt.IsZero() {
		if v.EndedAt.After(rep.Deadline) {
			actual += fmt.Sprintf(", deadline missed by %s", fmtDuration(v.EndedAt.Sub(rep.Deadline).Round(time.Second)))
		} else {
			actual += ", deadline met"
		}
	}
	fmt.Fprintf(w, "  actual:     %s\n", actual)
}
