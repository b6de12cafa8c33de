package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/virga-ml/virga/examples/digits-go/mlp"
)

// modelDir is the folder of the checkpoint directory that holds the trained
// network as a Virga model directory (docs/models.md): virga-model.json,
// the manifest, and mlp.json, the network in format virga.mlp/v1. Virga's
// model registry registers it from the checkpoint (virga models register).
const modelDir = "model"

// mlpFile is the virga.mlp/v1 file: the network computes
// softmax(W2·relu(W1·(InputScale·x)+b1)+b2) of a raw row x of the data
// set, with Params laid out as mlp.MLP.Params (W1 [hidden x inputs]
// row-major, b1, W2 [classes x hidden], b2).
type mlpFile struct {
	Inputs     int       `json:"inputs"`
	Hidden     int       `json:"hidden"`
	Classes    int       `json:"classes"`
	InputScale float64   `json:"input_scale"`
	Params     []float64 `json:"params"`
}

// tensorSpec and manifest are the parts of virga-model.json this trainer writes.
type tensorSpec struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

type manifest struct {
	Format    string `json:"format"`
	File      string `json:"file"`
	Signature struct {
		Inputs  []tensorSpec `json:"inputs"`
		Outputs []tensorSpec `json:"outputs"`
	} `json:"signature"`
	MaxBatch int `json:"max_batch"`
}

// saveModel writes m into dir/model/ (mlp.json, then virga-model.json), each
// file atomically (a temporary file renamed over it), so that the model
// directory Virga saves with the next report is whole.
func saveModel(dir string, m *mlp.MLP) error {
	out := filepath.Join(dir, modelDir)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("creating model directory: %w", err)
	}
	net, err := json.Marshal(mlpFile{Inputs: mlp.NumInputs, Hidden: m.Hidden, Classes: mlp.NumClasses,
		InputScale: mlp.InputScale, Params: m.Params})
	if err != nil {
		return fmt.Errorf("encoding model: %w", err)
	}
	var man manifest
	man.Format, man.File, man.MaxBatch = "virga.mlp/v1", "mlp.json", 1024
	man.Signature.Inputs = []tensorSpec{{Name: "pixels", Datatype: "FP32", Shape: []int64{-1, mlp.NumInputs}}}
	man.Signature.Outputs = []tensorSpec{
		{Name: "probabilities", Datatype: "FP32", Shape: []int64{-1, mlp.NumClasses}},
		{Name: "label", Datatype: "INT64", Shape: []int64{-1}},
	}
	manJSON, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding model manifest: %w", err)
	}
	if err := writeAtomic(filepath.Join(out, "mlp.json"), net); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(out, "virga-model.json"), append(manJSON, '\n'))
}

// writeAtomic writes data to path through a synced temporary file renamed over it.
func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("syncing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("installing %s: %w", path, err)
	}
	return nil
}
