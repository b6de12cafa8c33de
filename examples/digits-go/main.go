// Command digits-go trains a small multilayer perceptron on the UCI digits
// data set (examples/data) and speaks Virga's trial protocol through
// sdk/go/trial: hyperparameters from VIRGA_HPARAMS, a checkpoint in
// VIRGA_CHECKPOINT_DIR after every epoch (with the network in model/, a model
// directory Virga's registry takes: see model.go), a metrics report after every
// checkpoint, and a prompt exit on SIGTERM. It uses only the standard library.
//
// Run it by hand from the repository root:
//
//	go run ./examples/digits-go --lr 0.1 --hidden 64 --epochs 20
//
// Hyperparameters come from VIRGA_HPARAMS when set; flags given on the command
// line override them. Without Virga the checkpoint goes to --checkpoint-dir
// (default: a new temporary directory); a directory that already holds a
// checkpoint resumes after its epoch.
//
// Exit codes: 0 when all epochs are trained or the searcher stopped the
// trial; 143 after SIGTERM or SIGINT (the current epoch is abandoned and the
// checkpoint of the previous one stands); 3 when Virga says this attempt is
// superseded; 2 for bad flags; 1 for other errors.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/virga-ml/virga/examples/digits-go/mlp"
	"github.com/virga-ml/virga/sdk/go/trial"
)

// Exit codes (see the package comment).
const (
	exitOK         = 0
	exitError      = 1
	exitUsage      = 2
	exitSuperseded = 3
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main with its inputs and outputs passed in; it returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	t, err := trial.FromEnv()
	if err != nil {
		fmt.Fprintf(stderr, "digits-go: %v\n", err)
		return exitUsage
	}

	// Hyperparameters from VIRGA_HPARAMS are the flags' defaults, so an explicit flag wins.
	fs := flag.NewFlagSet("digits-go", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	fs.Float64Var(&cfg.LR, "lr", t.Float("lr", 0.1), "learning rate")
	fs.IntVar(&cfg.Hidden, "hidden", t.Int("hidden", 64), "hidden units")
	fs.Float64Var(&cfg.L2, "l2", t.Float("l2", 1e-4), "L2 weight decay (weights only)")
	fs.Float64Var(&cfg.Momentum, "momentum", t.Float("momentum", 0.9), "SGD momentum (0 for none)")
	fs.IntVar(&cfg.Epochs, "epochs", t.Int("epochs", 20), "epochs to train in all")
	fs.IntVar(&cfg.Batch, "batch", t.Int("batch", 32), "mini-batch size")
	seed := fs.Int("seed", t.Int("seed", 1), "seed of the initial weights and the shuffles")
	dataPath := fs.String("data", mlp.DefaultDataPath, "the data set (gzip CSV); the default is looked for in the working directory and its parents")
	ckptDir := fs.String("checkpoint-dir", "", "checkpoint directory when not run by Virga (default: a new temporary directory)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "digits-go: unexpected argument %q (all settings are flags)\n", fs.Arg(0))
		return exitUsage
	}
	cfg.Seed = int64(*seed)
	dataExplicit := false
	fs.Visit(func(f *flag.Flag) { dataExplicit = dataExplicit || f.Name == "data" })

	if *ckptDir != "" {
		t.SetDefaultCheckpointDir(*ckptDir)
	}
	cfg.CheckpointDir = t.CheckpointDir()
	if err := cfg.validate(); err != nil {
		fmt.Fprintf(stderr, "digits-go: %v\n", err)
		return exitUsage
	}

	path, err := mlp.ResolveDataPath(*dataPath, dataExplicit)
	if err != nil {
		fmt.Fprintf(stderr, "digits-go: %v\n", err)
		return exitError
	}
	ds, err := mlp.LoadDataset(path)
	if err != nil {
		fmt.Fprintf(stderr, "digits-go: %v\n", err)
		return exitError
	}
	fmt.Fprintf(stdout, "digits-go: %d training and %d validation rows; lr=%g hidden=%d l2=%g momentum=%g batch=%d epochs=%d seed=%d; checkpoints in %s\n",
		len(ds.TrainX), len(ds.ValX), cfg.LR, cfg.Hidden, cfg.L2, cfg.Momentum, cfg.Batch, cfg.Epochs, cfg.Seed, cfg.CheckpointDir)

	_, how, err := train(context.Background(), cfg, ds, t, t.Stopping(), stdout)
	switch {
	case errors.Is(err, trial.ErrSuperseded):
		fmt.Fprintln(stderr, "digits-go: Virga says this attempt is no longer current; exiting")
		return exitSuperseded
	case err != nil:
		fmt.Fprintf(stderr, "digits-go: %v\n", err)
		return exitError
	case how == interrupted:
		return trial.StoppedExitCode
	default:
		return exitOK
	}
}
