package algo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/virga-ml/virga/elastic"
	"github.com/virga-ml/virga/elastic/input"
	"github.com/virga-ml/virga/internal/registry"
)

// linearCSV writes n rows x,y with y = 2x+1 and returns the file.
func linearCSV(t *testing.T, n int) string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		x := float64(i%50) / 50
		fmt.Fprintf(&b, "%g,%g\n", x, 2*x+1)
	}
	path := filepath.Join(t.TempDir(), "in.csv")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// reports records a trial's reports.
type reports struct {
	mu    sync.Mutex
	steps []int64
	last  map[string]float64
}

func (r *reports) report(_ context.Context, step int64, m map[string]float64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps = append(r.steps, step)
	r.last = m
	return nil
}

func TestLocalWritesTheModelAndReportsFinalMetrics(t *testing.T) {
	in := linearCSV(t, 600)
	b := Builtins["linear-learner"]
	alg, save, err := b.Make(map[string]float64{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	ckpt, out := t.TempDir(), filepath.Join(t.TempDir(), "model.json")
	var r reports
	l := &Local{Builtin: b, Alg: alg, Save: save, Input: in, Options: input.Options{BatchRows: 50, Label: input.LastColumn},
		Workers: 2, Epochs: 2, Every: 5 * time.Millisecond, CheckpointDir: ckpt, ModelOut: out, Report: r.report}
	res, err := l.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 1200 || res.Saved == nil || res.Saved.Algorithm != "linear-learner" {
		t.Fatalf("Run = rows %d, saved %+v; want 1200 rows of 2 passes and a linear-learner model", res.Rows, res.Saved)
	}
	if _, err := elastic.LoadModelFile(out); err != nil {
		t.Errorf("the model file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ckpt, registry.ModelDir)); err != nil {
		t.Errorf("the model directory in the checkpoint: %v", err)
	}
	if r.last["rows"] != 1200 {
		t.Errorf("final metrics %v: want rows 1200", r.last)
	}
	if _, ok := r.last["validation_loss"]; !ok {
		t.Errorf("final metrics %v: want the model's validation_loss", r.last)
	}
}

func TestLocalSampleSavesNothing(t *testing.T) {
	in := linearCSV(t, 600)
	b := Builtins["moments"]
	alg, save, _ := b.Make(nil, 0)
	out := filepath.Join(t.TempDir(), "model.json")
	l := &Local{Builtin: b, Alg: alg, Save: save, Input: in, Options: input.Options{BatchRows: 40}, Workers: 2, Epochs: 3,
		Every: time.Second, Sample: 100, ModelOut: out}
	res, err := l.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 200 || res.Saved != nil {
		t.Fatalf("Run = rows %d, saved %v; want 100 rows of each of 2 shards, one pass, no model", res.Rows, res.Saved)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a sample wrote the model file (%v)", err)
	}
	if n, err := CountRows(in, input.Options{}); err != nil || n != 600 {
		t.Errorf("CountRows = %d, %v; want 600", n, err)
	}
}

func TestGangLeaderIsCoordinatorAndWorker(t *testing.T) {
	in := linearCSV(t, 400)
	b := Builtins["moments"]
	alg, save, _ := b.Make(nil, 0)
	ckpt := t.TempDir()
	c := &Coordinator{Builtin: b, Alg: alg, Save: save, Addr: "127.0.0.1:0", Shards: 3, Passes: 1, Lease: time.Second,
		CheckpointDir: ckpt, Every: 10 * time.Millisecond, Expect: 1}
	w := &Worker{Name: b.Name, Alg: alg, Input: in, Options: input.Options{BatchRows: 25}, Shard: -1}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := GangLeader(ctx, c, w)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 400 {
		t.Fatalf("rows %d, want 400", res.Rows)
	}
	ck, err := elastic.ReadCheckpoint(ckpt)
	if err != nil || elastic.Rows(ck.Tensors) != 400 {
		t.Fatalf("the checkpoint: %v; want all 400 rows in it", err)
	}
	// A coordinator of another algorithm refuses the checkpoint.
	other := Builtins["median"]
	oalg, osave, _ := other.Make(nil, 0)
	c2 := &Coordinator{Builtin: other, Alg: oalg, Save: osave, Addr: "127.0.0.1:0", Shards: 3, Passes: 1, Lease: time.Second,
		CheckpointDir: ckpt, Every: time.Second}
	if _, err := c2.Run(ctx); err == nil || !strings.Contains(err.Error(), "remove this one") {
		t.Fatalf("Run over another algorithm's checkpoint: %v, want a refusal", err)
	}
}

func TestStoppedCoordinatorCheckpointsAndSaysSo(t *testing.T) {
	b := Builtins["moments"]
	alg, save, _ := b.Make(nil, 0)
	ckpt := t.TempDir()
	listening := make(chan string, 1)
	c := &Coordinator{Builtin: b, Alg: alg, Save: save, Addr: "127.0.0.1:0", Shards: 2, Passes: 1, Lease: time.Second,
		CheckpointDir: ckpt, Every: time.Hour, Listening: listening}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := c.Run(ctx); errc <- err }()
	<-listening
	cancel()
	if err := <-errc; err != ErrStopped {
		t.Fatalf("a stopped coordinator returned %v, want ErrStopped", err)
	}
	if _, err := elastic.ReadCheckpoint(ckpt); err != nil {
		t.Fatalf("a stopped coordinator left no checkpoint: %v", err)
	}
}
