package agent

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/checkpoint"
)

// Options configure Run.
type Options struct {
	Spec *Spec
	// Dir is a private scratch directory on the node for this attempt (its
	// checkpoint directory lives there). Default: a new directory under
	// os.TempDir(), removed at the end.
	Dir string
	// Environ is the node's environment (default os.Environ()): the trial
	// inherits it, and the agent reads the gang's rank from it.
	Environ []string
	// Stdout and Stderr receive the trial's output (default the agent's).
	Stdout, Stderr io.Writer
	Client         *http.Client
	Logger         *slog.Logger
	// Hostnames expands a Slurm node list ("n[1-3]") to host names; default
	// `scontrol show hostnames`.
	Hostnames func(ctx context.Context, nodelist string) ([]string, error)
	// Retry is how long fetching the checkpoint is retried while the server
	// cannot be reached (default 10 minutes, as the SDKs retry reports).
	Retry time.Duration
}

// Run runs the attempt's processes on this node and returns the gang's exit
// status (see Gang.Run). Ending ctx stops the trial: SIGTERM, then SIGKILL
// after the spec's StopGrace. An error means the trial could not be started
// (the status is then non-zero too).
func Run(ctx context.Context, o Options) (int, error) {
	s := o.Spec
	if o.Environ == nil {
		o.Environ = os.Environ()
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if o.Client == nil {
		// No overall timeout: a large checkpoint may take long to move. The
		// server must answer within the response-header timeout; proxies of
		// the environment are not used (the token goes to the server only).
		o.Client = &http.Client{Transport: &http.Transport{
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			ResponseHeaderTimeout: 10 * time.Minute,
			IdleConnTimeout:       90 * time.Second,
		}}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(o.Stderr, nil))
	}
	if o.Retry == 0 {
		o.Retry = 10 * time.Minute
	}
	if o.Hostnames == nil {
		o.Hostnames = scontrolHostnames
	}
	env := envMap(o.Environ)
	nodeRank, master, err := rendezvous(ctx, s, env, o.Hostnames)
	if err != nil {
		return 1, err
	}

	if o.Dir == "" {
		d, err := os.MkdirTemp("", "virga-attempt-"+strconv.FormatInt(s.AttemptID, 10)+"-")
		if err != nil {
			return 1, fmt.Errorf("creating scratch directory: %w", err)
		}
		defer os.RemoveAll(d)
		o.Dir = d
	}
	ckptDir := filepath.Join(o.Dir, "checkpoint")
	if err := os.MkdirAll(ckptDir, 0o755); err != nil {
		return 1, fmt.Errorf("creating checkpoint directory: %w", err)
	}
	rel := &relayer{spec: s, client: o.Client, dir: ckptDir, tmp: o.Dir, log: o.Logger, chief: nodeRank == 0, retry: o.Retry}
	if s.Checkpoint != "" {
		if err := rel.restore(ctx, o.Retry); err != nil {
			return 1, err
		}
		o.Logger.Info("restored checkpoint", "checkpoint", s.Checkpoint)
	}
	if rel.lastFP, err = checkpoint.Fingerprint(ckptDir); err != nil {
		return 1, err
	}
	rel.lastID = s.Checkpoint

	// The trial's reports go to this agent, which uploads the checkpoint
	// directory (when it changed) before it passes the report on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 1, fmt.Errorf("listening for the trial's reports: %w", err)
	}
	srv := &http.Server{Handler: rel, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	reportURL := "http://" + ln.Addr().String() + "/api/v1/attempts/" + strconv.FormatInt(s.AttemptID, 10) + "/report"

	trialEnv := make([]string, 0, len(o.Environ)+len(s.Env)+4)
	for _, kv := range o.Environ {
		if k, _, _ := strings.Cut(kv, "="); s.Env[k] == "" && k != "VIRGA_CHECKPOINT_DIR" && k != "VIRGA_REPORT_URL" && k != EnvSpec {
			trialEnv = append(trialEnv, kv)
		}
	}
	for k, v := range s.Env {
		trialEnv = append(trialEnv, k+"="+v)
	}
	trialEnv = append(trialEnv, "VIRGA_CHECKPOINT_DIR="+ckptDir, "VIRGA_REPORT_URL="+reportURL, "VIRGA_NODE_RANK="+strconv.Itoa(nodeRank))

	stdout := &metricScanner{out: o.Stdout, post: rel.metricLine, tooLong: func(size int) {
		o.Logger.Warn("a VIRGA_METRIC line was not reported: it is longer than a metric line may be (report fewer or shorter metrics)",
			"bytes", size, "limit_bytes", virga.MaxMetricLine)
	}}
	g := &Gang{Argv: s.Argv, Env: trialEnv, Workdir: workdir(s.Workdir), NodeRank: nodeRank, Nodes: s.Nodes,
		ProcessesPerNode: s.ProcessesPerNode, MasterAddr: master, MasterPort: s.MasterPort,
		Stdout: stdout, Stderr: o.Stderr, Grace: s.StopGrace}
	code, err := g.Run(ctx)
	stdout.flush()
	return code, err
}

// workdir is the trial's working directory on this node: the experiment's
// when the node has it, else the current one.
func workdir(d string) string {
	if d != "" {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return d
		}
	}
	return ""
}

func envMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// rendezvous finds this node's rank and the gang's first node: from the
// backend's variables (Kubernetes), else Slurm's, else this machine alone.
func rendezvous(ctx context.Context, s *Spec, env map[string]string, hostnames func(context.Context, string) ([]string, error)) (int, string, error) {
	rank := 0
	rankVar := ""
	for _, k := range []string{EnvNodeRank, "SLURM_NODEID"} {
		if v := env[k]; v != "" {
			r, err := strconv.Atoi(v)
			if err != nil || r < 0 || r >= s.Nodes {
				return 0, "", fmt.Errorf("%s=%q: want a node rank in [0, %d)", k, v, s.Nodes)
			}
			rank, rankVar = r, k
			break
		}
	}
	if a := env[EnvMasterAddr]; a != "" {
		return rank, a, nil
	}
	if nl := env["SLURM_JOB_NODELIST"]; nl != "" && rankVar == "SLURM_NODEID" {
		hosts, err := hostnames(ctx, nl)
		if err != nil || len(hosts) == 0 {
			return 0, "", fmt.Errorf("finding the first node of %s: %v", nl, err)
		}
		if s.Nodes == 1 || hosts[0] == "localhost" {
			return rank, "127.0.0.1", nil
		}
		return rank, nodeAddr(ctx, hosts[0]), nil
	}
	if s.Nodes > 1 {
		return 0, "", fmt.Errorf("a gang of %d nodes needs %s and %s (or Slurm's SLURM_NODEID and SLURM_JOB_NODELIST)", s.Nodes, EnvNodeRank, EnvMasterAddr)
	}
	return rank, "127.0.0.1", nil
}

// nodeAddr is the address of a Slurm node: its name when the name
// resolves, else the NodeAddr Slurm knows it by (nodes named apart from
// their hosts, as several slurmd on one machine are).
func nodeAddr(ctx context.Context, name string) string {
	if _, err := net.DefaultResolver.LookupHost(ctx, name); err == nil {
		return name
	}
	out, err := exec.CommandContext(ctx, "scontrol", "show", "node", "-o", name).Output()
	if err != nil {
		return name
	}
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "NodeAddr="); ok && v != "" {
			return v
		}
	}
	return name
}

func scontrolHostnames(ctx context.Context, nodelist string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "scontrol", "show", "hostnames", nodelist).Output()
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}

// relayer passes the trial's reports to the server, uploading the checkpoint
// directory first when it changed. Only the gang's first node reports;
// the others answer "continue" (the processes of a gang report from rank
// 0, and a collective operation stops the others with it).
type relayer struct {
	spec   *Spec
	client *http.Client
	dir    string
	tmp    string // for archives being uploaded
	log    *slog.Logger
	chief  bool
	retry  time.Duration // how long a VIRGA_METRIC line's report is retried

	mu     sync.Mutex // one report at a time, in order
	lastFP string     // fingerprint of the directory last uploaded
	lastID string     // the checkpoint it was uploaded as
	// lastSum is the content digest (the unscoped ID of
	// checkpoint.WriteArchive) of the directory last uploaded or restored:
	// a directory whose fingerprint changed but whose content did not
	// (its times were too recent to trust) is not uploaded again.
	lastSum string
}

func (r *relayer) url(path string) string {
	return strings.TrimSuffix(r.spec.Server, "/") + "/api/v1/attempts/" + strconv.FormatInt(r.spec.AttemptID, 10) + path
}

func (r *relayer) do(ctx context.Context, method, path, ctype string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, r.url(path), body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+r.spec.Token)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	return r.client.Do(req)
}

// restore fetches the checkpoint to resume from into the directory,
// retrying while the server cannot be reached or answers 5xx.
func (r *relayer) restore(ctx context.Context, retryFor time.Duration) error {
	deadline := time.Now().Add(retryFor)
	wait := 250 * time.Millisecond
	for {
		err := func() error {
			resp, err := r.do(ctx, http.MethodGet, "/checkpoints/"+r.spec.Checkpoint, "", nil)
			if err != nil {
				return retryable{err}
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
				err := fmt.Errorf("fetching checkpoint %s: %s: %s", r.spec.Checkpoint, resp.Status, bytes.TrimSpace(msg))
				if resp.StatusCode >= 500 {
					return retryable{err}
				}
				return err
			}
			info, err := checkpoint.ExtractArchive(resp.Body, r.dir, 1<<62)
			if err != nil {
				return retryable{fmt.Errorf("fetching checkpoint %s: %w", r.spec.Checkpoint, err)}
			}
			r.lastSum = info.ID
			return nil
		}()
		var re retryable
		if err == nil || !errors.As(err, &re) || time.Now().After(deadline) {
			return err
		}
		r.log.Warn("fetching the checkpoint; retrying", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Second)
	}
}

type retryable struct{ error }

func (r retryable) Unwrap() error { return r.error }

// maxReportBody bounds a report the trial posts, as the server's API
// bounds it (api.MaxBody): a longer one is answered 413.
const maxReportBody = 2 << 20

// ServeHTTP takes a report from the trial.
func (r *relayer) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/report") {
		http.Error(w, `{"error": "the agent takes only POST .../report"}`, http.StatusNotFound)
		return
	}
	// Only the trial may report: other users' processes on the node, or a
	// web page, can reach this port too.
	if tok, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer "); !ok ||
		subtle.ConstantTimeCompare([]byte(tok), []byte(r.spec.Token)) != 1 {
		http.Error(w, `{"error": "send the trial's token: Authorization: Bearer $VIRGA_TOKEN"}`, http.StatusUnauthorized)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxReportBody))
	if err != nil {
		code := http.StatusBadRequest
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			code = http.StatusRequestEntityTooLarge
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write(jsonError(fmt.Sprintf("reading the report (at most %d bytes): %v", maxReportBody, err)))
		return
	}
	// Not cancelled when the trial gives up waiting: a large upload goes on,
	// and the trial's retry finds it done.
	code, reply := r.report(context.WithoutCancel(req.Context()), body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(reply)
}

// report uploads the checkpoint directory if it changed and passes the
// report on, naming the checkpoint; it returns the server's answer (or 502
// when the server could not be reached, which the trial retries).
//
// A changed fingerprint makes the agent archive the directory, but the
// archive is sent only when its content differs from the last one sent:
// a fingerprint taken within moments of a write is never trusted (see
// checkpoint.Fingerprint), so the report after a checkpoint is written
// reads it again, and finds it unchanged.
func (r *relayer) report(ctx context.Context, body []byte) (int, []byte) {
	if !r.chief {
		return http.StatusOK, []byte(`{"decision":"continue"}`)
	}
	var rep map[string]json.RawMessage
	if err := json.Unmarshal(body, &rep); err != nil {
		return http.StatusBadRequest, jsonError("malformed report: " + err.Error())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	fp, err := checkpoint.Fingerprint(r.dir)
	if err != nil {
		return localError("reading the checkpoint directory", err)
	}
	for try := 0; ; try++ {
		id, sum := r.lastID, r.lastSum
		if fp != r.lastFP || try > 0 {
			// Once more after a restarted server forgot the upload: send it
			// even if unchanged.
			code, reply, uploaded, uploadedSum := r.upload(ctx, try > 0)
			if code != http.StatusOK {
				return code, reply
			}
			id, sum = uploaded, uploadedSum
		}
		if id != "" {
			rep["checkpoint"], _ = json.Marshal(id)
		}
		fwd, _ := json.Marshal(rep)
		resp, err := r.do(ctx, http.MethodPost, "/report", "application/json", bytes.NewReader(fwd))
		if err != nil {
			return http.StatusBadGateway, jsonError("the server cannot be reached: " + err.Error())
		}
		reply, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		// A restarted server forgets uploads not yet reported: once more.
		if resp.StatusCode == http.StatusUnprocessableEntity && bytes.Contains(reply, []byte("not uploaded")) && try == 0 {
			continue
		}
		if resp.StatusCode == http.StatusOK {
			r.lastFP, r.lastID, r.lastSum = fp, id, sum
		}
		return resp.StatusCode, reply
	}
}

// upload archives the checkpoint directory and sends the archive, unless
// (and force is false) its content is the last one sent, which keeps its
// ID; it returns the checkpoint's ID on the server and the content digest.
func (r *relayer) upload(ctx context.Context, force bool) (int, []byte, string, string) {
	f, err := os.CreateTemp(r.tmp, "upload-*.tar")
	if err != nil {
		code, reply := localError("archiving the checkpoint directory", err)
		return code, reply, "", ""
	}
	defer os.Remove(f.Name())
	defer f.Close()
	content, err := checkpoint.WriteArchive(f, r.dir)
	if err != nil {
		code, reply := localError("archiving the checkpoint directory", err)
		return code, reply, "", ""
	}
	if !force && content.ID == r.lastSum {
		return http.StatusOK, nil, r.lastID, r.lastSum
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		code, reply := localError("archiving the checkpoint directory", err)
		return code, reply, "", ""
	}
	resp, err := r.do(ctx, http.MethodPost, "/checkpoints", "application/x-tar", f)
	if err != nil {
		return http.StatusBadGateway, jsonError("uploading the checkpoint: the server cannot be reached: " + err.Error()), "", ""
	}
	defer resp.Body.Close()
	reply, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, reply, "", ""
	}
	var info struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(reply, &info); err != nil {
		return http.StatusBadGateway, jsonError("uploading the checkpoint: unreadable answer: " + err.Error()), "", ""
	}
	return http.StatusOK, nil, info.ID, content.ID
}

// localError is the answer to the trial for a failure on this node: 422
// (fix the trial) only for what a checkpoint cannot hold; otherwise 503,
// which the trial retries (a full disk, a file replaced while archived).
func localError(what string, err error) (int, []byte) {
	if errors.Is(err, checkpoint.ErrUnsupported) {
		return http.StatusUnprocessableEntity, jsonError(what + ": " + err.Error())
	}
	return http.StatusServiceUnavailable, jsonError(what + ": " + err.Error())
}

// metricLine posts a VIRGA_METRIC line's report on the trial's behalf (one
// that virga.CheckMetricLine refuses is noted in the trial's log instead),
// retrying while the server cannot be reached or answers 5xx (as the local
// backend's shim does), for up to the retry time.
func (r *relayer) metricLine(payload []byte) {
	if err := virga.CheckMetricLine(payload); err != nil {
		r.log.Warn("ignoring VIRGA_METRIC line: "+err.Error(), "line", string(clip(payload, 200)))
		return
	}
	deadline := time.Now().Add(r.retry)
	wait := 250 * time.Millisecond
	for {
		code, reply := r.report(context.Background(), payload)
		if code == http.StatusOK {
			return
		}
		if code < 500 || time.Now().After(deadline) {
			r.log.Warn("a VIRGA_METRIC report was not accepted", "status", code, "reply", string(bytes.TrimSpace(reply)))
			return
		}
		time.Sleep(wait)
		wait = min(2*wait, 10*time.Second)
	}
}

// clip returns b's first n bytes.
func clip(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

func jsonError(msg string) []byte {
	b, _ := json.Marshal(map[string]string{"error": msg})
	return b
}

// metricScanner passes output through and hands each VIRGA_METRIC line's
// payload to post, in order, off the writer's goroutine. A line longer than
// virga.MaxMetricLine is output only: tooLong is told its size, as the
// local backend's shim notes it in the trial's log.
type metricScanner struct {
	out     io.Writer
	post    func([]byte)
	tooLong func(size int)

	mu    sync.Mutex
	line  []byte // the current line so far, up to virga.MaxMetricLine bytes
	over  int    // the size so far of a line past the limit (then line is empty)
	long  bool   // that line is a VIRGA_METRIC line
	queue chan []byte
	done  chan struct{}
}

const metricPrefix = "VIRGA_METRIC "

func (m *metricScanner) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.queue == nil {
		m.queue, m.done = make(chan []byte, 1024), make(chan struct{})
		// The goroutine gets its own copies: flush clears the fields,
		// possibly before the goroutine first runs.
		queue, done := m.queue, m.done
		go func() {
			defer close(done)
			for b := range queue {
				m.post(b)
			}
		}()
	}
	for rest := p; len(rest) > 0; {
		part, after, ended := bytes.Cut(rest, []byte{'\n'})
		rest = after
		if m.over > 0 {
			m.over += len(part)
		} else if m.line = append(m.line, part...); len(m.line) > virga.MaxMetricLine {
			m.over, m.long = len(m.line), bytes.HasPrefix(m.line, []byte(metricPrefix))
			m.line = m.line[:0]
		}
		if !ended {
			break
		}
		switch {
		case m.over > 0:
			if m.long && m.tooLong != nil {
				m.tooLong(m.over)
			}
			m.over, m.long = 0, false
		default:
			if payload, ok := bytes.CutPrefix(bytes.TrimRight(m.line, "\r"), []byte(metricPrefix)); ok {
				m.queue <- bytes.Clone(payload)
			}
		}
		m.line = m.line[:0]
	}
	return m.out.Write(p)
}

// flush waits for the queued reports to be posted, for at most a minute
// once the trial has ended (the server is then away: the reports are lost,
// as the trial's own would be).
func (m *metricScanner) flush() {
	m.mu.Lock()
	q, d := m.queue, m.done
	m.queue = nil
	m.mu.Unlock()
	if q != nil {
		close(q)
		select {
		case <-d:
		case <-time.After(time.Minute):
		}
	}
}
