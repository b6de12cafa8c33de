package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/examples/digits-go/mlp"
	"github.com/virga-ml/virga/internal/serve/oip/inferencepb"
)

// serveProc is a running `virga serve` and the addresses it printed.
type serveProc struct {
	cmd        *exec.Cmd
	rest, grpc string
	mu         sync.Mutex
	logs       bytes.Buffer
}

func (s *serveProc) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.String()
}

// startServe starts `virga serve` with args and waits until it is ready.
func startServe(t *testing.T, state string, args ...string) *serveProc {
	t.Helper()
	cmd := exec.Command(virgaBin, append([]string{"serve", "--data-dir", state, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &serveProc{cmd: cmd}
	cmd.Stderr = writerFunc(func(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.logs.Write(p) })
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addrs := make(chan [2]string, 1)
	go func() {
		restRE := regexp.MustCompile(`serving REST on (http://\S+)`)
		grpcRE := regexp.MustCompile(`serving gRPC on (\S+)`)
		var rest, grpcAddr string
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.logs.WriteString(line + "\n")
			s.mu.Unlock()
			if m := restRE.FindStringSubmatch(line); m != nil {
				rest = m[1]
			}
			if m := grpcRE.FindStringSubmatch(line); m != nil {
				grpcAddr = m[1]
			}
			if rest != "" && grpcAddr != "" {
				addrs <- [2]string{rest, grpcAddr}
				rest = ""
			}
		}
	}()
	select {
	case a := <-addrs:
		s.rest, s.grpc = a[0], a[1]
	case <-time.After(60 * time.Second):
		t.Fatalf("virga serve printed no addresses:\n%s", s.output())
	}
	waitFor(t, "virga serve ready", 30*time.Second, func() bool {
		resp, err := http.Get(s.rest + "/v2/health/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return s
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// rawRows returns the digits validation split as the CSV holds it (pixels
// 0..16) and its labels.
func rawRows(t *testing.T, root string) ([][]float32, []int) {
	ds, err := mlp.LoadDataset(filepath.Join(root, "examples/data/digits.csv.gz"))
	if err != nil {
		t.Fatal(err)
	}
	rows := make([][]float32, len(ds.ValX))
	for i, x := range ds.ValX {
		rows[i] = make([]float32, len(x))
		for j, v := range x {
			rows[i][j] = float32(math.Round(v / mlp.InputScale))
		}
	}
	return rows, ds.ValY
}

type restInferResponse struct {
	ModelName    string `json:"model_name"`
	ModelVersion string `json:"model_version"`
	Outputs      []struct {
		Name  string    `json:"name"`
		Shape []int64   `json:"shape"`
		Data  []float64 `json:"data"`
	} `json:"outputs"`
}

// restLabels asks the served model for the labels of rows over REST, in
// batches, and returns them with the version that answered them ("mixed"
// when a swap happened between batches).
func restLabels(t *testing.T, base string, rows [][]float32) ([]int, string, error) {
	var labels []int
	var version string
	for lo := 0; lo < len(rows); lo += 16 {
		hi := min(lo+16, len(rows))
		var data []float32
		for _, r := range rows[lo:hi] {
			data = append(data, r...)
		}
		body, _ := json.Marshal(map[string]any{
			"id":      "val-" + strconv.Itoa(lo),
			"inputs":  []map[string]any{{"name": "pixels", "shape": []int{hi - lo, 64}, "datatype": "FP32", "data": data}},
			"outputs": []map[string]any{{"name": "label"}},
		})
		resp, err := http.Post(base+"/v2/models/digits/infer", "application/json", bytes.NewReader(body))
		if err != nil {
			return nil, "", err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, "", fmt.Errorf("infer: %s: %s", resp.Status, b)
		}
		var r restInferResponse
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, "", err
		}
		if len(r.Outputs) != 1 || r.Outputs[0].Name != "label" || len(r.Outputs[0].Data) != hi-lo {
			return nil, "", fmt.Errorf("infer answered %s", b)
		}
		for _, v := range r.Outputs[0].Data {
			labels = append(labels, int(v))
		}
		if lo > 0 && r.ModelVersion != version {
			version = "mixed"
		} else if lo == 0 {
			version = r.ModelVersion
		}
	}
	return labels, version, nil
}

// grpcLabels does what restLabels does over gRPC, with typed contents.
func grpcLabels(t *testing.T, addr string, rows [][]float32) []int {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := inferencepb.NewGRPCInferenceServiceClient(conn)
	var labels []int
	for lo := 0; lo < len(rows); lo += 16 {
		hi := min(lo+16, len(rows))
		var data []float32
		for _, r := range rows[lo:hi] {
			data = append(data, r...)
		}
		resp, err := c.ModelInfer(context.Background(), &inferencepb.ModelInferRequest{
			ModelName: "digits",
			Inputs: []*inferencepb.ModelInferRequest_InferInputTensor{{
				Name: "pixels", Datatype: "FP32", Shape: []int64{int64(hi - lo), 64},
				Contents: &inferencepb.InferTensorContents{Fp32Contents: data},
			}},
			Outputs: []*inferencepb.ModelInferRequest_InferRequestedOutputTensor{{Name: "label"}},
		})
		if err != nil {
			t.Fatalf("gRPC infer: %v", err)
		}
		if len(resp.Outputs) != 1 || resp.Outputs[0].Name != "label" {
			t.Fatalf("gRPC infer answered %v", resp)
		}
		if len(resp.RawOutputContents) == 1 {
			raw := resp.RawOutputContents[0]
			for i := 0; i+8 <= len(raw); i += 8 {
				labels = append(labels, int(int64(binary.LittleEndian.Uint64(raw[i:]))))
			}
		} else {
			for _, v := range resp.Outputs[0].Contents.GetInt64Contents() {
				labels = append(labels, int(v))
			}
		}
	}
	return labels
}

// shmLabels asks for the labels of rows with the system shared memory
// extension over REST: the rows in one shared-memory object under
// /dev/shm, the labels written by the server into another.
func shmLabels(t *testing.T, base string, rows [][]float32) []int {
	t.Helper()
	name := fmt.Sprintf("virga-test-%d", os.Getpid())
	in, out := filepath.Join("/dev/shm", name+"-in"), filepath.Join("/dev/shm", name+"-out")
	var raw []byte
	for _, r := range rows {
		for _, v := range r {
			raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
		}
	}
	if err := os.WriteFile(in, raw, 0o600); err != nil {
		t.Fatalf("shared memory: %v", err)
	}
	defer os.Remove(in)
	if err := os.WriteFile(out, make([]byte, 8*len(rows)), 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(out)
	post := func(path, body string) []byte {
		resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s: %s", path, resp.Status, b)
		}
		return b
	}
	post("/v2/systemsharedmemory/region/in/register", fmt.Sprintf(`{"key":"/%s-in","byte_size":%d}`, name, len(raw)))
	post("/v2/systemsharedmemory/region/out/register", fmt.Sprintf(`{"key":"/%s-out","byte_size":%d}`, name, 8*len(rows)))
	defer post("/v2/systemsharedmemory/unregister", "")
	for lo := 0; lo < len(rows); lo += 16 {
		hi := min(lo+16, len(rows))
		b := post("/v2/models/digits/infer", fmt.Sprintf(`{"inputs":[{"name":"pixels","shape":[%d,64],"datatype":"FP32",
		  "parameters":{"shared_memory_region":"in","shared_memory_offset":%d,"shared_memory_byte_size":%d}}],
		  "outputs":[{"name":"label","parameters":{"shared_memory_region":"out","shared_memory_offset":%d,"shared_memory_byte_size":%d}}]}`,
			hi-lo, lo*64*4, (hi-lo)*64*4, lo*8, (hi-lo)*8))
		if !strings.Contains(string(b), fmt.Sprintf(`"shared_memory_byte_size":%d`, (hi-lo)*8)) || strings.Contains(string(b), `"data"`) {
			t.Fatalf("infer with shared memory answered %s", b)
		}
	}
	labelBytes, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	labels := make([]int, len(rows))
	for i := range labels {
		labels[i] = int(int64(binary.LittleEndian.Uint64(labelBytes[8*i:])))
	}
	return labels
}

func accuracy(labels, want []int) float64 {
	right := 0
	for i := range want {
		if i < len(labels) && labels[i] == want[i] {
			right++
		}
	}
	return float64(right) / float64(len(want))
}

// TestServeEndToEnd tunes digits-go, registers its two trials' models,
// serves the best through an alias over REST and gRPC (the served labels
// give exactly the trial's own validation accuracy), moves the alias (the
// new version takes over), moves it to a version whose file is corrupt (the
// old one keeps serving), and restarts serve after kill -9 (it serves what
// the alias names).
func TestServeEndToEnd(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	cmd := exec.Command(virgaBin, "run", "examples/digits-go/experiment-quick.yaml", "--data-dir", state)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("virga run: %v\n%s", err, out)
	}
	srv := startServer(t, state, freePort(t), "")
	defer srv.stop()

	var best, other virga.ModelVersion
	cli(t, state, &best, "models", "register", "digits", "--from-experiment", "1", "--best", "--json")
	var trials []virga.Trial
	cli(t, state, &trials, "trials", "1", "--json")
	for _, tr := range trials {
		if tr.ID != best.TrialID {
			cli(t, state, &other, "models", "register", "digits", "--from-trial", strconv.FormatInt(tr.ID, 10), "--json")
		}
	}
	if best.Version != 1 || other.Version != 2 {
		t.Fatalf("registered versions %d and %d, want 1 and 2", best.Version, other.Version)
	}
	// Version 3: digits' manifest over a corrupt network file.
	broken := t.TempDir()
	dl := filepath.Join(t.TempDir(), "v1")
	if out, errOut, code := runCLI(t, state, "models", "download", "digits:1", dl, "--data-dir", state); code != 0 {
		t.Fatalf("download: %s%s", out, errOut)
	}
	manifest, err := os.ReadFile(filepath.Join(dl, "virga-model.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(broken, "virga-model.json"), manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(broken, "mlp.json"), []byte(`{"inputs":64,"hidden":3,"classes":10,"params":[1,2`), 0o644); err != nil {
		t.Fatal(err)
	}
	var v3 virga.ModelVersion
	cli(t, state, &v3, "models", "register", "digits", "--from-dir", broken, "--json")
	var a virga.ModelAlias
	cli(t, state, &a, "models", "alias", "digits", "prod", "1", "--json")
	var unlisted virga.ModelVersion
	cli(t, state, &unlisted, "models", "register", "unlisted", "--from-trial", strconv.FormatInt(best.TrialID, 10), "--json")

	rows, want := rawRows(t, root)
	s := startServe(t, state, "--models", "digits@prod", "--pin", "digits", "--watch", "200ms")

	// --models is what is served: a registered model it does not name is
	// not, with or without a version; the versions of one it names are.
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/v2/models/unlisted", http.StatusNotFound},
		{"GET", "/v2/models/unlisted/versions/1", http.StatusNotFound},
		{"GET", "/v2/models/unlisted/versions/1/ready", http.StatusNotFound},
		{"POST", "/v2/models/unlisted/versions/1/infer", http.StatusNotFound},
		{"GET", "/v2/models/digits/versions/2", http.StatusOK},
		{"GET", "/v2/models/digits/versions/9", http.StatusNotFound},
	} {
		req, err := http.NewRequest(c.method, s.rest+c.path, strings.NewReader(`{"inputs":[{"name":"pixels","shape":[1,64],"datatype":"FP32","data":[`+strings.Repeat("0,", 63)+`0]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, resp.StatusCode, body, c.want)
		}
		// A version the registry does not have is named once, without
		// the status of the registry's own answer.
		if want := `{"error":"model not found: model digits version 9: not found"}`; strings.HasSuffix(c.path, "/9") && strings.TrimSpace(string(body)) != want {
			t.Errorf("%s %s: %s, want %s", c.method, c.path, body, want)
		}
	}

	labels, version, err := restLabels(t, s.rest, rows)
	if err != nil {
		t.Fatal(err)
	}
	wantAcc := best.Metrics["val_accuracy"]
	if version != "1" || accuracy(labels, want) != wantAcc {
		t.Fatalf("REST: version %s, accuracy %.6f; want version 1 and the trial's own validation accuracy %.6f", version, accuracy(labels, want), wantAcc)
	}
	if acc := accuracy(grpcLabels(t, s.grpc, rows), want); acc != wantAcc {
		t.Fatalf("gRPC: accuracy %.6f, want %.6f", acc, wantAcc)
	}
	if acc := accuracy(shmLabels(t, s.rest, rows), want); acc != wantAcc {
		t.Fatalf("REST with shared memory: accuracy %.6f, want %.6f", acc, wantAcc)
	}

	// Moving the alias swaps the version served.
	cli(t, state, &a, "models", "alias", "digits", "prod", "2", "--json")
	var acc2 float64
	waitFor(t, "digits@prod to serve version 2", 30*time.Second, func() bool {
		labels, version, err := restLabels(t, s.rest, rows)
		acc2 = accuracy(labels, want)
		return err == nil && version == "2"
	})
	if acc2 != other.Metrics["val_accuracy"] {
		t.Errorf("version 2 gives accuracy %.6f, want its trial's %.6f", acc2, other.Metrics["val_accuracy"])
	}

	// A version that fails to load leaves the old one serving.
	cli(t, state, &a, "models", "alias", "digits", "prod", "3", "--json")
	waitFor(t, "serve to report the failed load", 30*time.Second, func() bool {
		return strings.Contains(s.output(), "failed to load")
	})
	if _, version, err := restLabels(t, s.rest, rows[:16]); err != nil || version != "2" {
		t.Fatalf("after a move to a corrupt version: version %q, %v; want version 2 still serving", version, err)
	}

	// kill -9, then a restart serves what the alias names.
	cli(t, state, &a, "models", "alias", "digits", "prod", "2", "--json")
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
	s = startServe(t, state, "--models", "digits@prod", "--pin", "digits")
	if _, version, err := restLabels(t, s.rest, rows[:16]); err != nil || version != "2" {
		t.Fatalf("after kill -9 and a restart: version %q, %v; want 2", version, err)
	}
}

// torchOutputs computes, with PyTorch, what the digits-torch trial's
// checkpointed network gives for the first n validation rows (raw pixels):
// the probabilities, row after row, and the rows themselves.
const torchOutputsScript = `
import json, sys, torch
sys.path.insert(0, "examples/digits-torch")
import train
ckpt, n = sys.argv[1], int(sys.argv[2])
state = train.load_checkpoint(ckpt)
model = train.build_model(state["settings"]["hidden"])
model.load_state_dict(state["model"])
model.eval()
_, _, val_x, _ = train.load_dataset("examples/data/digits.csv.gz")
raw = torch.round(val_x[:n] * train.MAX_PIXEL)
with torch.no_grad():
    probs, labels = train.Exported(model)(raw)
json.dump({"rows": raw.tolist(), "probabilities": probs.flatten().tolist(), "labels": labels.tolist()}, sys.stdout)
`

// TestServeTorchModel tunes the PyTorch example, registers its best trial's
// ONNX export and serves it through ONNX Runtime: the probabilities equal
// PyTorch's own for the same rows to 1e-5.
func TestServeTorchModel(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	cmd := exec.Command(virgaBin, "run", "examples/digits-torch/experiment-quick.yaml", "--data-dir", state)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("virga run: %v\n%s", err, out)
	}
	srv := startServer(t, state, freePort(t), "")
	defer srv.stop()
	var v virga.ModelVersion
	cli(t, state, &v, "models", "register", "digits-torch", "--from-experiment", "1", "--best", "--json")
	if v.Format != "onnx" {
		t.Fatalf("registered %+v, want the ONNX export", v)
	}

	py := exec.Command("/usr/bin/python3", "-c", torchOutputsScript, filepath.Join(state, "checkpoints", v.CheckpointID), "64")
	py.Dir = root
	py.Env = append(os.Environ(), "OMP_NUM_THREADS=1")
	out, err := py.Output()
	if err != nil {
		t.Fatalf("PyTorch: %v", err)
	}
	var want struct {
		Rows          [][]float32 `json:"rows"`
		Probabilities []float64   `json:"probabilities"`
		Labels        []int64     `json:"labels"`
	}
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatal(err)
	}

	s := startServe(t, state, "--models", "digits-torch", "--pin", "digits-torch")
	var data []float32
	for _, r := range want.Rows {
		data = append(data, r...)
	}
	body, _ := json.Marshal(map[string]any{
		"inputs": []map[string]any{{"name": "pixels", "shape": []int{len(want.Rows), 64}, "datatype": "FP32", "data": data}},
	})
	resp, err := http.Post(s.rest+"/v2/models/digits-torch/infer", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("infer: %s: %s", resp.Status, b)
	}
	var got restInferResponse
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Outputs) != 2 || got.Outputs[0].Name != "probabilities" || got.Outputs[1].Name != "label" {
		t.Fatalf("outputs: %s", b)
	}
	probs, labels := got.Outputs[0].Data, got.Outputs[1].Data
	if len(probs) != len(want.Probabilities) || len(labels) != len(want.Labels) {
		t.Fatalf("%d probabilities and %d labels, want %d and %d", len(probs), len(labels), len(want.Probabilities), len(want.Labels))
	}
	worst := 0.0
	for i, p := range probs {
		worst = max(worst, math.Abs(p-want.Probabilities[i]))
	}
	t.Logf("%d rows: served probabilities within %g of PyTorch's", len(want.Rows), worst)
	if worst > 1e-5 {
		t.Errorf("served probabilities differ from PyTorch's by up to %g (want at most 1e-5)", worst)
	}
	for i, l := range labels {
		if int64(l) != want.Labels[i] {
			t.Errorf("row %d: served label %v, PyTorch's %d", i, l, want.Labels[i])
		}
	}
}

// TestServeUsageErrors: a bad flag value is a usage error (exit 2) that says
// what would be right.
func TestServeUsageErrors(t *testing.T) {
	state := t.TempDir()
	if err := os.WriteFile(filepath.Join(state, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--memory", "2XB"}, "want a positive number with an optional unit"},
		{[]string{"--batching", "fastest"}, "unknown batching policy"},
		{[]string{"--batching", "fixed:soon"}, "want fixed:DELAY"},
		{[]string{"--objective", "0s"}, "want a positive duration"},
		{[]string{"--models", "digits@"}, "--models"},
		{[]string{"--repository", filepath.Join(state, "nope")}, "--repository " + filepath.Join(state, "nope") + ": no such directory"},
		{[]string{"--repository", filepath.Join(state, "file")}, "--repository " + filepath.Join(state, "file") + ": a file, not a directory"},
		{[]string{"--http", "", "--grpc", ""}, "nothing to listen on"},
		{[]string{"--cache-policy", "lfu"}, "want cost, frequency or lru"},
		{[]string{"--lru", "--cache-policy", "frequency"}, "give one"},
		{[]string{"--max-loads", "0"}, "must be positive"},
	} {
		_, errOut, code := runCLI(t, state, append([]string{"serve", "--data-dir", state}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("serve %v: exit %d, %q; want exit 2 saying %q", c.args, code, errOut, c.want)
		}
	}
}
