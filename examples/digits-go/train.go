package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/virga-ml/virga/examples/digits-go/mlp"
	"github.com/virga-ml/virga/sdk/go/trial"
)

// config is one training run's settings: the hyperparameters, how long to
// train and where to keep checkpoints.
type config struct {
	mlp.Settings
	Epochs int // epochs to train in all (a resumed run trains the remainder)

	CheckpointDir string
}

// validate says which setting is out of range, naming its flag.
func (c config) validate() error {
	switch {
	case !(c.LR > 0) || math.IsInf(c.LR, 0):
		return fmt.Errorf("--lr %v: want a positive number", c.LR)
	case c.Hidden < 1:
		return fmt.Errorf("--hidden %d: want at least 1", c.Hidden)
	case !(c.L2 >= 0) || math.IsInf(c.L2, 0):
		return fmt.Errorf("--l2 %v: want a number >= 0", c.L2)
	case !(c.Momentum >= 0 && c.Momentum < 1):
		return fmt.Errorf("--momentum %v: want 0 <= momentum < 1", c.Momentum)
	case c.Epochs < 0:
		return fmt.Errorf("--epochs %d: want at least 0", c.Epochs)
	case c.Batch < 1:
		return fmt.Errorf("--batch %d: want at least 1", c.Batch)
	case c.CheckpointDir == "":
		return errors.New("no checkpoint directory")
	}
	return nil
}

// header returns the checkpoint header for a network trained epoch epochs under c.
func (c config) header(epoch int) checkpointHeader {
	return checkpointHeader{
		Epoch: epoch, Inputs: mlp.NumInputs, Hidden: c.Hidden, Classes: mlp.NumClasses,
		LR: c.LR, L2: c.L2, Momentum: c.Momentum, Batch: c.Batch, Seed: c.Seed,
	}
}

// reporter sends an epoch's metrics and returns Virga's decision
// (*trial.Trial; tests substitute a recording fake).
type reporter interface {
	Report(ctx context.Context, step int64, metrics map[string]float64) (trial.Decision, error)
}

var _ reporter = (*trial.Trial)(nil)

// outcome is how a training run ended without error.
type outcome int

const (
	finished    outcome = iota // all epochs trained
	stopped                    // the searcher decided to stop the trial
	interrupted                // the process was asked to stop (SIGTERM); the current epoch was abandoned
)

// errDiverged means the loss became NaN or infinite; the run's learning rate is too high.
var errDiverged = errors.New("training diverged")

// train runs (or resumes) training under cfg:
//  1. resume from the checkpoint in cfg.CheckpointDir if there is one, else
//     initialize from the seed;
//  2. for each remaining epoch: shuffle the training rows with the epoch's
//     seed and make one pass of mini-batch SGD, abandoning the epoch as soon
//     as stopping is closed;
//  3. evaluate on the validation rows, write the model (model/, the network
//     for Virga's model registry) and the checkpoint, then report
//     (the order the protocol asks for: Virga saves the directory on the report);
//  4. return when the epochs are done or the decision is Stop.
//
// It prints one line per epoch to out and returns the final network. The
// network after epoch N is bit-identical whether or not the run was
// interrupted and resumed along the way.
func train(ctx context.Context, cfg config, ds *mlp.Dataset, rep reporter, stopping <-chan struct{}, out io.Writer) (*mlp.MLP, outcome, error) {
	if err := cfg.validate(); err != nil {
		return nil, 0, err
	}

	// 1. Resume or start.
	h, m, ok, err := loadCheckpoint(cfg.CheckpointDir)
	if err != nil {
		return nil, 0, err
	}
	start := 0
	if ok {
		if h.Hidden != cfg.Hidden {
			return nil, 0, fmt.Errorf("checkpoint in %s has %d hidden units, but --hidden is %d", cfg.CheckpointDir, h.Hidden, cfg.Hidden)
		}
		if want := cfg.header(h.Epoch); h != want {
			fmt.Fprintf(out, "warning: resuming a checkpoint written with different settings (%+v); the result will differ from an uninterrupted run\n", h)
		}
		start = h.Epoch
		fmt.Fprintf(out, "resuming from %s after epoch %d\n", cfg.CheckpointDir, start)
	} else {
		m = mlp.New(cfg.Settings)
	}
	if start >= cfg.Epochs {
		fmt.Fprintf(out, "already trained %d of %d epochs; nothing to do\n", start, cfg.Epochs)
		return m, finished, nil
	}

	for epoch := start + 1; epoch <= cfg.Epochs; epoch++ {
		began := time.Now()

		// 2. One pass over the shuffled training rows.
		trainLoss, completed := m.TrainEpoch(ds, cfg.Settings, epoch, stopping)
		if !completed {
			fmt.Fprintf(out, "stop requested: abandoning epoch %d; the checkpoint holds epoch %d\n", epoch, epoch-1)
			return m, interrupted, nil
		}

		// 3. Evaluate, checkpoint, report.
		valLoss, valAcc := m.Evaluate(ds.ValX, ds.ValY)
		if math.IsNaN(trainLoss) || math.IsInf(trainLoss, 0) || math.IsNaN(valLoss) || math.IsInf(valLoss, 0) {
			return m, 0, fmt.Errorf("epoch %d: train loss %v, validation loss %v: %w (try a lower --lr)", epoch, trainLoss, valLoss, errDiverged)
		}
		if err := saveModel(cfg.CheckpointDir, m); err != nil {
			return m, 0, fmt.Errorf("epoch %d: %w", epoch, err)
		}
		if err := saveCheckpoint(cfg.CheckpointDir, cfg.header(epoch), m); err != nil {
			return m, 0, fmt.Errorf("epoch %d: %w", epoch, err)
		}
		fmt.Fprintf(out, "epoch %3d/%d  train_loss %.4f  val_loss %.4f  val_accuracy %6.2f%%  (%s)\n",
			epoch, cfg.Epochs, trainLoss, valLoss, 100*valAcc, time.Since(began).Round(time.Millisecond))
		d, err := rep.Report(ctx, int64(epoch), map[string]float64{
			"train_loss":   trainLoss,
			"val_loss":     valLoss,
			"val_accuracy": valAcc,
		})
		if err != nil {
			return m, 0, fmt.Errorf("epoch %d: %w", epoch, err)
		}
		// 4. The searcher may end the trial early.
		if d == trial.Stop {
			fmt.Fprintf(out, "the searcher stopped this trial after epoch %d\n", epoch)
			return m, stopped, nil
		}
	}
	return m, finished, nil
}
