package pca

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/virga-ml/virga/elastic"
	"github.com/virga-ml/virga/elastic/input"
)

// lowRankStream describes a synthetic data set of D features: a signal of
// rank len(sigma) (independent Gaussian factors of standard deviations
// sigma, mixed by a random orthonormal D×r basis) plus noise of its own
// spread for every feature, each feature then scaled by its own unit and
// shifted by its own mean (some near zero, one near 1000). The covariance
// has a clear spectrum: r large eigenvalues, well apart, over a floor of
// noise eigenvalues that are close to one another.
type lowRankStream struct {
	d           int
	sigma       []float64 // the factors' standard deviations
	basis       []float64 // [d, r], orthonormal columns
	noise       []float64 // [d] noise standard deviations
	scale, mean []float64 // [d]
}

func newLowRankStream(d int, sigma []float64) *lowRankStream {
	g := rand.New(rand.NewPCG(2026, 19)) // the same model for every file
	r := len(sigma)
	s := &lowRankStream{d: d, sigma: sigma, basis: make([]float64, d*r), noise: make([]float64, d), scale: make([]float64, d), mean: make([]float64, d)}
	// Gram-Schmidt on Gaussian columns.
	for c := range r {
		v := make([]float64, d)
		for j := range v {
			v[j] = g.NormFloat64()
		}
		for p := range c {
			dot := 0.0
			for j := range d {
				dot += v[j] * s.basis[j*r+p]
			}
			for j := range d {
				v[j] -= dot * s.basis[j*r+p]
			}
		}
		norm := 0.0
		for _, x := range v {
			norm += x * x
		}
		for j := range d {
			s.basis[j*r+c] = v[j] / math.Sqrt(norm)
		}
	}
	for j := range d {
		s.noise[j] = 0.2 + 0.4*g.Float64()
		s.scale[j] = math.Exp(0.3 * g.NormFloat64())
		s.mean[j] = 10 * g.NormFloat64()
	}
	s.mean[0] = 1000
	return s
}

// write draws rows rows from seed and writes them to path as CSV, each
// number to 7 significant digits.
func (s *lowRankStream) write(t *testing.T, path string, rows int, seed uint64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	rng := rand.New(rand.NewPCG(seed, 23))
	d, r := s.d, len(s.sigma)
	z := make([]float64, r)
	var line []byte
	for range rows {
		for c := range r {
			z[c] = s.sigma[c] * rng.NormFloat64()
		}
		line = line[:0]
		for j := range d {
			v := s.noise[j] * rng.NormFloat64()
			for c := range r {
				v += s.basis[j*r+c] * z[c]
			}
			if j > 0 {
				line = append(line, ',')
			}
			line = strconv.AppendFloat(line, s.mean[j]+s.scale[j]*v, 'g', 7, 64)
		}
		line = append(line, '\n')
		if _, err := bw.Write(line); err != nil {
			t.Fatal(err)
		}
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// sklearnStreamPCA is what testdata/sklearn_synthetic.py prints.
type sklearnStreamPCA struct {
	Var       []float64 `json:"explained_variance"`
	Ratio     []float64 `json:"explained_variance_ratio"`
	Comp      []float64 `json:"components"`
	TestVar   []float64 `json:"test_variance"`
	TestTotal float64   `json:"test_total_variance"`
	Seconds   float64   `json:"seconds"`
}

// projectionVariance is the variance (n-1 denominator) of the projection of
// the rows of x on each of the model's components.
func projectionVariance(m *Model, x []float64) []float64 {
	proj := m.Transform(x)
	rows := len(x) / m.D
	out := make([]float64, m.K)
	for r := range m.K {
		mean := 0.0
		for i := range rows {
			mean += proj[i*m.K+r]
		}
		mean /= float64(rows)
		for i := range rows {
			e := proj[i*m.K+r] - mean
			out[r] += e * e
		}
		out[r] /= float64(rows - 1)
	}
	return out
}

// TestStreamExplainedVarianceNearSklearn: PCA in one pass over a synthetic
// stream of 1 000 000 rows of 40 features of rank 6 plus noise (100 000
// under the race detector), read from a CSV file through elastic/input on
// one worker and on two, gives the explained variance (and its ratio) of
// each of 8 components within 1% of scikit-learn's PCA on the same
// training file, and so does the variance its components capture on a
// held-out test file; the 6 signal components point where scikit-learn's
// do (|cosine| > 0.99).
func TestStreamExplainedVarianceNearSklearn(t *testing.T) {
	const d, k = 40, 8
	sigma := []float64{12, 8, 5, 3.5, 2.5, 1.8}
	rows, testRows := 1_000_000, 100_000
	if raceEnabled {
		rows, testRows = 100_000, 20_000
	}
	start := time.Now()
	dir := t.TempDir()
	trainPath, testPath := filepath.Join(dir, "train.csv"), filepath.Join(dir, "test.csv")
	data := newLowRankStream(d, sigma)
	data.write(t, trainPath, rows, 1)
	data.write(t, testPath, testRows, 2)
	written := time.Since(start)

	// scikit-learn runs on the side while Virga trains.
	script, _ := filepath.Abs("testdata/sklearn_synthetic.py")
	cmd := exec.Command("/usr/bin/python3", script, strconv.Itoa(k), trainPath, testPath)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1") // one core for Python, the other for Virga
	if err := cmd.Start(); err != nil {
		t.Fatalf("scikit-learn reference (scripts/test.sh installs python3-sklearn): %v", err)
	}
	defer cmd.Process.Kill() // harmless once it ended

	xte, _, _, err := input.ReadAll(testPath, input.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var models [2]*Model
	var took [2]time.Duration
	for i, workers := range []int{1, 2} {
		s := time.Now()
		var srcs []elastic.Source
		for w := range workers {
			src, err := input.OpenShard(trainPath, input.Options{BatchRows: 1000}, w, workers)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			srcs = append(srcs, src)
		}
		m, _, err := elastic.Local(context.Background(), &PCA{K: k}, srcs)
		if err != nil {
			t.Fatal(err)
		}
		if models[i], err = FromModel(m); err != nil {
			t.Fatal(err)
		}
		took[i] = time.Since(s)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("scikit-learn reference (scripts/test.sh installs python3-sklearn): %v\n%s", err, stderr.String())
	}
	var ref sklearnStreamPCA
	if err := json.Unmarshal(stdout.Bytes(), &ref); err != nil || len(ref.Var) != k || len(ref.Ratio) != k || len(ref.Comp) != k*d || len(ref.TestVar) != k {
		t.Fatalf("scikit-learn reference: %v: %s", err, stdout.String())
	}
	t.Logf("%d training rows of %d features, rank %d plus noise (CSV written in %v), %d test rows; %d components", rows, d, len(sigma), written.Round(time.Millisecond), testRows, k)
	refTest := 0.0
	for _, v := range ref.TestVar {
		refTest += v
	}
	t.Logf("  scikit-learn PCA (%.1fs): explained variance %.5g", ref.Seconds, ref.Var)
	t.Logf("  scikit-learn: ratio %.5f, sum %.5f; share of the test variance captured %.5f", ref.Ratio, sum(ref.Ratio), refTest/ref.TestTotal)
	for i, workers := range []int{1, 2} {
		m := models[i]
		testVar := projectionVariance(m, xte)
		worstVar, worstRatio, worstTest, worstCos := 0.0, 0.0, 0.0, 1.0
		for r := range k {
			rv := math.Abs(m.ExplainedVariance[r]/ref.Var[r] - 1)
			rr := math.Abs(m.ExplainedVarianceRatio[r]/ref.Ratio[r] - 1)
			rt := math.Abs(testVar[r]/ref.TestVar[r] - 1)
			worstVar, worstRatio, worstTest = max(worstVar, rv), max(worstRatio, rr), max(worstTest, rt)
			if rv > 0.01 || rr > 0.01 {
				t.Errorf("%d worker(s), component %d: explained variance %.6g (ratio %.6g), scikit-learn %.6g (%.6g); want within 1%%", workers, r, m.ExplainedVariance[r], m.ExplainedVarianceRatio[r], ref.Var[r], ref.Ratio[r])
			}
			if rt > 0.01 {
				t.Errorf("%d worker(s), component %d: variance on the test rows %.6g, scikit-learn's component's %.6g; want within 1%%", workers, r, testVar[r], ref.TestVar[r])
			}
			if r < len(sigma) {
				dot := 0.0
				for j := range d {
					dot += m.Components[r*d+j] * ref.Comp[r*d+j]
				}
				worstCos = min(worstCos, math.Abs(dot))
				if math.Abs(dot) < 0.99 {
					t.Errorf("%d worker(s), component %d: |cosine| with scikit-learn's is %.6f; want > 0.99", workers, r, math.Abs(dot))
				}
			}
		}
		t.Logf("  Virga, %d worker(s) (%v): explained variance %.5g", workers, took[i].Round(time.Millisecond), m.ExplainedVariance)
		t.Logf("  Virga, %d worker(s): ratio sum %.5f, share of the test variance captured %.5f; worst relative difference: explained variance %.2g, ratio %.2g, test variance %.2g; worst |cosine| of the signal components %.9f",
			workers, sum(m.ExplainedVarianceRatio), sum(testVar)/ref.TestTotal, worstVar, worstRatio, worstTest, worstCos)
	}
}

func sum(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s
}
