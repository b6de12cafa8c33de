package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virga-ml/virga/elastic"
)

const digits = "/work/shared/data/digits/digits.csv.gz"

// TestAlgoMomentsModel: `virga algo moments` over the digits file with two
// workers writes a model in the documented format whose count and means
// are the file's.
func TestAlgoMomentsModel(t *testing.T) {
	out := filepath.Join(t.TempDir(), "model.json")
	b, err := exec.Command(virgaBin, "algo", "moments", "--input", digits, "--label", "last", "--workers", "2", "--model", out).CombinedOutput()
	if err != nil {
		t.Fatalf("virga algo: %v\n%s", err, b)
	}
	m, err := elastic.LoadModelFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if m.Algorithm != "moments" || m.Tensors["count"].Data[0] != 1797 || len(m.Tensors["mean"].Data) != 64 {
		t.Fatalf("model %+v; want moments of 1797 rows of 64 pixels", m)
	}
	if m.Tensors["mean"].Data[0] != 0 { // the first pixel is blank in every image
		t.Errorf("mean of pixel 0 = %v; want 0", m.Tensors["mean"].Data[0])
	}
}

// TestAlgoSampleEstimate: --sample prints the throughput per worker and the
// whole input's time and cost.
func TestAlgoSampleEstimate(t *testing.T) {
	b, err := exec.Command(virgaBin, "algo", "median", "--input", digits, "--label", "last", "--sample", "400", "--batch", "50", "--price", "3.06").CombinedOutput()
	if err != nil {
		t.Fatalf("virga algo: %v\n%s", err, b)
	}
	if !strings.Contains(string(b), "rows/s per worker") || !strings.Contains(string(b), "whole input: 1797 rows") || !strings.Contains(string(b), "per worker-hour") {
		t.Fatalf("want the throughput and the whole input's estimate:\n%s", b)
	}
}

// TestAlgoAsTrial: an experiment whose trials are `virga algo median` runs
// to completion under Virga, reporting the rows read and the median.
func TestAlgoAsTrial(t *testing.T) {
	dir := t.TempDir()
	exp := filepath.Join(dir, "algo.yaml")
	y := `name: algo-median
entrypoint: [` + virgaBin + `, algo, median, --input, ` + digits + `, --label, last, --batch, "100", --checkpoint-every, 50ms]
objective: {metric: rows, direction: maximize}
`
	if err := os.WriteFile(exp, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := exec.Command(virgaBin, "run", "--data-dir", filepath.Join(dir, "state"), exp).CombinedOutput()
	if err != nil {
		t.Fatalf("virga run: %v\n%s", err, b)
	}
	if !strings.Contains(string(b), "COMPLETED") || !strings.Contains(string(b), "rows=1797") {
		t.Fatalf("want the trial COMPLETED having read 1797 rows:\n%s", b)
	}
}
