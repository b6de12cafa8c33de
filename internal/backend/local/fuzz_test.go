package local

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/virga-ml/virga"
)

// FuzzMetricLine feeds arbitrary trial output through the shim's line copier
// and VIRGA_METRIC parser. It must never panic, every byte of the output
// must reach output.log in order (the shim's own notes aside), and each
// VIRGA_METRIC line too long to report must be followed by a note saying so.
func FuzzMetricLine(f *testing.F) {
	for _, s := range []string{
		"hello\nVIRGA_METRIC {\"step\":0,\"metrics\":{\"loss\":1}}\n",
		"VIRGA_METRIC {\"step\":1}\n",
		"VIRGA_METRIC not json\nafter\n",
		"VIRGA_METRIC {\"step\":-1,\"metrics\":{\"\":1e999}}",
		"VIRGA_METRIC\n",
		"VIRGA_METRIC  {\"metrics\":{},\"step\":null}\r\n",
		"no newline at the end",
		"\x00\xff\n\n",
		strings.Repeat("x", 70<<10) + "\nVIRGA_METRIC {\"step\":2,\"metrics\":{}}\n",
		strings.Repeat("y", 64<<10-1) + "\nVIRGA_METRIC {\"step\":3,\"metrics\":{}}",
		"VIRGA_METRIC {\"step\":4,\"metrics\":{}}" + strings.Repeat(" ", 64<<10) + "\nafter\n",
		"VIRGA_METRIC " + strings.Repeat("z", 200<<10),
	} {
		f.Add([]byte(s))
	}
	// TestMain sets shimEnv for the shims it runs; fuzz workers inherit the
	// environment and must stay test binaries.
	f.Setenv(shimEnv, "")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, out []byte) {
		fh, err := os.CreateTemp(dir, "output-*.log")
		if err != nil {
			t.Fatal(err)
		}
		defer os.Remove(fh.Name())
		defer fh.Close()
		copyOutput(bytes.NewReader(out), &shimLog{f: fh}, nil)
		got, err := os.ReadFile(filepath.Join(dir, filepath.Base(fh.Name())))
		if err != nil {
			t.Fatal(err)
		}
		want := out
		if len(want) > 0 && want[len(want)-1] != '\n' {
			want = append(bytes.Clone(want), '\n')
		}
		if a, b := withoutShimNotes(got), withoutShimNotes(want); a != b {
			t.Fatalf("output.log differs from the output:\n got %q\nwant %q", clip(a), clip(b))
		}
		var long []string
		for _, l := range strings.Split(string(want[:max(len(want)-1, 0)]), "\n") {
			if strings.HasPrefix(l, metricPrefix) && len(l) > virga.MaxMetricLine {
				long = append(long, fmt.Sprintf("a VIRGA_METRIC line of %d bytes was not reported", len(l)))
			}
		}
		var notes []string
		for _, l := range strings.Split(string(got), "\n") {
			if n, ok := strings.CutPrefix(l, "virga shim: a VIRGA_METRIC line of "); ok {
				notes = append(notes, "a VIRGA_METRIC line of "+n[:strings.Index(n+":", ":")])
			}
		}
		if !slices.Equal(long, notes) {
			t.Fatalf("notes of lines too long to report:\n got %q\nwant %q", notes, long)
		}
	})
}

// withoutShimNotes drops the lines the shim writes itself.
func withoutShimNotes(b []byte) string {
	var keep []string
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if !strings.HasPrefix(l, "virga shim: ") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "")
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// FuzzPIDLine feeds arbitrary lines to the reader of the shim's pid pipe:
// it never panics, accepts only a positive pid (and an optional positive
// start time), and reads back what the shim writes.
func FuzzPIDLine(f *testing.F) {
	for _, s := range []string{"123 1764190000000000000\n", "123\n", "", "\n", "-1 5\n", "0\n", "12 x\n", "1 2 3\n", "99999999999999999999\n"} {
		f.Add(s)
	}
	f.Setenv(shimEnv, "") // the workers are this binary: not shims (see FuzzMetricLine)
	f.Fuzz(func(t *testing.T, line string) {
		pid, at, ok := parsePIDLine(line)
		if !ok {
			return
		}
		if pid <= 0 || (!at.IsZero() && at.UnixNano() <= 0) {
			t.Fatalf("parsePIDLine(%q) = %d, %v: want a positive pid and start", line, pid, at)
		}
		back := fmt.Sprintf("%d %d\n", pid, at.UnixNano())
		if at.IsZero() {
			back = fmt.Sprintf("%d\n", pid)
		}
		if p2, at2, ok2 := parsePIDLine(back); !ok2 || p2 != pid || !at2.Equal(at) {
			t.Fatalf("the shim's line %q for %q reads back as %d %v %v", back, line, p2, at2, ok2)
		}
	})
}
