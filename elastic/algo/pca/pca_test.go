package pca

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/virga-ml/virga/elastic"
	"github.com/virga-ml/virga/elastic/input"
)

const digitsPath = "../../../examples/data/digits.csv.gz" // the same file as ../shared/data/digits

// loadDigits returns the 1797 digits' 64 pixel columns (the label dropped).
func loadDigits(t *testing.T) ([]float64, int) {
	t.Helper()
	x, _, cols, err := input.ReadAll(digitsPath, input.Options{Label: input.LastColumn})
	if err != nil {
		t.Fatalf("digits data: %v", err)
	}
	return x, cols
}

// correlated is a synthetic stream: Gaussian with a decaying spectrum in a
// random basis, off the origin.
func correlated(rows, d int, seed uint64) []float64 {
	rng := rand.New(rand.NewPCG(seed, 11))
	mix := make([]float64, d*d)
	for i := range mix {
		mix[i] = rng.NormFloat64()
	}
	mean := make([]float64, d)
	for j := range mean {
		mean[j] = 5 * rng.NormFloat64()
	}
	x := make([]float64, rows*d)
	z := make([]float64, d)
	for i := range rows {
		for l := range d {
			z[l] = rng.NormFloat64() * 3 / (1 + float64(l))
		}
		for j := range d {
			s := mean[j]
			for l := range d {
				s += z[l] * mix[l*d+j]
			}
			x[i*d+j] = s
		}
	}
	return x
}

type sklearnPCA struct {
	Var   []float64 `json:"var"`
	Ratio []float64 `json:"ratio"`
	Comp  []float64 `json:"comp"`
}

func runSklearn(t *testing.T, x []float64, d, k int) sklearnPCA {
	t.Helper()
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import sklearn").Run(); err != nil {
		t.Fatalf("scikit-learn is needed to check PCA (%s -c 'import sklearn': %v); scripts/test.sh installs python3-sklearn", py, err)
	}
	path := filepath.Join(t.TempDir(), "x.f64")
	buf := make([]byte, 8*len(x))
	for i, v := range x {
		u := math.Float64bits(v)
		for b := range 8 {
			buf[8*i+b] = byte(u >> (8 * b))
		}
	}
	if err := os.WriteFile(path, buf, 0o600); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`
import warnings, json, numpy as np
warnings.filterwarnings("ignore")
from sklearn.decomposition import PCA
x = np.fromfile(%q, dtype="<f8").reshape(-1, %d)
p = PCA(n_components=%d).fit(x)
print(json.dumps({"var": p.explained_variance_.tolist(), "ratio": p.explained_variance_ratio_.tolist(), "comp": p.components_.ravel().tolist()}))
`, path, d, k)
	var out, errb bytes.Buffer
	cmd := exec.Command(py, "-c", script)
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1")
	if err := cmd.Run(); err != nil {
		t.Fatalf("sklearn: %v\n%s", err, errb.String())
	}
	var r sklearnPCA
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("sklearn output: %v", err)
	}
	return r
}

func train(t *testing.T, k int, x []float64, d, workers, batch int) *Model {
	t.Helper()
	m, _, err := elastic.Local(context.Background(), &PCA{K: k}, elastic.Shards(x, nil, d, workers, batch))
	if err != nil {
		t.Fatal(err)
	}
	p, err := FromModel(m)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func checkAgainstSklearn(t *testing.T, name string, x []float64, d, k, batch int) {
	ref := runSklearn(t, x, d, k)
	for _, workers := range []int{1, 2} {
		p := train(t, k, x, d, workers, batch)
		worstVar, worstRatio, worstCos := 0.0, 0.0, 1.0
		for r := range k {
			rv := math.Abs(p.ExplainedVariance[r]/ref.Var[r] - 1)
			rr := math.Abs(p.ExplainedVarianceRatio[r]/ref.Ratio[r] - 1)
			dot := 0.0
			for j := range d {
				dot += p.Components[r*d+j] * ref.Comp[r*d+j]
			}
			cos := math.Abs(dot)
			worstVar, worstRatio, worstCos = max(worstVar, rv), max(worstRatio, rr), min(worstCos, cos)
			if rv > 0.01 || rr > 0.01 {
				t.Errorf("%s, %d worker(s), component %d: explained variance %.6g (ratio %.6g), scikit-learn %.6g (%.6g); want within 1%%", name, workers, r, p.ExplainedVariance[r], p.ExplainedVarianceRatio[r], ref.Var[r], ref.Ratio[r])
			}
			if cos < 0.99 {
				t.Errorf("%s, %d worker(s), component %d: |cosine| with scikit-learn's is %.6f; want > 0.99", name, workers, r, cos)
			}
		}
		t.Logf("%s k=%d, %d worker(s): worst relative difference to scikit-learn: explained variance %.2g, ratio %.2g; worst |cosine| of components %.9f; top ratio %.5f (sklearn %.5f)",
			name, k, workers, worstVar, worstRatio, worstCos, p.ExplainedVarianceRatio[0], ref.Ratio[0])
	}
}

func TestDigitsNearSklearn(t *testing.T) {
	x, d := loadDigits(t)
	checkAgainstSklearn(t, "digits", x, d, 10, 64)
}

func TestStreamNearSklearn(t *testing.T) {
	const d, k = 20, 5
	rows := 100_000
	if raceEnabled {
		rows = 20_000
	}
	checkAgainstSklearn(t, "synthetic", correlated(rows, d, 5), d, k, 500)
}

// TestEigen: A v = λ v and VᵀV = I for a random symmetric matrix.
func TestEigen(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, d := range []int{1, 2, 7, 60} {
		a := make([]float64, d*d)
		for i := range d {
			for j := i; j < d; j++ {
				a[i*d+j] = rng.NormFloat64()
				a[j*d+i] = a[i*d+j]
			}
		}
		vals, v := Eigen(a, d)
		for c := range d {
			for i := range d {
				av := 0.0
				for j := range d {
					av += a[i*d+j] * v[j*d+c]
				}
				if math.Abs(av-vals[c]*v[i*d+c]) > 1e-9 {
					t.Fatalf("d=%d: (A v - λ v)[%d] of eigenvector %d is %g", d, i, c, av-vals[c]*v[i*d+c])
				}
			}
			for c2 := range d {
				dot := 0.0
				for i := range d {
					dot += v[i*d+c] * v[i*d+c2]
				}
				want := 0.0
				if c == c2 {
					want = 1
				}
				if math.Abs(dot-want) > 1e-9 {
					t.Fatalf("d=%d: v%d·v%d = %g", d, c, c2, dot)
				}
			}
		}
	}
}

func TestSavedModelRoundTrip(t *testing.T) {
	x := correlated(3000, 6, 2)
	p := train(t, 3, x, 6, 2, 100)
	var buf bytes.Buffer
	if err := elastic.WriteModel(&buf, p.Saved(map[string]float64{"k": 3})); err != nil {
		t.Fatal(err)
	}
	s, err := elastic.ReadModel(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if s.Algorithm != "pca" || fmt.Sprint(s.Tensors["components"].Shape) != "[3 6]" {
		t.Fatalf("saved %q with components of shape %v", s.Algorithm, s.Tensors["components"].Shape)
	}
	back, err := FromSaved(s)
	if err != nil {
		t.Fatal(err)
	}
	a, b := p.Transform(x[:60]), back.Transform(x[:60])
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("projection %d: %v before saving, %v after", i, a[i], b[i])
		}
	}
	// The projections' variances are the explained variances.
	all := p.Transform(x)
	for r := range 3 {
		s, s2 := 0.0, 0.0
		for i := range 3000 {
			s += all[i*3+r]
			s2 += all[i*3+r] * all[i*3+r]
		}
		v := (s2 - s*s/3000) / 2999
		if math.Abs(v/p.ExplainedVariance[r]-1) > 1e-6 {
			t.Errorf("component %d: variance of the projections %v, explained variance %v", r, v, p.ExplainedVariance[r])
		}
	}
}

func TestErrors(t *testing.T) {
	ctx := context.Background()
	if _, _, err := elastic.Local(ctx, &PCA{}, elastic.Shards([]float64{1, 2}, nil, 1, 1, 1)); err == nil {
		t.Error("K = 0 was accepted")
	}
	if _, _, err := elastic.Local(ctx, &PCA{K: 3}, elastic.Shards([]float64{1, 2, 3, 4}, nil, 2, 1, 1)); err == nil {
		t.Error("3 components of 2 features were accepted")
	}
	if _, _, err := elastic.Local(ctx, &PCA{K: 1}, elastic.Shards([]float64{1, 2}, nil, 2, 1, 1)); err == nil {
		t.Error("PCA of one row was accepted")
	}
}
