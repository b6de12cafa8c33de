package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/agent"
	"github.com/virga-ml/virga/internal/api/client"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/checkpoint"
	"github.com/virga-ml/virga/internal/checkpoint/blobstore/cloud"
	"github.com/virga-ml/virga/internal/control"
	"github.com/virga-ml/virga/internal/server"
)

// agentBackend is a backend.Remote for tests: it runs each attempt as a
// `virga agent` process on this machine, as a Slurm or Kubernetes node
// would, so the server never touches the trial's checkpoint directory: the
// checkpoints travel through the API with the trial's token.
type agentBackend struct {
	bin    string
	events chan backend.Event
	// server, when set, is the URL the agents reach the server by (a proxy).
	server string

	mu      sync.Mutex
	closed  bool
	running map[int64]*exec.Cmd
	wg      sync.WaitGroup
}

func newAgentBackend(bin string) *agentBackend {
	return &agentBackend{bin: bin, events: make(chan backend.Event, 1024), running: map[int64]*exec.Cmd{}}
}

func (b *agentBackend) Name() string                 { return "agenttest" }
func (b *agentBackend) Remote() bool                 { return true }
func (b *agentBackend) Events() <-chan backend.Event { return b.events }
func (b *agentBackend) Free() virga.Resources {
	b.mu.Lock()
	defer b.mu.Unlock()
	return virga.Resources{CPU: float64(8 - len(b.running)), MemoryMB: 1 << 20}
}

func (b *agentBackend) Start(_ context.Context, s *backend.StartSpec) error {
	spec := agent.FromStart(s)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.server != "" {
		spec.Server = b.server
	}
	cmd := exec.Command(b.bin, "agent")
	cmd.Env = append(os.Environ(), agent.EnvSpec+"="+spec.Encode())
	out, err := os.Create(filepath.Join(s.Dir, "output.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		out.Close()
		return err
	}
	b.running[s.AttemptID] = cmd
	b.events <- backend.Event{AttemptID: s.AttemptID, Kind: backend.Started, Time: time.Now(), PID: cmd.Process.Pid}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		err := cmd.Wait()
		out.Close()
		ev := backend.Event{AttemptID: s.AttemptID, Kind: backend.Exited, Time: time.Now()}
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			ev.Signal = ws.Signal().String()
		} else if err == nil || cmd.ProcessState != nil {
			code := cmd.ProcessState.ExitCode()
			ev.ExitCode = &code
		}
		b.mu.Lock()
		delete(b.running, s.AttemptID)
		if !b.closed {
			b.events <- ev
		}
		b.mu.Unlock()
	}()
	return nil
}

func (b *agentBackend) Stop(id int64, grace time.Duration) error {
	b.mu.Lock()
	cmd := b.running[id]
	b.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	time.AfterFunc(grace+time.Second, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	return nil
}

func (b *agentBackend) Close() error {
	b.mu.Lock()
	b.closed = true
	for _, cmd := range b.running {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	b.mu.Unlock()
	b.wg.Wait()
	close(b.events)
	return nil
}

// TestRemoteAgentCheckpointsThroughTheAPI runs trials through `virga agent`
// with a backend whose attempts the server cannot see: each trial fails once
// after step 2, and its next attempt resumes from the checkpoint its agent
// uploaded (fetched back by the next agent), repeating no step.
func TestRemoteAgentCheckpointsThroughTheAPI(t *testing.T) {
	t.Run("directory", func(t *testing.T) { testRemoteAgent(t, "") })
	t.Run("s3", func(t *testing.T) {
		u, objects := fakeS3(t)
		testRemoteAgent(t, u)
		// keep_last 2 (the default) for each of the 2 trials
		if n := objects(); n < 2 || n > 4 {
			t.Errorf("the S3 bucket holds %d checkpoint objects; want 2 to 4", n)
		}
	})
}

// fakeS3 starts an S3-compatible server in this process with one bucket and
// returns the checkpoint storage URL for it and a count of its objects.
func fakeS3(t *testing.T) (string, func() int) {
	mem := s3mem.New()
	if err := mem.CreateBucket("ckpt"); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(gofakes3.New(mem).Server())
	t.Cleanup(ts.Close)
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_PROFILE": "",
		"AWS_CONFIG_FILE": filepath.Join(t.TempDir(), "none"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(t.TempDir(), "none"),
		"AWS_EC2_METADATA_DISABLED": "true"} {
		t.Setenv(k, v)
	}
	objects := func() int {
		objs, err := mem.ListBucket("ckpt", &gofakes3.Prefix{}, gofakes3.ListBucketPage{})
		if err != nil {
			t.Fatal(err)
		}
		return len(objs.Contents)
	}
	return "s3://ckpt?endpoint=" + url.QueryEscape(ts.URL) + "&use_path_style=true&region=us-east-1&disable_https=true", objects
}

func testRemoteAgent(t *testing.T, checkpoints string) {
	dir := t.TempDir()
	data := filepath.Join(dir, "state")
	be := newAgentBackend(virgaBin)
	srv, err := server.Start(context.Background(), server.Config{DataDir: data, Backend: be, Version: "test", Checkpoints: checkpoints,
		CheckpointSchemes: cloud.Schemes()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c := client.New(srv.URL, srv.Token)
	exp := stepExperiment(t, dir, "remote", 2, 2, 6, 30, "  fail_at: 2")
	b, _ := os.ReadFile(exp)
	e, err := c.Submit(context.Background(), "remote.yaml", b)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, c, e.ID, 60*time.Second)
	ts, err := c.Trials(context.Background(), e.ID)
	if err != nil || len(ts) != 2 {
		t.Fatalf("trials: %v, %v", ts, err)
	}
	for _, tr := range ts {
		if tr.State != virga.TrialCompleted {
			t.Errorf("trial %d: %s (%s); want COMPLETED", tr.ID, tr.State, tr.Message)
		}
		l := readLedger(t, dir, tr.ID)
		if len(l.starts) != 2 || l.starts[0].from != 0 || l.starts[1].from != 3 {
			t.Errorf("trial %d started %+v; want from step 0, then from step 3 (its uploaded checkpoint)", tr.ID, l.starts)
		}
		for s, pids := range l.steps {
			if len(pids) != 1 {
				t.Errorf("trial %d: step %d computed %d times", tr.ID, s, len(pids))
			}
		}
		cks, err := c.Checkpoints(context.Background(), tr.ID)
		if err != nil || len(cks) == 0 {
			t.Errorf("trial %d: checkpoints %v, %v; want the uploaded ones recorded", tr.ID, cks, err)
		}
		if _, err := os.Stat(filepath.Join(data, "trials", strconv.FormatInt(tr.ID, 10))); err == nil {
			t.Errorf("trial %d has a checkpoint directory on the server; a remote attempt's lives on its node", tr.ID)
		}
	}
	if checkpoints != "" {
		if _, err := os.Stat(filepath.Join(data, "checkpoints")); err == nil {
			t.Errorf("checkpoints were written to the data directory; want them all in %s", checkpoints)
		}
	}
}

// TestRemoteAgentCheckpointsEveryNSteps: a trial that reports every step and
// writes its checkpoint every 10 steps, reporting at once after each write,
// completes in one attempt through `virga agent`. The directory's times are
// too recent to be trusted at the reports that follow a write, but its
// content is unchanged: the agent uploads each checkpoint once, and no
// upload is left counted against the attempt as unreported.
func TestRemoteAgentCheckpointsEveryNSteps(t *testing.T) {
	dir := t.TempDir()
	be := newAgentBackend(virgaBin)
	srv, err := server.Start(context.Background(), server.Config{DataDir: filepath.Join(dir, "state"), Backend: be, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	// The agents reach the server through a proxy that counts the uploads.
	target, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var uploads atomic.Int64
	rp := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/checkpoints") {
			uploads.Add(1)
		}
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	be.mu.Lock()
	be.server = proxy.URL
	be.mu.Unlock()

	c := client.New(srv.URL, srv.Token)
	const steps, every = 60, 10
	exp := stepExperiment(t, dir, "every", 1, 1, steps, 5, fmt.Sprintf("  checkpoint_every: %d", every))
	b, _ := os.ReadFile(exp)
	e, err := c.Submit(context.Background(), "every.yaml", b)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, c, e.ID, 60*time.Second)
	ts, err := c.Trials(context.Background(), e.ID)
	if err != nil || len(ts) != 1 {
		t.Fatalf("trials: %v, %v", ts, err)
	}
	tr := ts[0]
	if tr.State != virga.TrialCompleted || tr.Step != steps-1 || tr.Checkpoint == "" {
		t.Errorf("trial %d: %s at step %d (%s), checkpoint %q; want COMPLETED at step %d with a checkpoint",
			tr.ID, tr.State, tr.Step, tr.Message, tr.Checkpoint, steps-1)
	}
	if l := readLedger(t, dir, tr.ID); len(l.starts) != 1 {
		t.Errorf("trial %d started %d times (%+v); want once", tr.ID, len(l.starts), l.starts)
	}
	if n := uploads.Load(); n != steps/every {
		t.Errorf("the agent uploaded %d times; want %d, once for each checkpoint written", n, steps/every)
	}
}

// TestRemoteRepeatedUploads: an agent may upload the content it uploaded
// and reported before (an older agent does, at the report after a write); a
// report that names it again leaves nothing counted as unreported, so the
// attempt never reaches the bound of unreported uploads.
func TestRemoteRepeatedUploads(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "state")
	be := newAgentBackend(virgaBin)
	srv, err := server.Start(context.Background(), server.Config{DataDir: data, Backend: be, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c := client.New(srv.URL, srv.Token)
	// The trial sleeps before its first step: this test reports for it.
	exp := stepExperiment(t, dir, "again", 1, 1, 1, 60000, "")
	b, _ := os.ReadFile(exp)
	e, err := c.Submit(context.Background(), "again.yaml", b)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = c.Control(context.Background(), e.ID, "stop") }()
	var tr *virga.Trial
	waitFor(t, "the trial to run", 30*time.Second, func() bool {
		ts, err := c.Trials(context.Background(), e.ID)
		if err != nil || len(ts) != 1 || ts[0].State != virga.TrialRunning {
			return false
		}
		tr = ts[0]
		return true
	})
	v, err := c.Trial(context.Background(), tr.ID)
	if err != nil || len(v.AttemptList) == 0 {
		t.Fatalf("trial %d: %v", tr.ID, err)
	}
	secret, err := os.ReadFile(filepath.Join(data, "secret"))
	if err != nil {
		t.Fatal(err)
	}
	tok := control.TrialToken(bytes.TrimSpace(secret), tr.ID)
	base := srv.URL + "/api/v1/attempts/" + strconv.FormatInt(v.AttemptList[len(v.AttemptList)-1].ID, 10)
	post := func(path, ctype string, body io.Reader) (int, []byte) {
		req, _ := http.NewRequest("POST", base+path, body)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", ctype)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		reply, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, reply
	}
	src := t.TempDir()
	step := 0
	for k := range 8 {
		if err := os.WriteFile(filepath.Join(src, "state"), []byte(strconv.Itoa(k)), 0o644); err != nil {
			t.Fatal(err)
		}
		// Each content is uploaded and reported three times, as an agent
		// that cannot trust the directory's times does.
		for range 3 {
			var tarball bytes.Buffer
			if _, err := checkpoint.WriteArchive(&tarball, src); err != nil {
				t.Fatal(err)
			}
			code, reply := post("/checkpoints", "application/x-tar", &tarball)
			var info struct{ ID string }
			if code != http.StatusOK || json.Unmarshal(reply, &info) != nil || info.ID == "" {
				t.Fatalf("upload of checkpoint %d: %d %s; want 200 and its ID", k, code, reply)
			}
			rep := fmt.Sprintf(`{"step": %d, "metrics": {"loss": 1}, "checkpoint": %q}`, step, info.ID)
			if code, reply := post("/report", "application/json", strings.NewReader(rep)); code != http.StatusOK {
				t.Fatalf("report of step %d naming checkpoint %d: %d %s; want 200", step, k, code, reply)
			}
			step++
		}
	}
}

// TestRemoteTokenScope: a trial's token may upload and fetch checkpoints
// only for its own attempts, and a report may name only a checkpoint its
// attempt uploaded.
func TestRemoteTokenScope(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "state")
	be := newAgentBackend(virgaBin)
	srv, err := server.Start(context.Background(), server.Config{DataDir: data, Backend: be, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c := client.New(srv.URL, srv.Token)
	exp := stepExperiment(t, dir, "scope", 2, 2, 400, 50, "")
	b, _ := os.ReadFile(exp)
	e, err := c.Submit(context.Background(), "scope.yaml", b)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = c.Control(context.Background(), e.ID, "stop") }()
	var ts []*virga.Trial
	waitFor(t, "two trials to have a checkpoint", 30*time.Second, func() bool {
		ts, err = c.Trials(context.Background(), e.ID)
		if err != nil || len(ts) != 2 {
			return false
		}
		for _, tr := range ts {
			if tr.Checkpoint == "" || tr.State != virga.TrialRunning {
				return false
			}
		}
		return true
	})
	secret, err := os.ReadFile(filepath.Join(data, "secret"))
	secret = bytes.TrimSpace(secret)
	if err != nil {
		t.Fatal(err)
	}
	attempt := func(tr *virga.Trial) int64 {
		v, err := c.Trial(context.Background(), tr.ID)
		if err != nil || len(v.AttemptList) == 0 {
			t.Fatalf("trial %d: %v", tr.ID, err)
		}
		return v.AttemptList[len(v.AttemptList)-1].ID
	}
	a, other := ts[0], ts[1]
	tokA := control.TrialToken(secret, a.ID)
	call := func(method, path, ctype string, body []byte) int {
		req, _ := http.NewRequest(method, srv.URL+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tokA)
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	attA, attB := strconv.FormatInt(attempt(a), 10), strconv.FormatInt(attempt(other), 10)
	empty := make([]byte, 1024) // an empty tar archive
	for _, c := range []struct {
		what, method, path, ctype string
		body                      []byte
		want                      int
	}{
		{"upload to another trial's attempt", "POST", "/api/v1/attempts/" + attB + "/checkpoints", "application/x-tar", empty, http.StatusForbidden},
		{"fetch another trial's attempt's checkpoint", "GET", "/api/v1/attempts/" + attB + "/checkpoints/" + other.Checkpoint, "", nil, http.StatusForbidden},
		{"fetch another trial's checkpoint through its own attempt", "GET", "/api/v1/attempts/" + attA + "/checkpoints/" + other.Checkpoint, "", nil, http.StatusForbidden},
		{"report naming a checkpoint it did not upload", "POST", "/api/v1/attempts/" + attA + "/report", "application/json", []byte(`{"step": 1, "metrics": {"loss": 1}, "checkpoint": "` + other.Checkpoint + `"}`), http.StatusUnprocessableEntity},
		{"list experiments", "GET", "/api/v1/experiments", "", nil, http.StatusUnauthorized},
		{"upload an empty directory to its own attempt", "POST", "/api/v1/attempts/" + attA + "/checkpoints", "application/x-tar", empty, http.StatusOK},
		{"upload without the archive's media type", "POST", "/api/v1/attempts/" + attA + "/checkpoints", "application/json", empty, http.StatusUnsupportedMediaType},
	} {
		if got := call(c.method, c.path, c.ctype, c.body); got != c.want {
			t.Errorf("%s: status %d; want %d", c.what, got, c.want)
		}
	}

	// Its own latest checkpoint: the trial reports a new one every 50 ms, so
	// the one read a moment ago may already be superseded; read it again.
	fetched := false
	for range 20 {
		v, err := c.Trial(context.Background(), a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if call("GET", "/api/v1/attempts/"+attA+"/checkpoints/"+v.Checkpoint, "", nil) == http.StatusOK {
			fetched = true
			break
		}
	}
	if !fetched {
		t.Error("the attempt could not fetch its own latest checkpoint")
	}

	// A checkpoint uploaded and never reported (a preemption cut the report
	// short) is deleted when its attempt ends.
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "orphan"), []byte("never reported"), 0o644); err != nil {
		t.Fatal(err)
	}
	var tarball bytes.Buffer
	if _, err := checkpoint.WriteArchive(&tarball, src); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", srv.URL+"/api/v1/attempts/"+attA+"/checkpoints", &tarball)
	req.Header.Set("Authorization", "Bearer "+tokA)
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var info struct{ ID string }
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || info.ID == "" {
		t.Fatalf("upload: %d %+v %v", resp.StatusCode, info, err)
	}
	orphan := filepath.Join(data, "checkpoints", info.ID)
	if _, err := os.Stat(orphan); err != nil {
		t.Fatalf("the upload is not stored: %v", err)
	}
	if _, err := c.Control(context.Background(), e.ID, "stop"); err != nil {
		t.Fatal(err)
	}
	waitDone(t, c, e.ID, 30*time.Second)
	waitFor(t, "the unreported upload to be deleted", 10*time.Second, func() bool {
		_, err := os.Stat(orphan)
		return os.IsNotExist(err)
	})
}
