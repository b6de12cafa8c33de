package replay

import (
	"bytes"
	"strings"
	"testing"

	"github.com/virga-ml/virga/internal/spec"
)

const tinyTable = `{"name":"t","metric":"loss","direction":"minimize","epochs":2,
"space":[{"name":"lr","type":"float","log":true,"values":[0.01,0.1]},{"name":"act","type":"categorical","values":["relu","tanh"]}],
"configs":[
 {"hparams":{"lr":0.01,"act":"relu"},"curve":[0.9,0.5],"seconds":[1,1]},
 {"hparams":{"lr":0.01,"act":"tanh"},"curve":[0.8,0.6],"seconds":[1,2]},
 {"hparams":{"lr":0.1,"act":"relu"},"curve":[0.4,0.3],"seconds":[1,1]},
 {"hparams":{"lr":0.1,"act":"tanh"},"curve":[0.7,0.7],"seconds":[3,1]}]}`

func TestReadAndIndex(t *testing.T) {
	tb, err := Read(strings.NewReader(tinyTable))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		hp   map[string]any
		want int
	}{
		{map[string]any{"lr": int64(0), "act": "relu"}, 0},
		{map[string]any{"lr": int64(0), "act": "tanh"}, 1},
		{map[string]any{"lr": int64(1), "act": "relu"}, 2},
		{map[string]any{"lr": 5.0, "act": "tanh"}, 3}, // clamped to the grid
	} {
		got, err := tb.Index(tt.hp)
		if err != nil || got != tt.want {
			t.Errorf("Index(%v) = %d, %v; want %d", tt.hp, got, err, tt.want)
		}
	}
	if _, err := tb.Index(map[string]any{"lr": 0.1, "act": "gelu"}); err == nil {
		t.Error("Index accepted a categorical value the table lacks")
	}
	// Regret: the best completed configuration, by its final value; before
	// any completes, the worst final's (0.7).
	trace := []Epoch{{Config: 1, Epoch: 1}, {Config: 1, Epoch: 2}, {Config: 2, Epoch: 1}, {Config: 0, Epoch: 2}, {Config: 3, Epoch: 2}, {Config: 2, Epoch: 2}}
	got := tb.Regret(trace)
	want := []float64{0.7 - 0.3, 0.6 - 0.3, 0.6 - 0.3, 0.5 - 0.3, 0.5 - 0.3, 0}
	for i := range want {
		if d := got[i] - want[i]; d > 1e-12 || d < -1e-12 {
			t.Errorf("regret after %d epochs = %g, want %g", i+1, got[i], want[i])
		}
	}
}

// TestContinuousIndex: a Continuous table presents numeric dimensions as
// floats over their range and snaps a proposal to the nearest grid value,
// on the log scale for a log dimension.
func TestContinuousIndex(t *testing.T) {
	tb, err := Read(strings.NewReader(tinyTable))
	if err != nil {
		t.Fatal(err)
	}
	tb.Continuous = true
	e := tb.Experiment(spec.Searcher{Name: "tpe", Sampler: "tpe"}, 10)
	if h := e.Hyperparameters["lr"]; h.Type != spec.HPFloat || h.Min != 0.01 || h.Max != 0.1 || !h.Log {
		t.Fatalf("lr is %+v, want a log float over [0.01, 0.1]", h)
	}
	for _, tt := range []struct {
		lr   float64
		want int
	}{
		{0.01, 0}, {0.031, 0}, {0.032, 2}, {0.1, 2}, {0.5, 2}, // geometric midpoint 0.0316
	} {
		got, err := tb.Index(map[string]any{"lr": tt.lr, "act": "relu"})
		if err != nil || got != tt.want {
			t.Errorf("Index(lr %v) = %d, %v; want %d", tt.lr, got, err, tt.want)
		}
	}
	for i := range tb.Configs {
		if got, err := tb.Index(tb.Point(i)); err != nil || got != i {
			t.Errorf("configuration %d indexes as %d (%v)", i, got, err)
		}
	}
}

func TestReadRejectsBrokenTables(t *testing.T) {
	for name, mut := range map[string]func(string) string{
		"order":     func(s string) string { return strings.Replace(s, `"lr":0.01,"act":"tanh"`, `"lr":0.1,"act":"tanh"`, 1) },
		"short":     func(s string) string { return strings.Replace(s, `[0.9,0.5]`, `[0.9]`, 1) },
		"direction": func(s string) string { return strings.Replace(s, `minimize`, `down`, 1) },
		"time":      func(s string) string { return strings.Replace(s, `[3,1]`, `[0,1]`, 1) },
		"unsorted":  func(s string) string { return strings.Replace(s, `[0.01,0.1]`, `[0.1,0.01]`, 1) },
	} {
		if _, err := Read(strings.NewReader(mut(tinyTable))); err == nil {
			t.Errorf("%s: broken table accepted", name)
		}
	}
}

func FuzzRead(f *testing.F) {
	f.Add([]byte(tinyTable))
	f.Add([]byte(`{"epochs":1,"direction":"minimize","space":[{"name":"x","type":"int","values":[1]}],"configs":[{"hparams":{"x":1},"curve":[1],"seconds":[1]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tb, err := Read(bytes.NewReader(b))
		if err != nil {
			return
		}
		// A table that passes Check can be indexed and scored.
		for i := range tb.Configs {
			if got, err := tb.Index(tb.Point(i)); err != nil || got != i {
				t.Fatalf("configuration %d indexes as %d (%v)", i, got, err)
			}
		}
		tb.Continuous = true
		for i := range tb.Configs {
			if got, err := tb.Index(tb.Point(i)); err != nil || got != i {
				t.Fatalf("continuous: configuration %d indexes as %d (%v)", i, got, err)
			}
		}
		_ = tb.BestFinal()
	})
}
