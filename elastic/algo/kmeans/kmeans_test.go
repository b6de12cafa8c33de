package kmeans

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

// blobs is a synthetic stream of Gaussian blobs in random order.
func blobs(rows, d, k int, seed uint64) []float64 {
	rng := rand.New(rand.NewPCG(seed, 7))
	centres := make([]float64, k*d)
	for i := range centres {
		centres[i] = 6 * (2*rng.Float64() - 1)
	}
	x := make([]float64, rows*d)
	for i := range rows {
		c := rng.IntN(k)
		sd := 1 + 0.5*float64(c%3)
		for l := range d {
			x[i*d+l] = centres[c*d+l] + sd*rng.NormFloat64()
		}
	}
	return x
}

// sklearnInertia runs scikit-learn's KMeans (n_init default) on x and
// returns its inertia.
func sklearnInertia(t *testing.T, x []float64, d, k int) float64 {
	t.Helper()
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import sklearn").Run(); err != nil {
		t.Fatalf("scikit-learn is needed to check k-means (%s -c 'import sklearn': %v); scripts/test.sh installs python3-sklearn", py, err)
	}
	path := filepath.Join(t.TempDir(), "x.f64")
	buf := make([]byte, 0, 8*len(x))
	for _, v := range x {
		buf = append(buf, 0, 0, 0, 0, 0, 0, 0, 0)
		putF64(buf[len(buf)-8:], v)
	}
	if err := os.WriteFile(path, buf, 0o600); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`
import warnings, json, numpy as np
warnings.filterwarnings("ignore")
from sklearn.cluster import KMeans
x = np.fromfile(%q, dtype="<f8").reshape(-1, %d)
km = KMeans(n_clusters=%d, random_state=0).fit(x)
print(json.dumps({"inertia": float(km.inertia_)}))
`, path, d, k)
	var out, errb bytes.Buffer
	cmd := exec.Command(py, "-c", script)
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1") // threads only contend on a shared machine
	if err := cmd.Run(); err != nil {
		t.Fatalf("sklearn: %v\n%s", err, errb.String())
	}
	var r struct{ Inertia float64 }
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("sklearn output %q: %v", out.String(), err)
	}
	return r.Inertia
}

func putF64(b []byte, v float64) {
	u := math.Float64bits(v)
	for i := range 8 {
		b[i] = byte(u >> (8 * i))
	}
}

func train(t *testing.T, alg *KMeans, x []float64, d, workers, batch int) *Model {
	t.Helper()
	m, _, err := elastic.Local(context.Background(), alg, elastic.Shards(x, nil, d, workers, batch))
	if err != nil {
		t.Fatal(err)
	}
	km, err := FromModel(m, alg.K)
	if err != nil {
		t.Fatal(err)
	}
	return km
}

func checkAgainstSklearn(t *testing.T, name string, x []float64, d, k, batch int) {
	ref := sklearnInertia(t, x, d, k)
	var got [3]float64
	for i, workers := range []int{1, 2} {
		km := train(t, &KMeans{K: k, Seed: 1}, x, d, workers, batch)
		got[i] = km.Inertia(x)
		rel := got[i]/ref - 1
		t.Logf("%s k=%d, %d worker(s): inertia %.6g, scikit-learn %.6g (%+.2f%%)", name, k, workers, got[i], ref, 100*rel)
		if rel > 0.02 {
			t.Errorf("%s, %d worker(s): inertia %.6g is %.2f%% above scikit-learn's %.6g; want within 2%%", name, workers, got[i], 100*rel, ref)
		}
	}
}

func TestDigitsInertiaNearSklearn(t *testing.T) {
	x, d := loadDigits(t)
	checkAgainstSklearn(t, "digits", x, d, 10, 50)
}

func TestBlobsInertiaNearSklearn(t *testing.T) {
	const d, k = 16, 10
	rows := 100_000
	if raceEnabled {
		rows = 10_000
	}
	x := blobs(rows, d, 8, 42) // overlapping blobs, more clusters than blobs
	checkAgainstSklearn(t, "blobs", x, d, k, 500)
}

// TestDeterministic: one worker with one seed gives the same centres twice.
func TestDeterministic(t *testing.T) {
	x := blobs(5000, 4, 5, 1)
	a := train(t, &KMeans{K: 5, Seed: 3}, x, 4, 1, 100)
	b := train(t, &KMeans{K: 5, Seed: 3}, x, 4, 1, 100)
	for i := range a.Centers {
		if a.Centers[i] != b.Centers[i] {
			t.Fatalf("centre numbers differ at %d: %v vs %v", i, a.Centers[i], b.Centers[i])
		}
	}
}

func TestSavedModelRoundTrip(t *testing.T) {
	x := blobs(2000, 3, 4, 9)
	km := train(t, &KMeans{K: 4, Seed: 1}, x, 3, 2, 64)
	var buf bytes.Buffer
	if err := elastic.WriteModel(&buf, km.Saved(map[string]float64{"k": 4})); err != nil {
		t.Fatal(err)
	}
	s, err := elastic.ReadModel(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if s.Algorithm != "kmeans" || fmt.Sprint(s.Tensors["centers"].Shape) != "[4 3]" {
		t.Fatalf("saved %q with centers of shape %v", s.Algorithm, s.Tensors["centers"].Shape)
	}
	back, err := FromSaved(s)
	if err != nil {
		t.Fatal(err)
	}
	p, q := km.Predict(x), back.Predict(x)
	for i := range p {
		if p[i] != q[i] {
			t.Fatalf("row %d: cluster %d before saving, %d after", i, p[i], q[i])
		}
	}
}

func TestErrors(t *testing.T) {
	if _, _, err := elastic.Local(context.Background(), &KMeans{}, elastic.Shards([]float64{1, 2}, nil, 1, 1, 1)); err == nil {
		t.Error("K = 0 was accepted")
	}
	if _, _, err := elastic.Local(context.Background(), &KMeans{K: 5, Factor: 1}, elastic.Shards([]float64{1, 2, 3}, nil, 1, 1, 1)); err == nil {
		t.Error("3 rows made 5 clusters")
	}
}

// TestManyWorkers: four workers with small batches contend for the empty
// centres; the run still ends with K good centres.
func TestManyWorkers(t *testing.T) {
	const d, k = 8, 6
	x := blobs(20_000, d, k, 5)
	one := train(t, &KMeans{K: k, Seed: 2}, x, d, 1, 20).Inertia(x)
	four := train(t, &KMeans{K: k, Seed: 2}, x, d, 4, 5).Inertia(x)
	t.Logf("inertia on 1 worker %.6g, on 4 %.6g", one, four)
	if math.Abs(four/one-1) > 0.02 {
		t.Errorf("inertia on 4 workers %.6g, on 1 %.6g; want within 2%%", four, one)
	}
}
