package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/virga-ml/virga"
)

// syncBuffer is a bytes.Buffer safe for the trial's and the agent's writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// metricLines is trial output whose VIRGA_METRIC lines test the limits a
// report has (the local backend's TestMetricLineLimits sends the same): the
// steps of the lines that are reported, and the rest of the output.
func metricLines() (out string, reported []int64) {
	const prefix = "VIRGA_METRIC "
	fits := `{"step":1,"metrics":{"loss":2}`
	fits += strings.Repeat(" ", virga.MaxMetricLine-len(prefix)-len(fits)-1) + "}"
	over := `{"step":2,"metrics":{"loss":3}`
	over += strings.Repeat(" ", virga.MaxMetricLine-len(prefix)-len(over)) + "}"
	var many []string
	for i := range virga.MaxMetricsPerReport + 1 {
		many = append(many, fmt.Sprintf(`"m%d":1`, i))
	}
	lines := []string{
		"hello",
		prefix + fits,
		prefix + over,
		prefix + `{"step":3,"metrics":{` + strings.Join(many, ",") + `}}`,
		prefix + `{"step":4,"metrics":{"` + strings.Repeat("n", virga.MaxMetricName+1) + `":1}}`,
		strings.Repeat("x", 3*virga.MaxMetricLine) + " " + prefix + `{"step":5,"metrics":{"loss":1}}`,
		prefix + `{"step":6,"metrics":{"loss":1}}`,
	}
	return strings.Join(lines, "\n") + "\n", []int64{1, 6}
}

// TestAgentMetricLineLimits runs a trial through the agent: a VIRGA_METRIC
// line of virga.MaxMetricLine bytes is reported, a longer one is not and the
// trial's log (the agent's standard error) says so with its size, and lines
// with too many metrics or too long a name are noted, not posted, as the
// local backend's shim does.
func TestAgentMetricLineLimits(t *testing.T) {
	out, want := metricLines()
	var mu sync.Mutex
	var got []int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/api/v1/attempts/1/report" {
			http.Error(w, `{"error":"unexpected"}`, http.StatusNotFound)
			return
		}
		var rep struct{ Step int64 }
		if err := json.Unmarshal(body, &rep); err != nil {
			http.Error(w, `{"error":"bad"}`, http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, rep.Step)
		mu.Unlock()
		_, _ = w.Write([]byte(`{"decision":"continue"}`))
	}))
	t.Cleanup(srv.Close)
	file := filepath.Join(t.TempDir(), "out")
	if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, err := Run(ctx, Options{Spec: &Spec{AttemptID: 1, TrialID: 1, Argv: []string{"cat", file}, Server: srv.URL,
		Token: "vt1.x", Nodes: 1, ProcessesPerNode: 1, MasterPort: 29500, StopGrace: time.Second},
		Environ: []string{"PATH=" + os.Getenv("PATH")}, Dir: t.TempDir(), Stdout: &stdout, Stderr: &stderr, Retry: time.Second})
	if err != nil || code != 0 {
		t.Fatalf("Run = %d, %v\n%s", code, err, stderr.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, want) {
		t.Errorf("steps reported %v, want %v", got, want)
	}
	if stdout.String() != out {
		t.Errorf("the trial's output was not passed on whole (%d bytes of %d)", len(stdout.String()), len(out))
	}
	log := stderr.String()
	for _, w := range []string{
		fmt.Sprintf("bytes=%d limit_bytes=%d", virga.MaxMetricLine+1, virga.MaxMetricLine),
		fmt.Sprintf("metrics: %d values; a report may carry at most %d", virga.MaxMetricsPerReport+1, virga.MaxMetricsPerReport),
		fmt.Sprintf("is %d bytes long; at most %d are allowed", virga.MaxMetricName+1, virga.MaxMetricName),
	} {
		if !strings.Contains(log, w) {
			t.Errorf("the agent's log lacks %q:\n%s", w, log)
		}
	}
	if n := strings.Count(log, "was not reported"); n != 1 {
		t.Errorf("the log notes %d lines as too long to report, want 1 (a long line that is not a metric line is output only):\n%s", n, log)
	}
}

// TestMetricScannerAnyWrites feeds the same output in writes of every size
// from one byte: what is reported and noted does not depend on how the
// trial's writes cut its lines.
func TestMetricScannerAnyWrites(t *testing.T) {
	out, want := metricLines()
	for _, size := range []int{1, 7, 4096, virga.MaxMetricLine, len(out)} {
		var posted []int64
		var long []int
		var buf bytes.Buffer
		m := &metricScanner{out: &buf, post: func(b []byte) {
			var rep struct{ Step int64 }
			if virga.CheckMetricLine(b) == nil && json.Unmarshal(b, &rep) == nil {
				posted = append(posted, rep.Step)
			}
		}, tooLong: func(n int) { long = append(long, n) }}
		for p := []byte(out); len(p) > 0; {
			n := min(size, len(p))
			if _, err := m.Write(p[:n]); err != nil {
				t.Fatal(err)
			}
			p = p[n:]
		}
		m.flush()
		if !slices.Equal(posted, want) || !slices.Equal(long, []int{virga.MaxMetricLine + 1}) || buf.String() != out {
			t.Errorf("writes of %d bytes: reported %v, want %v; too long %v, want [%d]; output whole %v",
				size, posted, want, long, virga.MaxMetricLine+1, buf.String() == out)
		}
	}
}

// FuzzMetricScanner feeds arbitrary output, in writes of a size the input's
// first byte picks, through the agent's scanner: the output passes whole,
// the payloads posted are those of the VIRGA_METRIC lines of at most
// virga.MaxMetricLine bytes that end in a newline, and each longer
// VIRGA_METRIC line is told to tooLong with its size.
func FuzzMetricScanner(f *testing.F) {
	for _, s := range []string{"\xffVIRGA_METRIC {}\r\nx\n", "\x02hello\nVIRGA_METRIC {\"step\":1}\nVIRGA_METRIC", "\xffVIRGA_METRIC " + strings.Repeat("a", virga.MaxMetricLine) + "\nVIRGA_METRIC 1\n", "\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		size, data := int(in[0])+1, in[1:]
		var posted []string
		var long []int
		var buf bytes.Buffer
		m := &metricScanner{out: &buf, post: func(b []byte) { posted = append(posted, string(b)) }, tooLong: func(n int) { long = append(long, n) }}
		for p := data; len(p) > 0; {
			n := min(size, len(p))
			if _, err := m.Write(p[:n]); err != nil {
				t.Fatal(err)
			}
			p = p[n:]
		}
		m.flush()
		var wantPosted []string
		var wantLong []int
		lines := strings.Split(string(data), "\n")
		for _, l := range lines[:len(lines)-1] { // the last has no newline
			switch {
			case !strings.HasPrefix(l, metricPrefix):
			case len(l) > virga.MaxMetricLine:
				wantLong = append(wantLong, len(l))
			default:
				wantPosted = append(wantPosted, strings.TrimPrefix(strings.TrimRight(l, "\r"), metricPrefix))
			}
		}
		if !bytes.Equal(buf.Bytes(), data) {
			t.Fatalf("the output was not passed on whole")
		}
		if !slices.Equal(posted, wantPosted) || !slices.Equal(long, wantLong) {
			t.Fatalf("posted %q, want %q; too long %v, want %v", posted, wantPosted, long, wantLong)
		}
	})
}
