package mlp

// Settings are the hyperparameters of one training run.
type Settings struct {
	LR       float64 // learning rate
	Hidden   int     // hidden units
	L2       float64 // weight decay on the weights (not the biases)
	Momentum float64 // SGD momentum, 0 for plain SGD
	Batch    int     // mini-batch size
	Seed     int64   // seeds the initial weights and each epoch's shuffle
}

// initSeed and epochSeed derive the generators' seeds from the run's seed, so
// that any epoch's shuffle can be recomputed on resume without saving RNG state.
func initSeed(seed int64) uint64 { return uint64(seed) ^ 0x6a09e667f3bcc909 }
func epochSeed(seed int64, epoch int) uint64 {
	return uint64(seed)*0x9E3779B97F4A7C15 + uint64(epoch)*0xD1B54A32D192ED03
}

// New returns the untrained network of a run under s: s.Hidden units,
// initialized from s.Seed.
func New(s Settings) *MLP {
	return NewMLP(s.Hidden, &SplitMix64{State: initSeed(s.Seed)})
}

// TrainEpoch makes epoch's one pass of mini-batch SGD with momentum over the
// training rows of ds, shuffled with the epoch's seed (derived from s.Seed and
// epoch, so epoch N's pass is the same whether or not the run was resumed
// before it). Before each mini-batch it checks stopping: once that is closed it
// abandons the epoch and returns completed == false (the network is then part
// way through the epoch). It returns the mean training loss of the pass, NaN or
// infinite when training diverged.
func (m *MLP) TrainEpoch(ds *Dataset, s Settings, epoch int, stopping <-chan struct{}) (trainLoss float64, completed bool) {
	order := make([]int, len(ds.TrainX))
	for i := range order {
		order[i] = i
	}
	rng := SplitMix64{State: epochSeed(s.Seed, epoch)}
	rng.Shuffle(order)
	for b := 0; b < len(order); b += s.Batch {
		select {
		case <-stopping:
			return trainLoss / float64(len(order)), false
		default:
		}
		batch := order[b:min(b+s.Batch, len(order))]
		for _, i := range batch {
			trainLoss += m.forward(ds.TrainX[i], ds.TrainY[i])
			m.backward(ds.TrainX[i], ds.TrainY[i])
		}
		m.step(len(batch), s.LR, s.L2, s.Momentum)
	}
	return trainLoss / float64(len(order)), true
}
