package main

import (
	"math"
	"time"

	"github.com/virga-ml/virga/examples/digits-go/mlp"
)

// Settings of the digits-mlp table that are not searched.
const (
	digitsEpochs   = 27  // 3^3: whole rungs for successive halving with eta 3
	digitsMomentum = 0.9 // the example's default
	digitsSeed     = 1   // every configuration starts from the example's default seed
	// lossCap bounds the recorded val_loss: a diverged network's loss (NaN,
	// infinite, or beyond any useful model; chance level is ln 10 = 2.3) is
	// recorded as lossCap so that every curve is finite.
	lossCap = 10.0
)

// digitsSpace is the digits-mlp search space: 8 x 5 x 4 x 4 = 640 configurations.
func digitsSpace() []Dim {
	return []Dim{
		{Name: "lr", Type: "float", Log: true, Values: logSpace(0.003, 1.0, 8)},
		{Name: "hidden", Type: "int", Log: true, Values: []any{8.0, 16.0, 32.0, 64.0, 128.0}},
		{Name: "l2", Type: "float", Log: true, Values: []any{1e-6, 1e-4, 1e-3, 1e-2}},
		{Name: "batch", Type: "int", Log: true, Values: []any{16.0, 32.0, 64.0, 128.0}},
	}
}

// logSpace returns n values from lo to hi, evenly spaced in log, each rounded
// to 5 significant digits (the value written is the value trained with).
func logSpace(lo, hi float64, n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = round5(lo * math.Pow(hi/lo, float64(i)/float64(n-1)))
	}
	return out
}

// digitsSettings returns the training settings of one grid point.
func digitsSettings(hp map[string]any) mlp.Settings {
	return mlp.Settings{
		LR:       hp["lr"].(float64),
		Hidden:   int(hp["hidden"].(float64)),
		L2:       hp["l2"].(float64),
		Momentum: digitsMomentum,
		Batch:    int(hp["batch"].(float64)),
		Seed:     digitsSeed,
	}
}

// trainDigits trains one configuration for epochs epochs and returns its
// validation loss and the wall time (training pass plus validation) of each
// epoch. With untrainedFirst the first epoch is validation only: the
// untrained network, and epochs-1 training passes follow.
func trainDigits(ds *mlp.Dataset, s mlp.Settings, epochs int, untrainedFirst bool) (curve, seconds []Sig5) {
	m := mlp.New(s)
	for epoch := 1; epoch <= epochs; epoch++ {
		began := time.Now()
		if pass := epoch - btoi(untrainedFirst); pass >= 1 {
			m.TrainEpoch(ds, s, pass, nil)
		}
		loss, _ := m.Evaluate(ds.ValX, ds.ValY)
		took := time.Since(began).Seconds()
		if !(loss <= lossCap) { // also NaN
			loss = lossCap
		}
		curve = append(curve, Sig5(loss))
		seconds = append(seconds, Sig5(took))
	}
	return curve, seconds
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
