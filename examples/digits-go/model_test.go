package main

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/virga-ml/virga/examples/digits-go/mlp"
)

// forwardFile computes what a virga.mlp/v1 file says the model computes,
// softmax(W2·relu(W1·(S·x)+b1)+b2), for a raw row x.
func forwardFile(f mlpFile, x []float64) []float64 {
	n1 := f.Hidden * f.Inputs
	w1, b1 := f.Params[:n1], f.Params[n1:n1+f.Hidden]
	w2, b2 := f.Params[n1+f.Hidden:n1+f.Hidden+f.Classes*f.Hidden], f.Params[n1+f.Hidden+f.Classes*f.Hidden:]
	h := make([]float64, f.Hidden)
	for j := range h {
		s := b1[j]
		for i, xi := range x {
			s += w1[j*f.Inputs+i] * f.InputScale * xi
		}
		h[j] = math.Max(s, 0)
	}
	z := make([]float64, f.Classes)
	maxZ := math.Inf(-1)
	for k := range z {
		z[k] = b2[k]
		for j, hj := range h {
			z[k] += w2[k*f.Hidden+j] * hj
		}
		maxZ = math.Max(maxZ, z[k])
	}
	sum := 0.0
	for k := range z {
		z[k] = math.Exp(z[k] - maxZ)
		sum += z[k]
	}
	for k := range z {
		z[k] /= sum
	}
	return z
}

// TestCheckpointHoldsModel trains a few epochs and checks that the
// checkpoint directory's model/ is a model directory whose network, applied
// to raw pixel rows as the file format says, scores what the trainer
// measured.
func TestCheckpointHoldsModel(t *testing.T) {
	ds := testData(t)
	dir := t.TempDir()
	rep := &fakeReporter{stopAt: -1, interruptAfter: -1}
	m, how, err := train(context.Background(), goodConfig(dir, 3), ds, rep, nil, io.Discard)
	if err != nil || how != finished {
		t.Fatalf("train = %v, %v", how, err)
	}
	var man manifest
	readJSON(t, filepath.Join(dir, "model", "virga-model.json"), &man)
	if man.Format != "virga.mlp/v1" || man.File != "mlp.json" || len(man.Signature.Inputs) != 1 ||
		man.Signature.Inputs[0].Name != "pixels" || len(man.Signature.Outputs) != 2 ||
		man.Signature.Outputs[1].Name != "label" || man.Signature.Outputs[1].Datatype != "INT64" {
		t.Errorf("manifest %+v; want virga.mlp/v1 with pixels in, probabilities and label out", man)
	}
	var f mlpFile
	readJSON(t, filepath.Join(dir, "model", "mlp.json"), &f)
	if f.Inputs != 64 || f.Classes != 10 || f.Hidden != m.Hidden || f.InputScale != 1.0/16 || len(f.Params) != mlp.NumParams(m.Hidden) {
		t.Fatalf("mlp.json: inputs %d hidden %d classes %d scale %g, %d params; want 64, %d, 10, 1/16, %d",
			f.Inputs, f.Hidden, f.Classes, f.InputScale, len(f.Params), m.Hidden, mlp.NumParams(m.Hidden))
	}
	// The loader divides raw counts 0..16 by 16, exactly: raw = scaled * 16.
	loss, correct := 0.0, 0
	for i, scaled := range ds.ValX {
		raw := make([]float64, len(scaled))
		for j, v := range scaled {
			raw[j] = v * 16
		}
		p := forwardFile(f, raw)
		best := 0
		for k := range p {
			if p[k] > p[best] {
				best = k
			}
		}
		if best == ds.ValY[i] {
			correct++
		}
		loss -= math.Log(p[ds.ValY[i]])
	}
	n := float64(len(ds.ValX))
	last := rep.metrics[len(rep.metrics)-1]
	if acc := float64(correct) / n; acc != last["val_accuracy"] {
		t.Errorf("model file's validation accuracy %.6f, trainer measured %.6f", acc, last["val_accuracy"])
	}
	if math.Abs(loss/n-last["val_loss"]) > 1e-9 {
		t.Errorf("model file's validation loss %.12f, trainer measured %.12f", loss/n, last["val_loss"])
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
