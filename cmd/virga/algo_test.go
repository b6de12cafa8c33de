package main

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/virga-ml/virga/elastic"
)

// digits is the UCI digits set the examples use (as ../shared/data/digits).
var digits, _ = filepath.Abs("../../examples/data/digits.csv.gz")

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

// TestAlgoKilledResumes: `virga algo median` killed (SIGKILL) mid-run and
// run again on the same checkpoint directory finishes with the median of
// the input (within 1%), having counted every row exactly once.
func TestAlgoKilledResumes(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "values.csv")
	const n = 1_000_000
	x, exact := medianInput(n)
	var sb strings.Builder
	for _, v := range x {
		sb.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
		sb.WriteByte('\n')
	}
	if err := os.WriteFile(data, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(dir, "ckpt")
	args := []string{"algo", "median", "--input", data, "--workers", "2", "--batch", "500", "--checkpoint", ckpt, "--checkpoint-every", "20ms", "--json"}
	first := exec.Command(virgaBin, args...)
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill it once it has checkpointed some of the input.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if st, err := os.Stat(filepath.Join(ckpt, elastic.StateFile)); err == nil && st.Size() > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = first.Process.Signal(syscall.SIGKILL)
	_ = first.Wait()
	second := exec.Command(virgaBin, args...)
	var stderr strings.Builder
	second.Stderr = &stderr
	b, err := second.Output()
	if err != nil {
		t.Fatalf("the resumed run: %v\n%s%s", err, b, stderr.String())
	}
	mm := regexp.MustCompile(`resuming from the checkpoint in .*: (\d+) rows read`).FindStringSubmatch(stderr.String())
	if mm == nil {
		t.Fatalf("the second run did not resume from the checkpoint:\n%s", stderr.String())
	}
	if at, _ := strconv.ParseInt(mm[1], 10, 64); at <= 0 || at >= n {
		t.Fatalf("resumed at row %d; want a point inside the input of %d rows", at, n)
	}
	var m elastic.SavedModel
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	got, count := m.Tensors["median"].Data[0], m.Tensors["n"].Data[0]
	if rel := math.Abs(got-exact) / exact; rel > 0.01 {
		t.Errorf("median %.4f, exact %.4f: %.2f%% off", got, exact, 100*rel)
	}
	if count != n {
		t.Errorf("counted %v rows; want %d, each exactly once", count, n)
	}
}

func medianInput(n int) ([]float64, float64) {
	rng := rand.New(rand.NewPCG(9, 10))
	x := make([]float64, n)
	for i := range x {
		x[i] = 50 + 10*rng.NormFloat64() + 20*rng.ExpFloat64()
	}
	s := slices.Clone(x)
	slices.Sort(s)
	return x, (s[n/2-1] + s[n/2]) / 2
}

// writeMedianInput writes medianInput(n) to DIR/values.csv, one value a
// line, and returns the file and the exact median.
func writeMedianInput(t *testing.T, dir string, n int) (string, float64) {
	t.Helper()
	x, exact := medianInput(n)
	var sb strings.Builder
	for _, v := range x {
		sb.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
		sb.WriteByte('\n')
	}
	data := filepath.Join(dir, "values.csv")
	if err := os.WriteFile(data, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return data, exact
}

// TestAlgoWorkerProcesses: a coordinator process and two worker processes
// (virga algo --serve / --join); one worker is killed (SIGKILL) mid-run and
// started again, then the coordinator is killed and started again from its
// checkpoint: the job ends with the median within 1%, every row read.
func TestAlgoWorkerProcesses(t *testing.T) {
	dir := t.TempDir()
	const n = 600_000
	data, exact := writeMedianInput(t, dir, n)
	port := freePort(t)
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	ckpt := filepath.Join(dir, "ckpt")
	model := filepath.Join(dir, "model.json")
	coordinator := func() *exec.Cmd {
		c := exec.Command(virgaBin, "algo", "median", "--serve", "127.0.0.1:"+strconv.Itoa(port), "--shards", "2",
			"--checkpoint", ckpt, "--checkpoint-every", "20ms", "--model", model)
		c.Stderr = os.Stderr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	worker := func(k int) *exec.Cmd {
		// Small batches: the run lasts long enough to be interrupted.
		c := exec.Command(virgaBin, "algo", "median", "--join", url, "--input", data, "--shard", strconv.Itoa(k), "--shards", "2", "--batch", "100")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	rowsRead := func() int64 {
		snap, err := readState(ckpt)
		if err != nil {
			return 0
		}
		return elastic.Rows(snap)
	}
	waitRows := func(least int64) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for rowsRead() < least {
			if time.Now().After(deadline) {
				t.Fatalf("the checkpoint reached %d rows, not %d", rowsRead(), least)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	c := coordinator()
	w0, w1 := worker(0), worker(1)
	waitRows(n / 10)
	_ = w1.Process.Signal(syscall.SIGKILL) // a worker dies
	_ = w1.Wait()
	w1 = worker(1) // and comes back: it reads on from the state's position
	waitRows(n / 4)
	_ = c.Process.Signal(syscall.SIGKILL) // the coordinator dies
	_ = c.Wait()
	c = coordinator() // and comes back from its checkpoint; the workers join it again
	for _, w := range []*exec.Cmd{w0, w1} {
		if err := w.Wait(); err != nil {
			t.Fatalf("a worker failed: %v", err)
		}
	}
	if err := c.Wait(); err != nil {
		t.Fatalf("the coordinator failed: %v", err)
	}
	m, err := elastic.LoadModelFile(model)
	if err != nil {
		t.Fatal(err)
	}
	got, count := m.Tensors["median"].Data[0], m.Tensors["n"].Data[0]
	if rel := math.Abs(got-exact) / exact; rel > 0.01 {
		t.Errorf("median %.4f, exact %.4f: %.2f%% off", got, exact, 100*rel)
	}
	// Work after the coordinator's last checkpoint is redone: the count may
	// exceed n by what the workers pushed since, never fall short.
	if count < n {
		t.Errorf("counted %v rows; want at least %d", count, n)
	}
	t.Logf("median %.4f (exact %.4f), %v rows counted for %d", got, exact, count, n)
}

// TestAlgoBuiltinsSaveModels: every built-in learner runs over the digits
// set from the command line, with two workers, and saves a model of the
// documented format with the shapes it should have.
func TestAlgoBuiltinsSaveModels(t *testing.T) {
	for _, c := range []struct {
		args   []string
		algo   string
		tensor string
		shape  []int
	}{
		{[]string{"linear-learner", "--param", "classes=10"}, "linear-learner", "weights", []int{10, 64}},
		{[]string{"kmeans", "--param", "k=10", "--param", "seed=3"}, "kmeans", "centers", []int{10, 64}},
		{[]string{"pca", "--param", "k=5"}, "pca", "components", []int{5, 64}},
		{[]string{"factorization-machines", "--param", "classes=2", "--param", "factors=4"}, "factorization-machines", "v", []int{64, 4}},
	} {
		t.Run(c.algo, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "model.json")
			args := append([]string{"algo"}, c.args...)
			args = append(args, "--input", digits, "--label", "last", "--workers", "2", "--batch", "100", "--model", out)
			if b, err := exec.Command(virgaBin, args...).CombinedOutput(); err != nil {
				t.Fatalf("virga %v: %v\n%s", args, err, b)
			}
			m, err := elastic.LoadModelFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if m.Algorithm != c.algo || !slices.Equal(m.Tensors[c.tensor].Shape, c.shape) {
				t.Fatalf("model %s with %s of shape %v; want %s with %s of shape %v", m.Algorithm, c.tensor, m.Tensors[c.tensor].Shape, c.algo, c.tensor, c.shape)
			}
		})
	}
	if b, err := exec.Command(virgaBin, "algo", "kmeans", "--input", digits, "--label", "last").CombinedOutput(); err == nil || !strings.Contains(string(b), "--param k=10") {
		t.Errorf("kmeans without k: %v\n%s; want a usage error naming --param k", err, b)
	}
	if b, err := exec.Command(virgaBin, "algo", "linear-learner", "--input", digits, "--label", "last", "--param", "learning_rat=0.1").CombinedOutput(); err == nil ||
		!strings.Contains(string(b), `no parameter "learning_rat"`) || !strings.Contains(string(b), "learning_rate") {
		t.Errorf("a misspelt --param: %v\n%s; want a usage error naming it and the parameters there are", err, b)
	}
}

// readState reads a checkpoint's tensors: a checkpoint directory or its
// state.json.
func readState(path string) (map[string]elastic.Tensor, error) { return elastic.ReadState(path) }
