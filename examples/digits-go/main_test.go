package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/virga-ml/virga/examples/digits-go/mlp"
	"github.com/virga-ml/virga/sdk/go/trial"
)

// loadTestData loads the repository's digits data set once per test binary.
var loadTestData = sync.OnceValues(mlp.LoadDefault)

func testData(t *testing.T) *mlp.Dataset {
	t.Helper()
	ds, err := loadTestData()
	if err != nil {
		t.Fatalf("loading data: %v", err)
	}
	return ds
}

// goodConfig is a setting that reaches > 95% validation accuracy quickly.
func goodConfig(dir string, epochs int) config {
	return config{
		Settings: mlp.Settings{LR: 0.1, Hidden: 64, L2: 1e-4, Momentum: 0.9, Batch: 32, Seed: 1},
		Epochs:   epochs, CheckpointDir: dir,
	}
}

// handRun is the SDK in "no server" mode, as a trainer run by hand sees it.
func handRun(t *testing.T) *trial.Trial {
	t.Helper()
	tr, err := trial.New(trial.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// fakeReporter records reports and plays a script: it answers stopAt with
// Stop, and closes interrupt (simulating SIGTERM) right after interruptAfter.
type fakeReporter struct {
	stopAt         int64
	interruptAfter int64
	interrupt      chan struct{}
	steps          []int64
	metrics        []map[string]float64
}

var _ reporter = (*fakeReporter)(nil)

func (f *fakeReporter) Report(_ context.Context, step int64, m map[string]float64) (trial.Decision, error) {
	f.steps = append(f.steps, step)
	f.metrics = append(f.metrics, m)
	if step == f.interruptAfter && f.interrupt != nil {
		close(f.interrupt)
	}
	if step == f.stopAt {
		return trial.Stop, nil
	}
	return trial.Continue, nil
}

func TestReachesGoodAccuracy(t *testing.T) {
	rep := &fakeReporter{stopAt: -1, interruptAfter: -1}
	_, how, err := train(context.Background(), goodConfig(t.TempDir(), 20), testData(t), rep, nil, io.Discard)
	if err != nil || how != finished {
		t.Fatalf("train = %v, %v; want finished", how, err)
	}
	if len(rep.steps) != 20 || rep.steps[0] != 1 || rep.steps[19] != 20 {
		t.Fatalf("reported steps %v, want 1..20", rep.steps)
	}
	last := rep.metrics[19]
	if last["val_accuracy"] <= 0.95 {
		t.Errorf("val_accuracy after 20 epochs = %.4f, want > 0.95", last["val_accuracy"])
	}
	if !(last["val_loss"] < rep.metrics[0]["val_loss"]) || !(last["train_loss"] < rep.metrics[0]["train_loss"]) {
		t.Errorf("losses did not fall: first %v, last %v", rep.metrics[0], last)
	}
}

// TestResumeIsBitIdentical trains 6 epochs straight, and separately trains
// while a stop signal arrives after epoch 3 (epoch 4 is abandoned), then
// resumes in a fresh call: the final networks must be bit-identical.
func TestResumeIsBitIdentical(t *testing.T) {
	ds := testData(t)
	const epochs = 6

	straightDir := t.TempDir()
	straight, how, err := train(context.Background(), goodConfig(straightDir, epochs), ds, handRun(t), nil, io.Discard)
	if err != nil || how != finished {
		t.Fatalf("straight run = %v, %v; want finished", how, err)
	}

	resumedDir := t.TempDir()
	stop := make(chan struct{})
	rep := &fakeReporter{stopAt: -1, interruptAfter: 3, interrupt: stop}
	_, how, err = train(context.Background(), goodConfig(resumedDir, epochs), ds, rep, stop, io.Discard)
	if err != nil || how != interrupted {
		t.Fatalf("interrupted run = %v, %v; want interrupted", how, err)
	}
	if h, _, ok, err := loadCheckpoint(resumedDir); err != nil || !ok || h.Epoch != 3 {
		t.Fatalf("checkpoint after interruption: epoch %d ok=%v err=%v; want epoch 3", h.Epoch, ok, err)
	}

	var out bytes.Buffer
	resumed, how, err := train(context.Background(), goodConfig(resumedDir, epochs), ds, handRun(t), nil, &out)
	if err != nil || how != finished {
		t.Fatalf("resumed run = %v, %v; want finished", how, err)
	}
	if !strings.Contains(out.String(), "resuming from") || !strings.Contains(out.String(), "epoch   4/6") || strings.Contains(out.String(), "epoch   3/6") {
		t.Errorf("resumed run did not continue at epoch 4:\n%s", out.String())
	}
	for i := range straight.Params {
		if math.Float64bits(straight.Params[i]) != math.Float64bits(resumed.Params[i]) ||
			math.Float64bits(straight.Velocity[i]) != math.Float64bits(resumed.Velocity[i]) {
			t.Fatalf("value %d differs: straight %v/%v, resumed %v/%v", i,
				straight.Params[i], straight.Velocity[i], resumed.Params[i], resumed.Velocity[i])
		}
	}
	a, _ := os.ReadFile(filepath.Join(straightDir, checkpointFile))
	b, _ := os.ReadFile(filepath.Join(resumedDir, checkpointFile))
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Error("final checkpoint files differ")
	}
}

func TestStopDecisionEndsTraining(t *testing.T) {
	dir := t.TempDir()
	rep := &fakeReporter{stopAt: 2, interruptAfter: -1}
	_, how, err := train(context.Background(), goodConfig(dir, 10), testData(t), rep, nil, io.Discard)
	if err != nil || how != stopped {
		t.Fatalf("train = %v, %v; want stopped", how, err)
	}
	if !slices.Equal(rep.steps, []int64{1, 2}) {
		t.Errorf("reported steps %v, want [1 2]", rep.steps)
	}
	if h, _, _, _ := loadCheckpoint(dir); h.Epoch != 2 {
		t.Errorf("checkpoint epoch = %d, want 2 (written before the report)", h.Epoch)
	}
}

func TestCompletedCheckpointDoesNothing(t *testing.T) {
	dir := t.TempDir()
	ds := testData(t)
	if _, _, err := train(context.Background(), goodConfig(dir, 2), ds, handRun(t), nil, io.Discard); err != nil {
		t.Fatal(err)
	}
	rep := &fakeReporter{stopAt: -1, interruptAfter: -1}
	_, how, err := train(context.Background(), goodConfig(dir, 2), ds, rep, nil, io.Discard)
	if err != nil || how != finished || len(rep.steps) != 0 {
		t.Errorf("second run = %v, %v, reports %v; want finished with no reports", how, err, rep.steps)
	}
}

func TestResumeRejectsDifferentShape(t *testing.T) {
	dir := t.TempDir()
	ds := testData(t)
	if _, _, err := train(context.Background(), goodConfig(dir, 1), ds, handRun(t), nil, io.Discard); err != nil {
		t.Fatal(err)
	}
	cfg := goodConfig(dir, 2)
	cfg.Hidden = 32
	_, _, err := train(context.Background(), cfg, ds, handRun(t), nil, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "64 hidden units") {
		t.Errorf("err = %v, want a hidden-units mismatch", err)
	}
}

func TestCheckpointRoundTripAndDamage(t *testing.T) {
	m := mlp.NewMLP(5, &mlp.SplitMix64{State: 9})
	for i := range m.Velocity {
		m.Velocity[i] = float64(i) * 1e-3
	}
	h := goodConfig("", 1).header(7)
	h.Hidden = 5
	data, err := encodeCheckpoint(h, m)
	if err != nil {
		t.Fatal(err)
	}
	gotH, got, err := decodeCheckpoint(data)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if gotH != h || !equalFloats(got.Params, m.Params) || !equalFloats(got.Velocity, m.Velocity) {
		t.Errorf("round trip changed the checkpoint: header %+v", gotH)
	}
	for _, pos := range []int{0, 20, len(data) / 2, len(data) - 1} {
		bad := append([]byte(nil), data...)
		bad[pos] ^= 0x40
		if _, _, err := decodeCheckpoint(bad); err == nil {
			t.Errorf("flipping byte %d went unnoticed", pos)
		}
	}
	if _, _, err := decodeCheckpoint(data[:len(data)-9]); err == nil {
		t.Error("a truncated checkpoint decoded")
	}
}

// clearVirgaEnv unsets the protocol's variables for the test's duration.
func clearVirgaEnv(t *testing.T) {
	for _, k := range []string{trial.EnvExperimentID, trial.EnvTrialID, trial.EnvAttemptID, trial.EnvHParams,
		trial.EnvCheckpointDir, trial.EnvReportURL, trial.EnvToken} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
}

func TestRunByHandFlagsOverrideHParams(t *testing.T) {
	clearVirgaEnv(t)
	t.Setenv(trial.EnvHParams, `{"hidden": 8, "epochs": 1, "lr": 0.2}`)
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run([]string{"--epochs", "2", "--checkpoint-dir", dir}, &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit code %d, stderr:\n%s", code, stderr.String())
	}
	h, _, ok, err := loadCheckpoint(dir)
	if err != nil || !ok {
		t.Fatalf("no checkpoint in --checkpoint-dir: %v", err)
	}
	if h.Epoch != 2 || h.Hidden != 8 || h.LR != 0.2 {
		t.Errorf("checkpoint header %+v, want epoch 2 (flag), hidden 8 and lr 0.2 (VIRGA_HPARAMS)", h)
	}
	if !strings.Contains(stdout.String(), "epoch   2/2") {
		t.Errorf("stdout lacks the epoch line:\n%s", stdout.String())
	}
}

func TestRunUsageErrors(t *testing.T) {
	clearVirgaEnv(t)
	for _, args := range [][]string{{"--lr", "-1"}, {"--hidden", "0"}, {"--bogus"}, {"extra"}} {
		var stderr bytes.Buffer
		if code := run(append(args, "--checkpoint-dir", t.TempDir()), io.Discard, &stderr); code != exitUsage {
			t.Errorf("run %v = %d, want %d; stderr %s", args, code, exitUsage, stderr.String())
		}
	}
}

// TestRunUnderVirga drives the binary's run function against a fake report
// endpoint: the searcher stops the trial after epoch 2, then a later
// attempt is told it is superseded.
func TestRunUnderVirga(t *testing.T) {
	var mu sync.Mutex
	var bodies []map[string]any
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, `{"error":"bad token"}`, http.StatusUnauthorized)
			return
		}
		var b map[string]any
		json.NewDecoder(r.Body).Decode(&b)
		mu.Lock()
		defer mu.Unlock()
		bodies = append(bodies, b)
		if status != http.StatusOK {
			http.Error(w, `{"error":"attempt is not current"}`, status)
			return
		}
		if len(bodies) == 2 {
			io.WriteString(w, `{"decision":"stop"}`)
			return
		}
		io.WriteString(w, `{"decision":"continue"}`)
	}))
	defer srv.Close()

	clearVirgaEnv(t)
	dir := t.TempDir()
	t.Setenv(trial.EnvHParams, `{"lr":0.1,"hidden":16,"l2":0.0001,"epochs":5}`)
	t.Setenv(trial.EnvCheckpointDir, dir)
	t.Setenv(trial.EnvReportURL, srv.URL+"/api/v1/attempts/1/report")
	t.Setenv(trial.EnvToken, "tok")

	var stderr bytes.Buffer
	if code := run([]string{"--checkpoint-dir", t.TempDir()}, io.Discard, &stderr); code != exitOK {
		t.Fatalf("exit code %d, want 0 after a stop decision; stderr:\n%s", code, stderr.String())
	}
	mu.Lock()
	if len(bodies) != 2 || bodies[1]["step"] != 2.0 {
		t.Errorf("reports = %v, want steps 1 and 2", bodies)
	}
	metrics, _ := bodies[0]["metrics"].(map[string]any)
	for _, k := range []string{"val_loss", "val_accuracy", "train_loss"} {
		if _, ok := metrics[k].(float64); !ok {
			t.Errorf("report lacks metric %q: %v", k, bodies[0])
		}
	}
	status = http.StatusConflict
	mu.Unlock()
	if h, _, ok, _ := loadCheckpoint(dir); !ok || h.Epoch != 2 {
		t.Errorf("VIRGA_CHECKPOINT_DIR holds epoch %d (ok=%v), want 2; it must win over --checkpoint-dir", h.Epoch, ok)
	}

	if code := run(nil, io.Discard, &stderr); code != exitSuperseded {
		t.Errorf("exit code %d after a 409, want %d", code, exitSuperseded)
	}
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			return false
		}
	}
	return true
}
