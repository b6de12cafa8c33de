// Package algo runs Virga's built-in streaming algorithms (package elastic
// and elastic/algo/*) the ways `virga algo` offers: in one process (Local),
// as the coordinator of worker processes (Coordinator), as one of those
// workers (Worker), or as a gang of processes whose rank 0 is both
// (GangLeader). It holds the registry of built-in algorithms (Builtins) and
// their parameters, checkpoints and resumes, writes the final model (a
// model file, and model/ in the checkpoint directory for the registry) and
// reports progress and final metrics to the trial. The command only parses
// flags and prints what these return.
package algo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/virga-ml/virga/elastic"
	"github.com/virga-ml/virga/elastic/input"
	"github.com/virga-ml/virga/internal/registry"
	elasticrt "github.com/virga-ml/virga/internal/serve/runtime/elastic"
)

// ErrStopped is returned when a coordinator or worker is stopped (its
// context cancelled) before the input is read: its state is in the
// checkpoint, and a restart resumes from it.
var ErrStopped = errors.New("stopped; the checkpoint holds the state")

// Reporter reports a trial's metrics at a step (the trial's Report).
type Reporter func(ctx context.Context, step int64, metrics map[string]float64) error

// Logf prints a progress line (the command prefixes its name).
type Logf func(format string, args ...any)

func (l Logf) printf(format string, args ...any) {
	if l != nil {
		l(format, args...)
	}
}

// Result is a finished run.
type Result struct {
	Model elastic.Model
	// Saved is the saved model; nil for a sample run (Local.Sample).
	Saved *elastic.SavedModel
	// Rows is the number of rows read (over all passes).
	Rows int64
	// Elapsed is the time the algorithm ran (Local only).
	Elapsed time.Duration
}

// Local runs an algorithm in this process, Workers goroutines reading one
// shard each of Input, checkpointing to CheckpointDir and resuming from it.
type Local struct {
	Builtin Builtin
	Alg     elastic.Algorithm
	Save    Saver
	Input   string
	Options input.Options
	Workers int
	Epochs  int
	Every   time.Duration
	// Sample, if positive, reads only the first Sample rows of each shard,
	// one pass, and saves no model (an estimate of the throughput).
	Sample int64
	// CheckpointDir, if set, is checkpointed to and resumed from.
	CheckpointDir string
	// Base, if set, is the state to start from (incremental training).
	Base map[string]elastic.Tensor
	// ModelOut, if set, receives the model file.
	ModelOut string
	// Report, if set, reports rows at each checkpoint and the final metrics.
	Report Reporter
	Logf   Logf
}

// Run runs the job to the end of its input. A stopped job returns an error
// that wraps context.Canceled; its state is in the checkpoint.
func (l *Local) Run(ctx context.Context) (*Result, error) {
	passes := l.Epochs
	if l.Sample > 0 {
		passes = 1 // the estimate multiplies one pass's time
	}
	job := &elastic.Job{Alg: l.Alg, Name: l.Builtin.Name, Shards: l.Workers, Epochs: passes, Every: l.Every,
		Open: func(ctx context.Context, k int, pos int64) (elastic.Source, error) {
			src, err := input.OpenShardAt(l.Input, l.Options, k, l.Workers, pos)
			if err != nil {
				return nil, err
			}
			if l.Sample > 0 {
				return &limited{Source: src, left: l.Sample - pos}, nil
			}
			return src, nil
		}}
	job.Base = l.Base
	job.CheckpointDir = l.CheckpointDir
	step := int64(0)
	if l.Report != nil {
		job.OnCheckpoint = func(ctx context.Context, rows int64) error {
			step++
			return l.Report(ctx, step, map[string]float64{"rows": float64(rows)})
		}
	}
	job.OnResume = func(rows int64) {
		l.Logf.printf("resuming from the checkpoint in %s: %d rows read", job.CheckpointDir, rows)
	}
	start := time.Now()
	m, st, err := job.Run(ctx)
	if err != nil {
		return nil, err
	}
	res := &Result{Model: m, Rows: elastic.Rows(st.Snapshot()), Elapsed: time.Since(start)}
	if l.Sample > 0 {
		return res, nil
	}
	if res.Saved, err = l.Save(m); err != nil {
		return nil, err
	}
	if l.ModelOut != "" {
		if err := elastic.SaveModelFile(l.ModelOut, res.Saved); err != nil {
			return nil, err
		}
	}
	if err := writeModelDir(l.Builtin, l.CheckpointDir, res.Saved); err != nil {
		return nil, err
	}
	if l.Report != nil {
		if err := l.Report(ctx, step+1, FinalMetrics(m, res.Saved, res.Rows)); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// writeModelDir writes a finished run's model as a model directory,
// CKPT/model/ (the model file and virga-model.json: what `virga models
// register --from-trial` takes), when the run has a checkpoint directory
// and the algorithm's model is one Virga serves; it is written before the
// final report, which saves the directory.
func writeModelDir(b Builtin, ckptDir string, saved *elastic.SavedModel) error {
	if ckptDir == "" || !b.Serves {
		return nil
	}
	dir := filepath.Join(ckptDir, registry.ModelDir)
	if err := elasticrt.WriteDir(dir, saved); err != nil {
		return fmt.Errorf("writing the model directory %s: %w", dir, err)
	}
	return nil
}

// FinalMetrics are a finished run's metrics for the trial: the model's
// scalars, the saved model's parameters (e.g. the linear learner's
// validation_loss, for an experiment's objective) and the rows read.
func FinalMetrics(m elastic.Model, saved *elastic.SavedModel, rows int64) map[string]float64 {
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

// limited ends a shard after a number of rows (for Local.Sample).
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

// CountRows counts an input's rows by reading it (files only).
func CountRows(uri string, opts input.Options) (int64, error) {
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

// Gang is this process's place in a trial of several processes: the
// rendezvous variables Virga sets for gangs (and torchrun-style launchers).
type Gang struct {
	Rank, WorldSize int
	MasterAddr      string
	MasterPort      int
}

// GangFromEnv reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT with
// getenv (os.Getenv); without WORLD_SIZE (or 1) the process is alone.
func GangFromEnv(getenv func(string) string) (Gang, error) {
	g := Gang{WorldSize: 1}
	ws := getenv("WORLD_SIZE")
	if ws == "" {
		return g, nil
	}
	var err error
	num := func(name string) int {
		v, e := strconv.Atoi(getenv(name))
		if e != nil && err == nil {
			err = fmt.Errorf("%s=%q: want a number (a gang's rendezvous variables: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)", name, getenv(name))
		}
		return v
	}
	g.WorldSize = num("WORLD_SIZE")
	if err != nil || g.WorldSize <= 1 {
		return Gang{WorldSize: 1}, err
	}
	g.Rank, g.MasterPort, g.MasterAddr = num("RANK"), num("MASTER_PORT"), getenv("MASTER_ADDR")
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

// Endpoints are where a gang's coordinator (rank 0) listens (listen), the
// URL its workers join (url) and the shards it hands out: at least shards,
// 4 per rank. A gang on one machine keeps its coordinator on loopback; one
// across machines listens on every address and needs a token between its
// ranks (under Virga, derived from the trial's).
func (g Gang) Endpoints(shards int, token string) (listen, url string, n int, err error) {
	n = max(shards, 4*g.WorldSize)
	master := net.JoinHostPort(g.MasterAddr, strconv.Itoa(g.MasterPort))
	url, listen = "http://"+master, master
	if !Loopback(master) {
		if token == "" {
			return "", "", 0, fmt.Errorf("a gang across machines (MASTER_ADDR %s) needs a token between its ranks: set VIRGA_ALGO_TOKEN on every rank (under Virga the trial's token is used)", g.MasterAddr)
		}
		listen = ":" + strconv.Itoa(g.MasterPort)
	}
	return listen, url, n, nil
}

// Loopback tells whether a listen address is this machine's only.
func Loopback(addr string) bool {
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
