package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/virga-ml/virga/elastic"
	"github.com/virga-ml/virga/elastic/algo/fm"
	"github.com/virga-ml/virga/elastic/algo/kmeans"
	"github.com/virga-ml/virga/elastic/algo/linear"
	"github.com/virga-ml/virga/elastic/algo/pca"
	"github.com/virga-ml/virga/elastic/input"
	"github.com/virga-ml/virga/internal/registry"
	elasticrt "github.com/virga-ml/virga/internal/serve/runtime/elastic"
	"github.com/virga-ml/virga/sdk/go/trial"
)

// builtin is one of Virga's built-in streaming algorithms.
type builtin struct {
	name, summary string
	params        []string // the names --param takes (and "features", the input's width, for all)
	labelled      bool     // it learns from labels
	wide          bool     // its state's size is the input's width
	// serves: its model predicts, and Virga serves it (a run with a
	// checkpoint directory writes it there as model/ at the end).
	serves bool
	// make builds the algorithm from its parameters (flags --param k=v and
	// the trial's hyperparameters) and the input's width (its number of
	// feature columns), and returns how to save its final model.
	make func(params map[string]float64, width int) (elastic.Algorithm, saver, error)
}

type saver func(m elastic.Model) (*elastic.SavedModel, error)

var builtins = map[string]builtin{
	"median": {name: "median", summary: "the median of the first column, by the SGD of Liberty et al. (steps of at most batch/sqrt(rows) in the data's units: for long inputs)",
		make: func(ps map[string]float64, _ int) (elastic.Algorithm, saver, error) {
			return elastic.Median{}, vectors("median", ps), nil
		}},
	"moments": {name: "moments", summary: "count, mean and variance of every column (exact, one pass)",
		make: func(ps map[string]float64, _ int) (elastic.Algorithm, saver, error) {
			return elastic.Moments{}, vectors("moments", ps), nil
		}},
	"linear-learner": {name: "linear-learner", labelled: true, wide: true, serves: true, params: []string{"classes", "learning_rate", "l2", "validation_fraction"}, summary: "linear or logistic regression by SGD, many learning rates and L2 at once, the best on validation kept (params: classes (0: regression, 2: binary, K: multiclass), learning_rate, l2, validation_fraction)",
		make: makeLinear},
	"kmeans": {name: "kmeans", serves: true, params: []string{"k", "seed"}, summary: "streaming mini-batch k-means, the collected centres reduced to k by k-means++ (params: k, seed)",
		make: func(ps map[string]float64, _ int) (elastic.Algorithm, saver, error) {
			k := int(ps["k"])
			if k < 1 {
				return nil, nil, errors.New("k: the number of clusters is required (--param k=10)")
			}
			return &kmeans.KMeans{K: k, Seed: uint64(ps["seed"])}, func(m elastic.Model) (*elastic.SavedModel, error) {
				km, err := kmeans.FromModel(m, k)
				if err != nil {
					return nil, err
				}
				return km.Saved(ps), nil
			}, nil
		}},
	"factorization-machines": {name: "factorization-machines", labelled: true, wide: true, serves: true, params: []string{"classes", "factors", "learning_rate", "l2_w", "l2_v", "sgd", "seed"}, summary: "factorization machine by AdaGrad (or SGD), one model (params: classes (0: regression, 2: binary), factors, learning_rate, l2_w, l2_v, sgd (1: plain SGD), seed)",
		make: makeFM},
	"pca": {name: "pca", serves: true, params: []string{"k"}, summary: "principal components from the streaming covariance (params: k)",
		make: func(ps map[string]float64, _ int) (elastic.Algorithm, saver, error) {
			k := int(ps["k"])
			if k < 1 {
				return nil, nil, errors.New("k: the number of components is required (--param k=10)")
			}
			return &pca.PCA{K: k}, func(m elastic.Model) (*elastic.SavedModel, error) {
				pm, err := pca.FromModel(m)
				if err != nil {
					return nil, err
				}
				return pm.Saved(ps), nil
			}, nil
		}},
}

func makeLinear(ps map[string]float64, width int) (elastic.Algorithm, saver, error) {
	cfg := linear.Config{Features: width, Predictor: linear.Regressor}
	switch k := int(ps["classes"]); {
	case k == 2:
		cfg.Predictor = linear.Binary
	case k > 2:
		cfg.Predictor, cfg.Classes = linear.Multiclass, k
	case k < 0:
		return nil, nil, fmt.Errorf("classes: want 0 (regression), 2 (binary) or the number of classes (got %d)", k)
	}
	if lr, ok := ps["learning_rate"]; ok {
		cfg.LearningRates = []float64{lr}
	}
	if l2, ok := ps["l2"]; ok {
		cfg.L2 = []float64{l2}
	}
	if v, ok := ps["validation_fraction"]; ok {
		cfg.ValidationFraction = v
	}
	l, err := linear.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	return l, l.Save, nil
}

func makeFM(ps map[string]float64, width int) (elastic.Algorithm, saver, error) {
	cfg := fm.Config{Features: width, Predictor: fm.Regressor, Factors: int(ps["factors"]),
		LearningRate: ps["learning_rate"], L2W: ps["l2_w"], L2V: ps["l2_v"], Seed: uint64(ps["seed"])}
	switch k := int(ps["classes"]); k {
	case 0:
	case 2:
		cfg.Predictor = fm.Binary
	default:
		return nil, nil, fmt.Errorf("classes: want 0 (regression) or 2 (binary) (got %d)", k)
	}
	if ps["sgd"] > 0 {
		cfg.Optimizer = fm.SGD
	}
	f, err := fm.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	return f, f.Save, nil
}

// vectors saves a model whose tensors are all vectors.
func vectors(algo string, params map[string]float64) saver {
	return func(m elastic.Model) (*elastic.SavedModel, error) {
		sm := &elastic.SavedModel{Algorithm: algo, Params: params, Tensors: map[string]elastic.SavedTensor{}}
		for k, t := range m {
			sm.Tensors[k] = elastic.SavedTensor{Shape: []int{len(t)}, Data: t}
		}
		return sm, nil
	}
}

func builtinNames() []string {
	var names []string
	for n := range builtins {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

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

Algorithms: ` + strings.Join(builtinNames(), ", "),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, ok := builtins[args[0]]
			if !ok {
				return usageError{fmt.Errorf("unknown algorithm %q (known: %s)", args[0], strings.Join(builtinNames(), ", "))}
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
			gang, err := gangFromEnv()
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
			if serve != "" && token == "" && !loopback(serve) {
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
			ps, ignored, err := algoParams(b, params, t.HParams())
			if err != nil {
				return usageError{err}
			}
			if len(ignored) > 0 {
				fmt.Fprintf(g.stderr, "virga algo: hyperparameters %s are not parameters of %s; ignored\n", strings.Join(ignored, ", "), b.name)
			}
			// The width: the learners' state is sized by it, and every
			// reader of a libsvm input must produce rows of the same one.
			width := int(ps["features"])
			svm := opts.Format == input.LibSVM
			if f, err := input.FormatOf(in); opts.Format == "" && err == nil {
				svm = f == input.LibSVM
			}
			if width == 0 && in != "" && (b.wide || svm) {
				if in == "-" || input.IsNetwork(in) {
					if b.wide {
						return usageError{fmt.Errorf("the width of %s, a stream, cannot be read in advance: give --param features=D", in)}
					}
				} else if width, err = input.Width(cmd.Context(), in, opts); err != nil {
					return err
				}
			}
			if svm && width > 0 {
				opts.Features = width
			}
			alg, save, err := b.make(ps, width)
			if err != nil {
				return usageError{fmt.Errorf("%s: %w", b.name, err)}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			if join != "" {
				if !cmd.Flags().Changed("shards") {
					shards = 0 // the coordinator's
				}
				return runWorker(ctx, g, b.name, alg, join, in, opts, shard, shards, token)
			}
			var baseState map[string]elastic.Tensor
			if base != "" && gang.Rank == 0 {
				c, err := elastic.ReadCheckpoint(base)
				if err == nil {
					err = c.Fits(ctx, b.name, alg)
				}
				if err != nil {
					return fmt.Errorf("--base %s: %w", base, err)
				}
				baseState = c.Tensors
			}
			if serve != "" {
				c := &coordinator{addr: serve, shards: shards, passes: epochs, lease: lease, ckptDir: ckptDir, every: every, modelOut: modelOut, base: baseState, token: token}
				return c.run(ctx, g, b, alg, save)
			}
			if gang.WorldSize > 1 {
				// A trial of several processes (resources.nodes /
				// processes_per_node): rank 0 is the coordinator and a
				// worker, the others workers; they share 4 shards each.
				n := max(shards, 4*gang.WorldSize)
				url := "http://" + net.JoinHostPort(gang.MasterAddr, strconv.Itoa(gang.MasterPort))
				// A gang on one machine keeps its coordinator on loopback; one
				// across machines listens on every address and needs a token
				// (under Virga, derived from the trial's).
				master := net.JoinHostPort(gang.MasterAddr, strconv.Itoa(gang.MasterPort))
				addr := master
				if !loopback(master) {
					if token == "" {
						return usageError{fmt.Errorf("a gang across machines (MASTER_ADDR %s) needs a token between its ranks: set VIRGA_ALGO_TOKEN on every rank (under Virga the trial's token is used)", gang.MasterAddr)}
					}
					addr = ":" + strconv.Itoa(gang.MasterPort)
				}
				if gang.Rank > 0 {
					return runWorker(ctx, g, b.name, alg, url, in, opts, -1, 0, token)
				}
				c := &coordinator{addr: addr, shards: n, passes: epochs, lease: lease, ckptDir: ckptDir, every: every, modelOut: modelOut, base: baseState,
					expect: gang.WorldSize, token: token}
				if t.Managed() {
					c.ckptDir = t.CheckpointDir()
					c.report = func(ctx context.Context, step int64, metrics map[string]float64) error {
						_, err := t.Report(ctx, step, metrics)
						return err
					}
				}
				return runGangLeader(ctx, g, c, b, alg, save, in, opts)
			}
			passes := epochs
			if sample > 0 {
				passes = 1 // the estimate multiplies one pass's time
			}
			job := &elastic.Job{Alg: alg, Name: b.name, Shards: workers, Epochs: passes, Every: every,
				Open: func(ctx context.Context, k int, pos int64) (elastic.Source, error) {
					src, err := input.OpenShardAt(in, opts, k, workers, pos)
					if err != nil {
						return nil, err
					}
					if sample > 0 {
						return &limited{Source: src, left: sample - pos}, nil
					}
					return src, nil
				}}
			job.Base = baseState
			step := int64(0)
			job.CheckpointDir = ckptDir
			if t.Managed() {
				job.CheckpointDir = t.CheckpointDir()
				job.OnCheckpoint = func(ctx context.Context, rows int64) error {
					step++
					_, err := t.Report(ctx, step, map[string]float64{"rows": float64(rows)})
					return err
				}
			}
			job.OnResume = func(rows int64) {
				fmt.Fprintf(g.stderr, "virga algo: resuming from the checkpoint in %s: %d rows read\n", job.CheckpointDir, rows)
			}
			start := time.Now()
			m, st, err := job.Run(ctx)
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
			rows := elastic.Rows(st.Snapshot())
			secs := time.Since(start).Seconds()
			if sample > 0 {
				perWorker := float64(rows) / secs / float64(workers)
				fmt.Fprintf(g.stdout, "sample: %d rows on %s in %.2fs: %.0f rows/s per worker\n", rows, plural(workers, "worker"), secs, perWorker)
				if total, err := countRows(in, opts); err == nil && perWorker > 0 {
					hours := float64(total) * float64(epochs) / perWorker / float64(workers) / 3600
					fmt.Fprintf(g.stdout, "whole input: %d rows", total)
					if epochs > 1 {
						fmt.Fprintf(g.stdout, " x %d passes", epochs)
					}
					fmt.Fprintf(g.stdout, ": about %s on %s", time.Duration(hours*float64(time.Hour)).Round(time.Second), plural(workers, "worker"))
					if price > 0 {
						fmt.Fprintf(g.stdout, ", $%.4f at $%g per worker-hour", hours*float64(workers)*price, price)
					}
					fmt.Fprintln(g.stdout)
				} else if err != nil {
					fmt.Fprintf(g.stdout, "whole input: its size is unknown (%v)\n", err)
				}
				return nil
			}
			saved, err := save(m)
			if err != nil {
				return err
			}
			if modelOut != "" {
				if err := elastic.SaveModelFile(modelOut, saved); err != nil {
					return err
				}
			}
			if err := writeModelDir(b, job.CheckpointDir, saved); err != nil {
				return err
			}
			if t.Managed() {
				if _, err := t.Report(ctx, step+1, finalMetrics(m, saved, rows)); err != nil {
					return err
				}
			}
			if g.json {
				return g.printJSON(saved)
			}
			fmt.Fprintf(g.stdout, "%s: %d rows in %.2fs\n", b.name, rows, secs)
			printModel(g.stdout, m, saved)
			return nil
		},
	}
	run := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := run(cmd, args); err != nil {
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
func checkLabel(b builtin, in string, opts input.Options, given bool) error {
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
	case f == input.CSV && b.labelled && opts.Label == 0:
		return usageError{fmt.Errorf("%s learns from labels: give --label, the CSV column that holds them (a 1-based number or last)", b.name)}
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
func algoToken(cmd *cobra.Command, g *globals, gang gangEnv) string {
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

// loopback tells whether a listen address is this machine's only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
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

// algoParams merges --param name=value with the trial's numeric
// hyperparameters (flags win).
func algoParams(b builtin, flags []string, hp map[string]any) (ps map[string]float64, ignored []string, err error) {
	known := func(k string) bool { return k == "features" || slices.Contains(b.params, k) }
	ps = map[string]float64{}
	for k, v := range hp {
		if !known(k) {
			ignored = append(ignored, k)
			continue
		}
		switch x := v.(type) {
		case float64:
			ps[k] = x
		case json.Number:
			if f, err := x.Float64(); err == nil {
				ps[k] = f
			}
		case bool:
			if x {
				ps[k] = 1
			} else {
				ps[k] = 0
			}
		}
	}
	for _, p := range flags {
		k, v, ok := strings.Cut(p, "=")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || k == "" || err != nil {
			return nil, nil, fmt.Errorf("--param %q: want name=number", p)
		}
		if !known(k) {
			names := "none but features"
			if len(b.params) > 0 {
				names = strings.Join(b.params, ", ") + ", features"
			}
			return nil, nil, fmt.Errorf("--param %s: %s has no parameter %q (its parameters: %s)", p, b.name, k, names)
		}
		ps[k] = f
	}
	sort.Strings(ignored)
	return ps, ignored, nil
}

// limited ends a shard after a number of rows (for --sample).
type limited struct {
	elastic.Source
	left int64
}

// Close closes the shard's source.
func (l *limited) Close() error {
	if c, ok := l.Source.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

func (l *limited) Next(ctx context.Context) (*elastic.Batch, error) {
	if l.left <= 0 {
		return nil, io.EOF
	}
	b, err := l.Source.Next(ctx)
	if err != nil {
		return nil, err
	}
	if n := int64(b.Rows()); n > l.left {
		cut := &elastic.Batch{X: b.X[:l.left*int64(b.Cols)], Cols: b.Cols}
		if b.Y != nil {
			cut.Y = b.Y[:l.left]
		}
		b = cut
	}
	l.left -= int64(b.Rows())
	return b, nil
}

// countRows counts an input's rows by reading it (files only).
func countRows(uri string, opts input.Options) (int64, error) {
	if uri == "-" || input.IsNetwork(uri) {
		return 0, errors.New("a stream's length is not known in advance")
	}
	src, err := input.Open(uri, opts)
	if err != nil {
		return 0, err
	}
	defer src.Close()
	ctx := context.Background()
	for {
		_, err := src.Next(ctx)
		if errors.Is(err, io.EOF) {
			return src.Pos(), nil
		}
		if err != nil {
			return 0, err
		}
	}
}

// runWorker is one worker process: it joins the coordinator and reads the
// shards it hands out (shard < 0) or shard shard of shards (shards 0: as
// many as the coordinator has), starting where the state says each was
// read to, as many passes as the coordinator says. When the coordinator
// cannot be reached or has dropped it (it restarts) it joins again, for up
// to a minute after it last reached it; other errors end it.
func runWorker(ctx context.Context, g *globals, name string, alg elastic.Algorithm, url, in string, opts input.Options, shard, shards int, token string) error {
	if shard < -1 || (shards > 0 && shard >= shards) {
		return usageError{fmt.Errorf("--shard %d: want 0 to %d (or none: the coordinator hands shards out)", shard, shards-1)}
	}
	var read []int // the shards this worker opened
	open := func(ctx context.Context, k, n int, pos int64) (elastic.Source, error) {
		if len(read) == 0 || read[len(read)-1] != k {
			read = append(read, k)
		}
		return input.OpenShardAt(in, opts, k, n, pos)
	}
	what := "worker of shard " + strconv.Itoa(shard)
	if shard < 0 {
		what = "worker"
	}
	var last error
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		w, err := elastic.JoinAs(ctx, url, token, name)
		if err == nil {
			deadline = time.Now().Add(time.Minute) // it was reached: a minute from now
			if shard >= 0 {
				err = runBound(ctx, alg, w, shard, shards, open)
			} else {
				err = w.Work(ctx, alg, 200*time.Millisecond, open)
			}
			if err == nil {
				_ = w.Leave(ctx)
				fmt.Fprintf(g.stderr, "virga algo: worker %d: done; read shards %v\n", w.Worker(), read)
				return nil
			}
			w.Close()
		}
		if ctx.Err() != nil {
			return exitError{code: trial.StoppedExitCode}
		}
		// Only the coordinator being away (restarting) is worth waiting
		// for; the input's or the algorithm's errors are not.
		if !errors.Is(err, elastic.ErrNotMember) && !errors.Is(err, elastic.ErrUnreachable) {
			if w != nil {
				_ = w.Leave(context.WithoutCancel(ctx)) // its shard goes to another now
			}
			return fmt.Errorf("%s: %w", what, err)
		}
		if last == nil || err.Error() != last.Error() {
			fmt.Fprintf(g.stderr, "virga algo: %s: %v; joining again\n", what, err)
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s: the coordinator at %s: %w", what, url, last)
}

// runBound reads one given shard: it claims it (no other worker may read
// it meanwhile) and checks that the coordinator splits the input as this
// worker was told.
func runBound(ctx context.Context, alg elastic.Algorithm, w *elastic.RemoteState, shard, shards int, open elastic.ShardOpener) error {
	// A worker that held the shard and died holds it until its lease
	// runs out: wait that long (twice, for slack), no longer.
	c, err := w.ClaimShard(ctx, shard)
	for end := time.Now().Add(2 * w.Lease()); errors.Is(err, elastic.ErrHeld) && time.Now().Before(end); {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		c, err = w.ClaimShard(ctx, shard)
	}
	if err != nil {
		return err
	}
	if shards > 0 && c.Shards != shards {
		return fmt.Errorf("--shards %d: the coordinator splits the input into %d shards", shards, c.Shards)
	}
	for !c.Done {
		err := elastic.RunShardPasses(ctx, alg, w, shard, c.Passes, func(ctx context.Context, k int, pos int64) (elastic.Source, error) {
			return open(ctx, k, c.Shards, pos)
		})
		if err != nil {
			return err
		}
		// The shard is done; the worker leaves once the coordinator has
		// checkpointed that (if it restarts before, the shard is not done
		// in the state it resumes from, and this worker reads the rest).
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if c, err = w.ClaimShard(ctx, shard); err != nil {
			return err
		}
	}
	return nil
}

// coordinator is a run of `virga algo --serve` (or rank 0 of a gang).
type coordinator struct {
	addr     string // to listen on
	shards   int
	passes   int
	expect   int // the workers to wait for at the end (a gang's size)
	lease    time.Duration
	ckptDir  string // the state is checkpointed here and resumed from
	every    time.Duration
	modelOut string
	base     map[string]elastic.Tensor // incremental training: the state to start from
	token    string                    // workers' bearer token, if any
	// report, if set, reports progress (rows) after each checkpoint and the
	// final metrics: the coordinator is the trial's voice.
	report func(ctx context.Context, step int64, metrics map[string]float64) error
	// listening, if set, receives the address served on.
	listening chan<- string
}

// run serves the state to worker processes until every shard is read,
// checkpointing it to ckptDir as it goes (a restarted coordinator resumes
// from it), then finalizes and saves the model.
func (c *coordinator) run(ctx context.Context, g *globals, b builtin, alg elastic.Algorithm, save saver) error {
	st := elastic.NewMemState(0)
	resumed := false
	if c.ckptDir != "" {
		if ck, err := elastic.ReadCheckpoint(c.ckptDir); err == nil {
			if err := ck.Fits(ctx, b.name, alg); err != nil {
				return fmt.Errorf("%s: %w (use another --checkpoint directory, or remove this one)", filepath.Join(c.ckptDir, elastic.StateFile), err)
			}
			st.Restore(ck.Tensors)
			resumed = true
			fmt.Fprintf(g.stderr, "virga algo: resuming from the checkpoint in %s: %d rows read\n", c.ckptDir, elastic.Rows(ck.Tensors))
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if !resumed {
		if c.base != nil {
			st.Restore(elastic.AlgorithmState(c.base))
		} else if err := alg.Initialize(ctx, st); err != nil {
			return err
		}
	}
	if err := elastic.CheckLayout(ctx, st, c.shards, max(c.passes, 1)); err != nil {
		return fmt.Errorf("%s: %w (start the coordinator with the --shards and --epochs it had, or remove the checkpoint)", c.ckptDir, err)
	}
	coord := elastic.NewCoordinator(st)
	coord.Token = c.token
	coord.Algorithm = b.name
	coord.Shards, coord.Passes = c.shards, max(c.passes, 1)
	coord.Lease = c.lease
	// With a checkpoint, a worker leaves only once the end of its shards
	// is in it: one that left on this process's word, which then died
	// before checkpointing, would leave the rest of its shard to no one.
	coord.Durable = c.ckptDir != ""
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: coord, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go coord.Run(cctx)
	fmt.Fprintf(g.stderr, "virga algo: coordinator of %d shards on %s\n", c.shards, ln.Addr())
	if c.listening != nil {
		c.listening <- ln.Addr().String()
	}
	var step int64
	checkpoint := func(ctx context.Context) error {
		if c.ckptDir == "" {
			return nil
		}
		snap := st.Snapshot()
		if err := elastic.WriteCheckpoint(c.ckptDir, elastic.Checkpoint{Algorithm: b.name, Tensors: snap}); err != nil {
			return err
		}
		coord.Saved(snap)
		if c.report == nil {
			return nil
		}
		step++
		return c.report(ctx, step, map[string]float64{"rows": float64(elastic.Rows(snap))})
	}
	done := make(chan error, 1)
	go func() { done <- elastic.WaitShards(cctx, st, c.shards, 20*time.Millisecond) }()
	tick := time.NewTicker(c.every)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				_ = checkpoint(context.WithoutCancel(ctx))
				if ctx.Err() != nil {
					return exitError{code: trial.StoppedExitCode}
				}
				return err
			}
			m, err := alg.Finalize(ctx, st)
			if err != nil {
				return err
			}
			if c.ckptDir != "" {
				snap := st.Snapshot()
				if err := elastic.WriteCheckpoint(c.ckptDir, elastic.Checkpoint{Algorithm: b.name, Tensors: snap}); err != nil {
					return err
				}
				coord.Saved(snap)
			}
			saved, err := save(m)
			if err != nil {
				return err
			}
			if c.modelOut != "" {
				if err := elastic.SaveModelFile(c.modelOut, saved); err != nil {
					return err
				}
			}
			if err := writeModelDir(b, c.ckptDir, saved); err != nil {
				return err
			}
			rows := elastic.Rows(st.Snapshot())
			if c.report != nil {
				if err := c.report(ctx, step+1, finalMetrics(m, saved, rows)); err != nil {
					return err
				}
			}
			// Workers waiting for a shard learn that none is left at
			// their next claim and leave; serve them that long (at most a
			// lease), so that they end instead of looking for a coordinator
			// that is gone. A gang's coordinator also waits (at most a
			// minute) for every rank to have come and gone: a rank that
			// starts late must find it to learn that all is read.
			end, gangEnd := time.Now().Add(c.lease), time.Now().Add(time.Minute)
			for (coord.Members() > 0 && time.Now().Before(end)) || (coord.Left() < c.expect && time.Now().Before(gangEnd)) {
				time.Sleep(20 * time.Millisecond)
			}
			if g.json {
				return g.printJSON(saved)
			}
			fmt.Fprintf(g.stdout, "%s: %d rows from %d shards\n", b.name, rows, c.shards)
			printModel(g.stdout, m, saved)
			return nil
		case <-tick.C:
			if err := checkpoint(ctx); err != nil {
				return err
			}
		}
	}
}

// writeModelDir writes a finished run's model as a model directory,
// CKPT/model/ (the model file and virga-model.json: what `virga models
// register --from-trial` takes), when the run has a checkpoint directory
// and the algorithm's model is one Virga serves; it is written before the
// final report, which saves the directory.
func writeModelDir(b builtin, ckptDir string, saved *elastic.SavedModel) error {
	if ckptDir == "" || !b.serves {
		return nil
	}
	dir := filepath.Join(ckptDir, registry.ModelDir)
	if err := elasticrt.WriteDir(dir, saved); err != nil {
		return fmt.Errorf("writing the model directory %s: %w", dir, err)
	}
	return nil
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

// finalMetrics are a finished run's metrics for the trial: the model's
// scalars, the saved model's parameters (e.g. the linear learner's
// validation_loss, for an experiment's objective) and the rows read.
func finalMetrics(m elastic.Model, saved *elastic.SavedModel, rows int64) map[string]float64 {
	metrics := map[string]float64{}
	for k, tn := range m {
		if len(tn) == 1 {
			metrics[k] = tn[0]
		}
	}
	for k, v := range saved.Params {
		metrics[k] = v
	}
	metrics["rows"] = float64(rows)
	return metrics
}

// gangEnv is this process's place in a trial of several processes: the
// rendezvous variables Virga sets for gangs (and torchrun-style launchers).
type gangEnv struct {
	Rank, WorldSize int
	MasterAddr      string
	MasterPort      int
}

// gangFromEnv reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; without
// WORLD_SIZE (or 1) the process is alone.
func gangFromEnv() (gangEnv, error) {
	g := gangEnv{WorldSize: 1}
	ws := os.Getenv("WORLD_SIZE")
	if ws == "" {
		return g, nil
	}
	var err error
	num := func(name string) int {
		v, e := strconv.Atoi(os.Getenv(name))
		if e != nil && err == nil {
			err = fmt.Errorf("%s=%q: want a number (a gang's rendezvous variables: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)", name, os.Getenv(name))
		}
		return v
	}
	g.WorldSize = num("WORLD_SIZE")
	if err != nil || g.WorldSize <= 1 {
		return gangEnv{WorldSize: 1}, err
	}
	g.Rank, g.MasterPort, g.MasterAddr = num("RANK"), num("MASTER_PORT"), os.Getenv("MASTER_ADDR")
	switch {
	case err != nil:
	case g.Rank < 0 || g.Rank >= g.WorldSize:
		err = fmt.Errorf("RANK=%d: want 0 to %d (WORLD_SIZE=%d)", g.Rank, g.WorldSize-1, g.WorldSize)
	case g.MasterAddr == "":
		err = errors.New("MASTER_ADDR is empty: a gang's rank 0 address is required")
	case g.MasterPort <= 0 || g.MasterPort > 65535:
		err = fmt.Errorf("MASTER_PORT=%d: want a TCP port", g.MasterPort)
	}
	return g, err
}

// runGangLeader is rank 0 of a gang: the coordinator, and a worker on it.
// Either failing stops the other.
func runGangLeader(ctx context.Context, g *globals, c *coordinator, b builtin, alg elastic.Algorithm, save saver, in string, opts input.Options) error {
	listening := make(chan string, 1)
	c.listening = listening
	cctx, stopCoordinator := context.WithCancel(ctx)
	defer stopCoordinator()
	cerr := make(chan error, 1)
	go func() { cerr <- c.run(cctx, g, b, alg, save) }()
	var addr string
	select {
	case addr = <-listening:
	case err := <-cerr:
		return err
	}
	_, port, _ := net.SplitHostPort(addr)
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	werr := make(chan error, 1)
	go func() { werr <- runWorker(wctx, g, b.name, alg, "http://127.0.0.1:"+port, in, opts, -1, 0, c.token) }()
	select {
	case err := <-werr:
		if err != nil && ctx.Err() == nil {
			stopCoordinator()
			<-cerr
			return err
		}
		return <-cerr
	case err := <-cerr:
		if err != nil {
			stopWorker()
			<-werr
			return err
		}
		return <-werr
	}
}
