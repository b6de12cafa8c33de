package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/virga-ml/virga/elastic"
	"github.com/virga-ml/virga/elastic/algo"
	"github.com/virga-ml/virga/elastic/input"
	"github.com/virga-ml/virga/sdk/go/trial"
)

func newAlgoCmd(g *globals) *cobra.Command {
	var in, format, label, modelOut, base, ckptDir, split string
	var header bool
	var batch, workers, epochs int
	var params []string
	var every, lease time.Duration
	var sample int64
	var price float64
	var serve, join string
	var shard, shards int
	cmd := &cobra.Command{
		Use:   "algo NAME --input URI",
		Short: "Run a built-in streaming algorithm over an input (as a trial, so experiments can tune it)",
		Long: `Run one of Virga's built-in streaming algorithms (the initialize / update / finalize model of
package elastic) over an input read once: a file (CSV, JSON lines, libsvm; .gz too), '-' for standard
input, or a network stream (tcp://host:port, http(s)://...). --workers splits the input into shards read
in parallel; --epochs N reads a file N times over.

Under Virga (an experiment's entrypoint) the algorithm's state and each shard's read position are written
to VIRGA_CHECKPOINT_DIR as it goes and on SIGTERM, and a restarted trial resumes where it stopped; progress
is reported as the metric "rows". Parameters come from --param name=value and the trial's hyperparameters.

--serve ADDR makes this process the coordinator of worker processes (--join URL) that claim shards of
the input; they authenticate with VIRGA_ALGO_TOKEN (or --token), which a coordinator listening beyond
loopback requires. A checkpoint or --base state records its algorithm and is refused by another.

--sample N runs on the first N rows of each shard only and prints the rows per second per worker and,
with --price (USD per worker-hour), the time and cost of the whole input.

Algorithms: ` + strings.Join(algo.Names(), ", "),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, ok := algo.Builtins[args[0]]
			if !ok {
				return usageError{fmt.Errorf("unknown algorithm %q (known: %s)", args[0], strings.Join(algo.Names(), ", "))}
			}
			if in == "" && serve == "" {
				return usageError{errors.New("--input is required: a file, '-' for standard input, tcp://host:port or an http(s) URL")}
			}
			opts := input.Options{Format: input.Format(format), BatchRows: batch, Header: header}
			switch split {
			case "", "auto":
			case "rows":
				opts.Split = input.SplitRows
			case "ranges":
				opts.Split = input.SplitRanges
			default:
				return usageError{fmt.Errorf("--split %q: want auto, rows or ranges", split)}
			}
			switch label {
			case "", "none":
			case "last":
				opts.Label = input.LastColumn
			default:
				n, err := strconv.Atoi(label)
				if err != nil || n < 1 {
					return usageError{fmt.Errorf("--label %q: want a 1-based column number, last, or none", label)}
				}
				opts.Label = n
			}
			if err := checkLabel(b, in, opts, cmd.Flags().Changed("label")); err != nil {
				return err
			}
			if workers < 1 {
				return usageError{errors.New("--workers must be at least 1")}
			}
			if shards < 1 {
				return usageError{errors.New("--shards must be at least 1")}
			}
			if epochs < 1 {
				return usageError{errors.New("--epochs must be at least 1")}
			}
			if every <= 0 || lease <= 0 {
				return usageError{errors.New("--checkpoint-every and --lease must be positive durations")}
			}
			gang, err := algo.GangFromEnv(os.Getenv)
			if err != nil {
				return err
			}
			multi := join != "" || serve != "" || gang.WorldSize > 1
			if err := checkAlgoFlags(cmd, multi, serve, join, sample, price, batch); err != nil {
				return err
			}
			if modelOut != "" && gang.Rank == 0 { // in a gang, rank 0 writes it
				if d := filepath.Dir(modelOut); !isDir(d) {
					return usageError{fmt.Errorf("--model %s: the directory %s does not exist", modelOut, d)}
				}
			}
			token := algoToken(cmd, g, gang)
			if serve != "" && token == "" && !algo.Loopback(serve) {
				return usageError{fmt.Errorf("--serve %s listens beyond this machine: set VIRGA_ALGO_TOKEN (or --token) to a secret that its workers are given too, or serve on 127.0.0.1", serve)}
			}
			if workers > 1 && multi {
				return usageError{errors.New("--workers splits the input among goroutines of one process; with --serve, --join or a gang the processes are the workers (--shards sets the split)")}
			}
			if sample > 0 && multi {
				return usageError{errors.New("--sample estimates in one process: without --serve, --join or a gang (WORLD_SIZE)")}
			}
			if join != "" && (modelOut != "" || ckptDir != "" || base != "") {
				return usageError{errors.New("--model, --checkpoint and --base belong to the coordinator (--serve), not to a worker (--join)")}
			}
			if join != "" && cmd.Flags().Changed("epochs") {
				return usageError{errors.New("--epochs belongs to the coordinator (--serve --epochs N): its workers read as many passes as it says")}
			}
			if in == "-" && (workers > 1 || shards > 1) {
				return usageError{errors.New("--input - (standard input) is read once, by one reader: it cannot be split among --workers or --shards")}
			}
			if epochs > 1 && (in == "-" || input.IsNetwork(in)) {
				return usageError{fmt.Errorf("--epochs %d: %s is a stream read once; several passes need a file", epochs, in)}
			}
			t, err := trial.FromEnv()
			if err != nil {
				return err
			}
			ps, ignored, err := b.Parse(params, t.HParams())
			if err != nil {
				return usageError{err}
			}
			if len(ignored) > 0 {
				fmt.Fprintf(g.stderr, "virga algo: hyperparameters %s are not parameters of %s; ignored\n", strings.Join(ignored, ", "), b.Name)
			}
			// The width: the learners' state is sized by it, and every
			// reader of a libsvm input must produce rows of the same one.
			width := int(ps["features"])
			svm := opts.Format == input.LibSVM
			if f, err := input.FormatOf(in); opts.Format == "" && err == nil {
				svm = f == input.LibSVM
			}
			if width == 0 && in != "" && (b.Wide || svm) {
				if in == "-" || input.IsNetwork(in) {
					if b.Wide {
						return usageError{fmt.Errorf("the width of %s, a stream, cannot be read in advance: give --param features=D", in)}
					}
				} else if width, err = input.Width(cmd.Context(), in, opts); err != nil {
					return err
				}
			}
			if svm && width > 0 {
				opts.Features = width
			}
			alg, save, err := b.Make(ps, width)
			if err != nil {
				return usageError{fmt.Errorf("%s: %w", b.Name, err)}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			logf := func(format string, args ...any) {
				fmt.Fprintf(g.stderr, "virga algo: "+format+"\n", args...)
			}
			if join != "" {
				if !cmd.Flags().Changed("shards") {
					shards = 0 // the coordinator's
				}
				if shard < -1 || (shards > 0 && shard >= shards) {
					return usageError{fmt.Errorf("--shard %d: want 0 to %d (or none: the coordinator hands shards out)", shard, shards-1)}
				}
				w := &algo.Worker{Name: b.Name, Alg: alg, URL: join, Token: token, Input: in, Options: opts, Shard: shard, Shards: shards, Logf: logf}
				return stopped(w.Run(ctx))
			}
			var baseState map[string]elastic.Tensor
			if base != "" && gang.Rank == 0 {
				c, err := elastic.ReadCheckpoint(base)
				if err == nil {
					err = c.Fits(ctx, b.Name, alg)
				}
				if err != nil {
					return fmt.Errorf("--base %s: %w", base, err)
				}
				baseState = c.Tensors
			}
			var report algo.Reporter
			if t.Managed() {
				report = func(ctx context.Context, step int64, metrics map[string]float64) error {
					_, err := t.Report(ctx, step, metrics)
					return err
				}
			}
			coordinator := func(addr string, shards int) *algo.Coordinator {
				return &algo.Coordinator{Builtin: b, Alg: alg, Save: save, Addr: addr, Shards: shards, Passes: epochs, Lease: lease,
					CheckpointDir: ckptDir, Every: every, ModelOut: modelOut, Base: baseState, Token: token, Logf: logf}
			}
			if serve != "" {
				res, err := coordinator(serve, shards).Run(ctx)
				if err != nil {
					return stopped(err)
				}
				return printAlgoResult(g, res, fmt.Sprintf("%s: %d rows from %d shards\n", b.Name, res.Rows, shards))
			}
			if gang.WorldSize > 1 {
				// A trial of several processes (resources.nodes /
				// processes_per_node): rank 0 is the coordinator and a
				// worker, the others workers; they share 4 shards each.
				addr, url, n, err := gang.Endpoints(shards, token)
				if err != nil {
					return usageError{err}
				}
				w := &algo.Worker{Name: b.Name, Alg: alg, URL: url, Token: token, Input: in, Options: opts, Shard: -1, Logf: logf}
				if gang.Rank > 0 {
					return stopped(w.Run(ctx))
				}
				c := coordinator(addr, n)
				c.Expect = gang.WorldSize
				if t.Managed() {
					c.CheckpointDir = t.CheckpointDir()
					c.Report = report
				}
				res, err := algo.GangLeader(ctx, c, w)
				if err != nil {
					return stopped(err)
				}
				return printAlgoResult(g, res, fmt.Sprintf("%s: %d rows from %d shards\n", b.Name, res.Rows, n))
			}
			job := &algo.Local{Builtin: b, Alg: alg, Save: save, Input: in, Options: opts, Workers: workers, Epochs: epochs, Every: every,
				Sample: sample, CheckpointDir: ckptDir, Base: baseState, ModelOut: modelOut, Logf: logf}
			if t.Managed() {
				job.CheckpointDir = t.CheckpointDir()
				job.Report = report
			}
			res, err := job.Run(ctx)
			var shape *elastic.ShapeError
			switch {
			case errors.Is(err, elastic.ErrNotItsState):
				err = fmt.Errorf("%w (use another --checkpoint directory, or remove this one)", err)
			case errors.As(err, &shape) && base != "":
				err = fmt.Errorf("%w (the --base state %s was made over input of another width?)", err, base)
			}
			if errors.Is(err, context.Canceled) && ctx.Err() != nil {
				fmt.Fprintln(g.stderr, "virga algo: stopped; the checkpoint holds the state")
				return exitError{code: trial.StoppedExitCode}
			}
			if err != nil {
				return err
			}
			secs := res.Elapsed.Seconds()
			if sample > 0 {
				printSample(g.stdout, res.Rows, secs, workers, epochs, price, in, opts)
				return nil
			}
			return printAlgoResult(g, res, fmt.Sprintf("%s: %d rows in %.2fs\n", b.Name, res.Rows, secs))
		},
	}
	runE := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := runE(cmd, args); err != nil {
			return notTheServer{inFlags{err}}
		}
		return nil
	}
	f := cmd.Flags()
	f.StringVar(&in, "input", "", "the input: a file, '-' for standard input, tcp://host:port, or an http(s) URL")
	f.StringVar(&format, "format", "", "csv, jsonl or libsvm (default: by the file's suffix)")
	f.StringVar(&label, "label", "none", "CSV label column: a 1-based number, last, or none")
	f.BoolVar(&header, "header", false, "the CSV input starts with a header line")
	f.StringVar(&split, "split", "auto", "how shards divide the input: ranges (contiguous byte ranges of a plain file: each worker reads its part), rows (row i to shard i % n: each worker reads everything), auto (ranges when the input allows)")
	f.IntVar(&batch, "batch", 1000, "rows per mini-batch")
	f.IntVar(&workers, "workers", 1, "workers (shards of the input read in parallel)")
	f.IntVar(&epochs, "epochs", 1, "passes over the input (files only: a stream is read once)")
	f.StringArrayVar(&params, "param", nil, "an algorithm parameter name=value (repeatable); the trial's hyperparameters also count")
	f.StringVar(&modelOut, "model", "", "write the model here (virga.elastic.model/v1)")
	f.StringVar(&base, "base", "", "incremental training: start from this finished run's state (its checkpoint directory or state.json)")
	f.StringVar(&ckptDir, "checkpoint", "", "checkpoint directory of a run by hand: resumed from if it holds a state (under Virga: VIRGA_CHECKPOINT_DIR)")
	f.DurationVar(&every, "checkpoint-every", 10*time.Second, "how often the state is checkpointed under Virga")
	f.StringVar(&serve, "serve", "", "coordinator of worker processes: serve the state on this address (e.g. :7071) until --shards shards are read, then finalize")
	f.StringVar(&join, "join", "", "worker process: join the coordinator at this URL and read shards of --input: the ones the coordinator hands out, or --shard of --shards")
	f.IntVar(&shard, "shard", -1, "with --join: read only this shard (0-based) of --shards; default: claim shards from the coordinator until all are read")
	f.IntVar(&shards, "shards", 1, "with --serve: the number of shards the coordinator hands out (more shards than workers lets workers come and go); with --join --shard: the number of shards")
	f.DurationVar(&lease, "lease", 10*time.Second, "with --serve: a worker not heard from for this long has left (its shard goes to another)")
	f.Int64Var(&sample, "sample", 0, "estimate: run on the first N rows of each shard and print the throughput")
	f.Float64Var(&price, "price", 0, "with --sample: USD per worker-hour, to print the whole input's cost")
	return cmd
}

// checkLabel refuses a CSV input without a label column for a learner of
// labels, and --label for the formats that carry their labels.
func checkLabel(b algo.Builtin, in string, opts input.Options, given bool) error {
	if in == "" {
		return nil
	}
	f := opts.Format
	if f == "" {
		var err error
		if f, err = input.FormatOf(in); err != nil {
			return nil // the input's own error says it
		}
	}
	switch {
	case f == input.CSV && b.Labelled && opts.Label == 0:
		return usageError{fmt.Errorf("%s learns from labels: give --label, the CSV column that holds them (a 1-based number or last)", b.Name)}
	case f != input.CSV && given && opts.Label != 0:
		return usageError{fmt.Errorf("--label is for CSV input; %s input carries its labels (JSON lines: \"y\"; libsvm: the first field)", f)}
	}
	return nil
}

// checkAlgoFlags refuses flags that would be silently ignored in this
// mode of `virga algo`.
func checkAlgoFlags(cmd *cobra.Command, multi bool, serve, join string, sample int64, price float64, batch int) error {
	changed := cmd.Flags().Changed
	if !multi {
		for _, f := range []string{"shards", "shard", "lease"} {
			if changed(f) {
				return usageError{fmt.Errorf("--%s is for worker processes (--serve, --join); in one process --workers splits the input", f)}
			}
		}
	}
	if join != "" && changed("lease") {
		return usageError{errors.New("--lease is the coordinator's (--serve): its workers learn it when they join")}
	}
	if serve != "" {
		if _, _, err := net.SplitHostPort(serve); err != nil {
			return usageError{fmt.Errorf("--serve %q: want an address host:port or :port", serve)}
		}
	}
	if join == "" && changed("shard") {
		return usageError{errors.New("--shard binds a worker (--join) to one shard")}
	}
	if sample < 0 {
		return usageError{fmt.Errorf("--sample %d: want a number of rows per shard (0: no estimate)", sample)}
	}
	if price < 0 || (price > 0 && sample == 0) {
		return usageError{errors.New("--price is the USD per worker-hour of the estimate: give it with --sample N")}
	}
	if batch < 1 {
		return usageError{fmt.Errorf("--batch %d: want at least 1 row per mini-batch", batch)}
	}
	return nil
}

// algoToken is the bearer token between a coordinator and its workers:
// VIRGA_ALGO_TOKEN, or --token when given. The ranks of a gang trial
// under Virga, which all hold their trial's token, derive one from it.
func algoToken(cmd *cobra.Command, g *globals, gang algo.Gang) string {
	if f := cmd.Flag("token"); f != nil && f.Changed {
		return g.token
	}
	if t := os.Getenv("VIRGA_ALGO_TOKEN"); t != "" {
		return t
	}
	if t := os.Getenv(trial.EnvToken); t != "" && gang.WorldSize > 1 {
		sum := sha256.Sum256([]byte("virga algo coordinator\x00" + t))
		return hex.EncodeToString(sum[:])
	}
	return ""
}

// inFlags says the input package's and the learners' advice in the
// command's words: its flags instead of the Go API's options.
type inFlags struct{ error }

var optionFlags = strings.NewReplacer(
	"set Options.Format", "set --format csv, jsonl or libsvm",
	"set Options.Header", "give --header",
	"(set Options.Features)", "(set --param features=N to the largest index)",
	"(Options.Features)", "(--param features=N)",
	"(Config.Features)", "(the input's width, or --param features=N)",
	"(Options.Split = SplitRanges)", "(--split ranges)",
	"lower Options.BatchRows", "lower --batch",
	"want SplitAuto, SplitRows or SplitRanges", "want --split auto, rows or ranges",
	"(the coordinator's token is wrong or missing)", "(the coordinator's token is wrong or missing: VIRGA_ALGO_TOKEN or --token)",
)

func (e inFlags) Error() string { return optionFlags.Replace(e.error.Error()) }
func (e inFlags) Unwrap() error { return e.error }

// notTheServer marks errors of commands that do not talk to the Virga
// server (a refused connection is an input's or a coordinator's).
type notTheServer struct{ error }

func (e notTheServer) Unwrap() error { return e.error }

// stopped turns a coordinator's or worker's ErrStopped into the exit code
// of a stopped trial.
func stopped(err error) error {
	if errors.Is(err, algo.ErrStopped) {
		return exitError{code: trial.StoppedExitCode}
	}
	return err
}

// printAlgoResult prints a finished run: its saved model as JSON with
// --json, else the headline and the model.
func printAlgoResult(g *globals, res *algo.Result, headline string) error {
	if g.json {
		return g.printJSON(res.Saved)
	}
	fmt.Fprint(g.stdout, headline)
	printModel(g.stdout, res.Model, res.Saved)
	return nil
}

// printSample prints a --sample run's throughput and, when the input's
// size is known, the whole input's time and cost.
func printSample(w io.Writer, rows int64, secs float64, workers, epochs int, price float64, in string, opts input.Options) {
	perWorker := float64(rows) / secs / float64(workers)
	fmt.Fprintf(w, "sample: %d rows on %s in %.2fs: %.0f rows/s per worker\n", rows, plural(workers, "worker"), secs, perWorker)
	if total, err := algo.CountRows(in, opts); err == nil && perWorker > 0 {
		hours := float64(total) * float64(epochs) / perWorker / float64(workers) / 3600
		fmt.Fprintf(w, "whole input: %d rows", total)
		if epochs > 1 {
			fmt.Fprintf(w, " x %d passes", epochs)
		}
		fmt.Fprintf(w, ": about %s on %s", time.Duration(hours*float64(time.Hour)).Round(time.Second), plural(workers, "worker"))
		if price > 0 {
			fmt.Fprintf(w, ", $%.4f at $%g per worker-hour", hours*float64(workers)*price, price)
		}
		fmt.Fprintln(w)
	} else if err != nil {
		fmt.Fprintf(w, "whole input: its size is unknown (%v)\n", err)
	}
}

// isDir tells whether path is an existing directory.
func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// plural is "1 worker", "2 workers".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// printModel prints a finished run's model: its short tensors, the sizes
// of the others, and its saved parameters by name (the learners' chosen
// learning rate, validation loss, ...) instead of their raw "params".
func printModel(w io.Writer, m elastic.Model, saved *elastic.SavedModel) {
	keys := make([]string, 0, len(m))
	for k := range m {
		if k == "params" && saved != nil && len(saved.Params) > 0 {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		tn := m[k]
		if len(tn) > 8 {
			fmt.Fprintf(w, "  %s: %d values\n", k, len(tn))
		} else {
			fmt.Fprintf(w, "  %s: %v\n", k, []float64(tn))
		}
	}
	if saved == nil {
		return
	}
	names := make([]string, 0, len(saved.Params))
	for k := range saved.Params {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(w, "  %s: %.6g\n", k, saved.Params[k])
	}
}
