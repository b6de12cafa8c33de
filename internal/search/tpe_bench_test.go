package search

import (
	"math"
	"testing"

	"github.com/virga-ml/virga/internal/spec"
)

// tpeBenchHistory returns a 10-parameter space (floats, log floats, ints, a
// log int, categoricals) and n observed trials on it.
func tpeBenchHistory(b *testing.B, n int) (space, []Observation) {
	sp := tpeTestSpace(b,
		tpeHP("lr", spec.HPFloat, 1e-5, 1e-1, true),
		tpeHP("wd", spec.HPFloat, 1e-6, 1e-2, true),
		tpeHP("dropout", spec.HPFloat, 0, 0.5, false),
		tpeHP("momentum", spec.HPFloat, 0.5, 0.99, false),
		tpeHP("warmup", spec.HPFloat, 0, 1, false),
		tpeHP("layers", spec.HPInt, 1, 12, false),
		tpeHP("heads", spec.HPInt, 1, 64, false),
		tpeHP("width", spec.HPInt, 16, 4096, true),
		tpeCatHP("act", "relu", "tanh", "gelu", "silu"),
		tpeCatHP("opt", "sgd", "adam", "adamw"),
	)
	r := tpeRand(1)
	hist := make([]Observation, n)
	for i := range hist {
		cfg := make(map[string]any, len(sp))
		for _, p := range sp {
			cfg[p.name] = p.sample(r)
		}
		v := math.Abs(math.Log10(cfg["lr"].(float64))+3) + cfg["dropout"].(float64) + float64(cfg["layers"].(int64))/12
		if cfg["act"] == "gelu" {
			v -= 0.5
		}
		hist[i] = Observation{HParams: cfg, Value: v + 0.1*r.Float64(), Step: 10, Complete: true}
	}
	return sp, hist
}

func benchmarkTPENext(b *testing.B, n int, multivariate bool) {
	sp, hist := tpeBenchHistory(b, n)
	st := defaultTPESettings()
	st.Multivariate = multivariate
	s, err := newTPE(sp, st)
	if err != nil {
		b.Fatal(err)
	}
	r := tpeRand(2)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.next(r, hist); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTPENext1000x10 times one suggestion from 1,000 trials over 10
// parameters (univariate, Optuna's default).
func BenchmarkTPENext1000x10(b *testing.B) { benchmarkTPENext(b, 1000, false) }

// BenchmarkTPENext1000x10Multivariate is the same with the joint model.
func BenchmarkTPENext1000x10Multivariate(b *testing.B) { benchmarkTPENext(b, 1000, true) }

// BenchmarkTPENext100x10 is a search's more usual size.
func BenchmarkTPENext100x10(b *testing.B) { benchmarkTPENext(b, 100, false) }
