package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api"
	"github.com/virga-ml/virga/internal/api/client"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/forecast"
	"github.com/virga-ml/virga/internal/server"
	"github.com/virga-ml/virga/internal/spec"
)

func newRunCmd(g *globals) *cobra.Command {
	var detach bool
	var capacityFile, estimateFile string
	var rc remoteFlags
	cmd := &cobra.Command{
		Use:   "run FILE",
		Short: "Run an experiment and follow it with a live table",
		Long: `Run submits an experiment file and follows it until it ends.

With no server configured (--server, VIRGA_SERVER, or a server already running
on --data-dir), run starts an embedded server in this process: state in
--data-dir (./.virga), trials on this machine. Ctrl-C asks whether to stop the
experiment or leave it running; when not on a terminal it leaves it running
(its trials go on and the next 'virga server' or 'virga run' adopts them).

--capacity FILE gives the embedded server the pools of a capacity file
(docs/capacity.md): trials are placed on them, emulated spot pools reclaim
them on their trace, and attempts are priced at the pools' prices. Pools of
backend slurm or kubernetes run the trials there (docs/cluster.md).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runExperiment(cmd.Context(), g, args[0], detach, capacityFile, estimateFile, &rc)
		},
	}
	cmd.Flags().BoolVar(&detach, "detach", false, "submit and return at once")
	cmd.Flags().StringVar(&estimateFile, "estimate", "", "forecast to keep with the experiment (virga estimate --json output), shown beside what happened by virga show")
	cmd.Flags().StringVar(&capacityFile, "capacity", "", "capacity file whose pools the embedded server uses (docs/capacity.md)")
	rc.register(cmd.Flags())
	return cmd
}

func runExperiment(ctx context.Context, g *globals, file string, detach bool, capacityFile, estimateFile string, rc *remoteFlags) error {
	// Validate here first: a bad file is reported with its positions and nothing is written.
	_, data, err := spec.Load(file)
	if err != nil {
		return err
	}
	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()

	var c *client.Client
	var embedded *server.Server
	switch {
	case g.server != "":
		if err := checkServerURL(g.server); err != nil {
			return err
		}
		if capacityFile != "" {
			return usageError{errors.New("--capacity configures the embedded server; a server given with --server has its own (virga server --capacity FILE)")}
		}
		c = client.New(g.server, g.tokenFor(g.dataDir))
	default:
		info, ok, err := g.runningServer(ctx)
		if err != nil {
			return err
		}
		if ok {
			if capacityFile != "" {
				return usageError{fmt.Errorf("--capacity configures the embedded server, but the server at %s (of %s) is running with its own: give it to that server (virga server --capacity FILE)", info.URL, g.dataDir)}
			}
			c = client.New(info.URL, g.tokenFor(g.dataDir))
			break
		}
		if detach {
			return usageError{errors.New("--detach needs a server that outlives this command: start `virga server` (or pass --server URL)")}
		}
		embedded, err = server.Start(context.Background(), withDrivers(server.Config{DataDir: g.dataDir, Version: version,
			Logger: newLogger(g.stderr, true), CapacityFile: capacityFile,
			Advertise: rc.advertise, Checkpoints: rc.checkpoints, Agent: rc.agent, KubeImage: rc.kubeImage,
			KubeNamespace: rc.kubeNamespace, Kubeconfig: rc.kubeconfig}))
		if err != nil {
			if _, bad := errors.AsType[*spec.Error](err); bad {
				return usageError{err}
			}
			return fmt.Errorf("starting the embedded server: %w", err)
		}
		defer embedded.Close()
		c = client.New(embedded.URL, embedded.Token)
	}
	// The server resolves the entrypoint's workdir against the file's directory.
	abs, err := filepath.Abs(file)
	if err != nil {
		return err
	}
	est, err := g.runEstimate(ctx, c, file, capacityFile, estimateFile)
	if err != nil {
		return err
	}
	exp, err := c.SubmitWithEstimate(ctx, abs, data, est)
	if err != nil {
		return err
	}
	if g.json && detach {
		return g.printJSON(exp)
	}
	if !g.json {
		where := c.Base()
		if embedded != nil {
			where = "embedded server, state in " + g.dataDir
		}
		fmt.Fprintf(g.stdout, "experiment %d (%s) submitted to %s\n", exp.ID, exp.Name, where)
	}
	if detach {
		fmt.Fprintf(g.stdout, "follow it with: virga show %d; virga trials %d\n", exp.ID, exp.ID)
		return nil
	}
	final, err := follow(ctx, g, c, exp.ID)
	if errors.Is(err, context.Canceled) {
		return interrupted(g, c, exp.ID, embedded != nil, stopSignals)
	}
	if err != nil {
		return err
	}
	if final != nil && final.State == virga.ExperimentFailed {
		// A failed experiment (no trial with a result, or one that could not
		// go on) fails the command, so that a script or CI job stops here.
		if g.json {
			fmt.Fprintf(g.stderr, "virga: experiment %d FAILED (%s): %s\n", final.ID, final.Reason, final.Message)
		}
		return exitError{exitFailure}
	}
	return nil
}

// interrupted handles Ctrl-C: ask (on a terminal) whether to stop the
// experiment. stopSignals restores the default action of Ctrl-C first, so a
// second one exits at once.
func interrupted(g *globals, c *client.Client, id int64, embedded bool, stopSignals func()) error {
	stopSignals()
	stop := false
	if f, ok := g.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintf(g.stderr, "\nStop experiment %d [s], or leave it running [l]? ", id)
		line, _ := bufio.NewReader(f).ReadString('\n')
		stop = strings.HasPrefix(strings.ToLower(strings.TrimSpace(line)), "s")
	}
	if stop {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := c.Control(ctx, id, wire.OpStop); err != nil {
			return err
		}
		fmt.Fprintf(g.stderr, "experiment %d is stopping (its trials get SIGTERM and their checkpoints are kept)\n", id)
		if embedded {
			waitStopped(g, c, id)
		}
		return exitError{130}
	}
	if embedded {
		fmt.Fprintf(g.stderr, "\nleaving experiment %d running: its trials go on; `virga server` or `virga run` on %s adopts them\n", id, g.dataDir)
	} else {
		fmt.Fprintf(g.stderr, "\nexperiment %d goes on in the server; follow it with `virga show %d`\n", id, id)
	}
	return exitError{130}
}

// waitStopped waits for a stopping experiment's trials to exit, so that
// nothing outlives the embedded server: up to its stop_grace (after which
// they get SIGKILL) and a few seconds more. It names the trials still running
// if the wait ends first.
func waitStopped(g *globals, c *client.Client, id int64) {
	grace := spec.DefaultStopGrace.D()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if v, err := c.Experiment(ctx, id); err == nil {
		if sp, err := spec.Parse(v.SpecFile, []byte(v.SpecText)); err == nil {
			grace = sp.StopGrace.D()
		}
	}
	cancel()
	ctx, cancel = context.WithTimeout(context.Background(), grace+5*time.Second)
	defer cancel()
	for {
		v, err := c.Experiment(ctx, id)
		if err == nil && v.State.Terminal() {
			return
		}
		select {
		case <-ctx.Done():
			running := []string{}
			lctx, lcancel := context.WithTimeout(context.Background(), 5*time.Second)
			trials, err := c.Trials(lctx, id)
			lcancel()
			if err == nil {
				for _, t := range trials {
					if t.State == virga.TrialRunning {
						running = append(running, fmt.Sprint(t.ID))
					}
				}
			}
			if len(running) > 0 {
				fmt.Fprintf(g.stderr, "experiment %d has not stopped after %s: trials %s still running; the next `virga server` or `virga run` on %s adopts them\n",
					id, fmtDuration(grace+5*time.Second), strings.Join(running, ", "), g.dataDir)
			}
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// progress is the live table's state.
type progress struct {
	mu     sync.Mutex
	exp    wire.ExperimentView
	trials map[int64]*virga.Trial
	start  time.Time
	lines  int // lines drawn last time (terminal mode)
	tty    bool
	seen   map[int64]virga.TrialState
	best   *float64
	// forecast is what is left of the run, fetched every few seconds
	// (terminal mode).
	forecast *forecast.Forecast
}

// follow watches an experiment until it ends, drawing the table.
func follow(ctx context.Context, g *globals, c *client.Client, id int64) (*virga.Experiment, error) {
	p := &progress{trials: map[int64]*virga.Trial{}, start: time.Now(), seen: map[int64]virga.TrialState{}}
	if f, ok := g.stdout.(*os.File); ok && term.IsTerminal(int(f.Fd())) && !g.json {
		p.tty = true
	}
	var final *virga.Experiment
	lastDraw := time.Time{}
	if p.tty {
		// Keep the elapsed time moving between events.
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		go func() {
			var asked time.Time
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					if time.Since(asked) >= 5*time.Second {
						asked = time.Now()
						if v, err := c.Experiment(ctx, id); err == nil {
							p.mu.Lock()
							p.forecast = v.Forecast
							p.mu.Unlock()
						}
					}
					p.mu.Lock()
					if p.exp.Experiment != nil && final == nil {
						p.draw(g.stdout)
					}
					p.mu.Unlock()
				}
			}
		}()
	}
	err := c.Watch(ctx, id, func(ev client.WatchEvent) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		switch ev.Kind {
		case "unreachable", "reconnected":
			if g.json {
				break
			}
			msg := "server reachable again; following"
			if ev.Kind == "unreachable" {
				_ = json.Unmarshal(ev.Data, &msg)
				msg += " (Ctrl-C to stop following)"
			}
			fmt.Fprintf(g.stderr, "virga: %s\n", msg)
			p.lines = 0 // the table is drawn again below the message
			return nil
		case "snapshot":
			var s wire.WatchSnapshot
			if err := json.Unmarshal(ev.Data, &s); err != nil {
				return err
			}
			p.exp = s.Experiment
			for _, t := range s.Trials {
				p.trials[t.ID] = t
			}
		case "update":
			var u wire.Update
			if err := json.Unmarshal(ev.Data, &u); err != nil {
				return err
			}
			if u.Experiment != nil {
				p.exp.Experiment = u.Experiment
			}
			for _, t := range u.Trials {
				p.trials[t.ID] = t
			}
		case "end":
			var e virga.Experiment
			if err := json.Unmarshal(ev.Data, &e); err != nil {
				return err
			}
			final = &e
			p.exp.Experiment = &e
		}
		if g.json {
			_, err := fmt.Fprintf(g.stdout, "{\"event\":%q,\"data\":%s}\n", ev.Kind, ev.Data)
			return err
		}
		if p.tty {
			if ev.Kind == "end" || time.Since(lastDraw) > 150*time.Millisecond {
				p.draw(g.stdout)
				lastDraw = time.Now()
			}
		} else {
			p.printChanges(g.stdout)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !g.json {
		p.summary(ctx, g.stdout, c, id)
	}
	return final, nil
}

func (p *progress) sorted() []*virga.Trial {
	ts := make([]*virga.Trial, 0, len(p.trials))
	for _, t := range p.trials {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Seq < ts[j].Seq })
	return ts
}

// draw redraws the table in place on a terminal.
func (p *progress) draw(w io.Writer) {
	var b strings.Builder
	ts := p.sorted()
	const maxRows = 30
	shown := ts
	if len(shown) > maxRows { // keep live ones and the most recent
		shown = shown[len(shown)-maxRows:]
	}
	header, rows := trialTable(shown, nil, 48)
	table(&b, header, rows)
	counts := map[virga.TrialState]int{}
	for _, t := range ts {
		counts[t.State]++
	}
	best := api.BestTrial(ts, p.exp.Objective)
	line := fmt.Sprintf("%s  %s  elapsed %s  %s", p.exp.Name, p.exp.State, fmtDuration(time.Since(p.start)), countsLine(counts))
	if best != nil {
		line += fmt.Sprintf("  best: trial %d %s=%s", best.ID, p.exp.Objective.Metric, fmtFloat(best.Best))
	}
	b.WriteString(line + "\n")
	if p.forecast != nil && p.exp.State == virga.ExperimentActive {
		b.WriteString("forecast: " + fmtForecast(p.forecast) + "\n")
	}
	out := b.String()
	if p.lines > 0 {
		fmt.Fprintf(w, "\x1b[%dA\x1b[J", p.lines)
	}
	fmt.Fprint(w, out)
	p.lines = strings.Count(out, "\n")
}

// printChanges prints one line per trial state change or new best (pipes, logs).
func (p *progress) printChanges(w io.Writer) {
	for _, t := range p.sorted() {
		if p.seen[t.ID] != t.State {
			p.seen[t.ID] = t.State
			extra := ""
			if t.Message != "" {
				extra = " (" + t.Message + ")"
			}
			fmt.Fprintf(w, "%s trial %d %s %s step=%d best=%s%s\n", time.Now().Format("15:04:05"), t.ID, t.State,
				fmtHParams(t.HParams, 0), t.Step, fmtFloat(t.Best), extra)
		}
		if t.Best != nil && (p.best == nil || p.exp.Objective.Better(*t.Best, *p.best)) {
			v := *t.Best
			p.best = &v
			fmt.Fprintf(w, "%s new best: trial %d %s=%s at step %d\n", time.Now().Format("15:04:05"), t.ID,
				p.exp.Objective.Metric, fmtFloat(t.Best), t.BestStep)
		}
	}
}

// summary prints the end of a run: the final table, the best trial, totals.
func (p *progress) summary(ctx context.Context, w io.Writer, c *client.Client, id int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	v, err := c.Experiment(ctx, id)
	if err != nil {
		return
	}
	if !p.tty {
		trials, err := c.Trials(ctx, id)
		if err == nil {
			header, rows := trialTable(trials, nil, 60)
			fmt.Fprintln(w)
			table(w, header, rows)
		}
	}
	dur := v.UpdatedAt.Sub(v.CreatedAt)
	if !v.EndedAt.IsZero() {
		dur = v.EndedAt.Sub(v.CreatedAt)
	}
	state := string(v.State)
	if v.Reason != "" && v.Reason != virga.ReasonSearchFinished {
		state += " (" + string(v.Reason) + ")"
	}
	fmt.Fprintf(w, "\nexperiment %d %s %s in %s: %s\n", v.ID, v.Name, state, fmtDuration(dur), countsLine(v.Counts))
	if v.Message != "" {
		fmt.Fprintf(w, "  %s\n", v.Message)
	}
	if v.Cost != 0 {
		fmt.Fprintf(w, "cost %s\n", fmtSpend(v.Spend))
	}
	if v.Best != nil {
		fmt.Fprintf(w, "best trial %d: %s=%s at step %d with %s\n", v.Best.ID, v.Objective.Metric, fmtFloat(v.Best.Best),
			v.Best.BestStep, fmtHParams(v.Best.HParams, 0))
		if v.Best.Checkpoint != "" {
			fmt.Fprintf(w, "  latest checkpoint %s\n", v.Best.Checkpoint)
		}
	} else {
		fmt.Fprintf(w, "no trial reported %q\n", v.Objective.Metric)
	}
}

// runEstimate returns the forecast to keep with the experiment: the file
// given with --estimate, or, with --capacity, one made now from the earlier
// runs the server knows (none when they do not tell the work).
func (g *globals) runEstimate(ctx context.Context, c *client.Client, file, capacityFile, estimateFile string) ([]byte, error) {
	if estimateFile != "" {
		b, err := os.ReadFile(estimateFile)
		if err != nil {
			return nil, usageError{err}
		}
		var rep estimateReport
		if err := json.Unmarshal(b, &rep); err != nil || len(rep.Plans) == 0 {
			return nil, usageError{fmt.Errorf("--estimate %s: not the output of virga estimate --json", estimateFile)}
		}
		return b, nil
	}
	if capacityFile == "" {
		return nil, nil
	}
	rep, err := g.computeEstimate(ctx, file, estimateOpts{capacity: capacityFile, samples: 200, seed: 1, unmodelled: forecast.DefaultUnmodelled}, c)
	if err != nil {
		fmt.Fprintf(g.stderr, "no estimate before the run: %v\n", err)
		return nil, nil
	}
	if !g.json {
		printEstimate(g.stdout, rep)
	}
	return json.Marshal(rep)
}
