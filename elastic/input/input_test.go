package input

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virga-ml/virga/elastic"
)

// readAll reads a source to the end, checking that every batch is well
// formed and of one width.
func readAll(t testing.TB, s Source) (x, y []float64, cols int, err error) {
	t.Helper()
	ctx := context.Background()
	labels := -1
	for {
		b, err := s.Next(ctx)
		if errors.Is(err, io.EOF) {
			return x, y, cols, nil
		}
		if err != nil {
			return x, y, cols, err
		}
		checkBatch(t, b, &cols, &labels)
		x = append(x, b.X...)
		y = append(y, b.Y...)
	}
}

func checkBatch(t testing.TB, b *elastic.Batch, cols, labels *int) {
	t.Helper()
	if b.Cols <= 0 || b.Rows() == 0 || len(b.X) != b.Rows()*b.Cols {
		t.Fatalf("malformed batch: %d values, %d columns", len(b.X), b.Cols)
	}
	if *cols == 0 {
		*cols = b.Cols
	} else if b.Cols != *cols {
		t.Fatalf("batch of %d columns after %d", b.Cols, *cols)
	}
	has := 0
	if b.Y != nil {
		has = 1
		if len(b.Y) != b.Rows() {
			t.Fatalf("%d labels for %d rows", len(b.Y), b.Rows())
		}
	}
	if *labels < 0 {
		*labels = has
	} else if has != *labels {
		t.Fatal("labels in some batches only")
	}
}

func randomBatch(rows, cols int, labels bool) *elastic.Batch {
	r := rand.New(rand.NewPCG(1, 2))
	b := &elastic.Batch{X: make([]float64, rows*cols), Cols: cols}
	for i := range b.X {
		switch r.IntN(4) {
		case 0: // libsvm leaves zeros out
		case 1:
			b.X[i] = float64(r.IntN(100) - 50)
		default:
			b.X[i] = r.NormFloat64() * 1e3
		}
	}
	if labels {
		b.Y = make([]float64, rows)
		for i := range b.Y {
			b.Y[i] = float64(r.IntN(3))
		}
	}
	return b
}

func writeFile(t *testing.T, name string, f Format, b *elastic.Batch) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	var buf bytes.Buffer
	if err := Write(&buf, f, b); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	if strings.HasSuffix(name, ".gz") {
		var z bytes.Buffer
		w := gzip.NewWriter(&z)
		w.Write(data)
		w.Close()
		data = z.Bytes()
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRoundTrip(t *testing.T) {
	for _, c := range []struct {
		name   string
		f      Format
		labels bool
		opts   Options
	}{
		{"d.csv", CSV, true, Options{Label: LastColumn}},
		{"d.csv.gz", CSV, true, Options{Label: LastColumn}},
		{"d.csv", CSV, false, Options{}},
		{"d.jsonl", JSONLines, true, Options{}},
		{"d.json.gz", JSONLines, false, Options{}},
		{"d.libsvm", LibSVM, true, Options{Features: 7}},
		{"d.svm.gz", LibSVM, true, Options{Features: 7}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := randomBatch(103, 7, c.labels)
			p := writeFile(t, c.name, c.f, b)
			c.opts.BatchRows = 10
			s, err := Open(p, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			x, y, cols, err := readAll(t, s)
			if err != nil {
				t.Fatal(err)
			}
			if cols != 7 || !equal(x, b.X) || !equal(y, b.Y) || s.Pos() != 103 {
				t.Fatalf("read %d columns, %d values, %d labels, pos %d", cols, len(x), len(y), s.Pos())
			}
		})
	}
}

func TestDigits(t *testing.T) {
	const p = "../../examples/data/digits.csv.gz"
	if _, err := os.Stat(p); err != nil {
		t.Skip(err)
	}
	s, err := Open(p, Options{Label: LastColumn, BatchRows: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	x, y, cols, err := readAll(t, s)
	if err != nil {
		t.Fatal(err)
	}
	if cols != 64 || len(y) != 1797 || len(x) != 1797*64 || s.Pos() != 1797 {
		t.Fatalf("%d columns, %d rows", cols, len(y))
	}
	var count [10]int
	for i, v := range y {
		if v != float64(int(v)) || v < 0 || v > 9 {
			t.Fatalf("row %d: label %v", i, v)
		}
		count[int(v)]++
	}
	for d, n := range count {
		if n < 170 || n > 190 {
			t.Fatalf("%d rows of digit %d", n, d)
		}
	}
	for _, v := range x {
		if v < 0 || v > 16 {
			t.Fatalf("pixel %v", v)
		}
	}
}

// indexed writes rows whose first feature is the row number, with blank
// and comment lines between them.
func indexed(t *testing.T, name string, rows int) string {
	var buf bytes.Buffer
	buf.WriteString("a,b,label\n")
	for i := range rows {
		if i%10 == 3 {
			buf.WriteString("\n# comment\n")
		}
		fmt.Fprintf(&buf, "%d,%d,%d\n", i, i*2, i%2)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestShards reads a file split by rows (Options.Split = SplitRows): shard
// k of n holds the rows i with i % n == k.
func TestShards(t *testing.T) {
	const rows = 257
	p := indexed(t, "i.csv", rows)
	opts := Options{Label: 3, Header: true, BatchRows: 16, Split: SplitRows}
	for _, n := range []int{1, 2, 3, 5} {
		seen := make([]int, rows)
		for k := range n {
			s, err := OpenShard(p, opts, k, n)
			if err != nil {
				t.Fatal(err)
			}
			x, y, cols, err := readAll(t, s)
			s.Close()
			if err != nil {
				t.Fatal(err)
			}
			if cols != 2 || len(y) != len(x)/2 || s.Pos() != int64(len(y)) {
				t.Fatalf("shard %d of %d: %d columns, pos %d", k, n, cols, s.Pos())
			}
			for i := 0; i < len(x); i += 2 {
				r := int(x[i])
				if r%n != k || x[i+1] != float64(2*r) || y[i/2] != float64(r%2) {
					t.Fatalf("shard %d of %d: row %v", k, n, x[i:i+2])
				}
				seen[r]++
			}
		}
		for r, c := range seen {
			if c != 1 {
				t.Fatalf("%d shards: row %d read %d times", n, r, c)
			}
		}
	}
}

func TestResume(t *testing.T) {
	for _, split := range []Split{SplitRows, SplitRanges} {
		t.Run(split.String(), func(t *testing.T) { testResume(t, split) })
	}
}

func testResume(t *testing.T, split Split) {
	const rows = 300
	p := indexed(t, "i.csv", rows)
	opts := Options{Label: LastColumn, Header: true, BatchRows: 7, Split: split}
	ctx := context.Background()
	for _, stop := range []int{0, 1, 5, 13, 14} { // batches read before the pause
		full, err := OpenShard(p, opts, 1, 3)
		if err != nil {
			t.Fatal(err)
		}
		all, _, _, err := readAll(t, full)
		full.Close()
		if err != nil {
			t.Fatal(err)
		}
		s, err := OpenShard(p, opts, 1, 3)
		if err != nil {
			t.Fatal(err)
		}
		var got []float64
		for range stop {
			b, err := s.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, b.X...)
		}
		pos := s.Pos()
		s.Close()
		r, err := OpenShardAt(p, opts, 1, 3, pos)
		if err != nil {
			t.Fatal(err)
		}
		rest, _, _, err := readAll(t, r)
		if err != nil {
			t.Fatal(err)
		}
		if r.Pos() != full.Pos() || !equal(append(got, rest...), all) || r.Split() != split {
			t.Fatalf("stop after %d batches (pos %d): %d + %d values, want %d", stop, pos, len(got), len(rest), len(all))
		}
		r.Close()
	}
	// A position beyond the end is an error.
	full, err := OpenShard(p, opts, 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, full)
	full.Close()
	beyond := full.Pos() + 1
	r, err := OpenShardAt(p, opts, 0, 3, beyond)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Next(ctx); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("before position %d", beyond)) {
		t.Fatalf("got %v", err)
	}
}

func TestTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	b := randomBatch(500, 4, true)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			Write(c, LibSVM, b)
			c.Close()
		}
	}()
	uri := "tcp://" + ln.Addr().String()
	if _, err := OpenShardAt(uri, Options{Format: LibSVM}, 0, 1, 5); !errors.Is(err, ErrNotResumable) {
		t.Fatalf("resume a stream: %v", err)
	}
	if _, err := Open(uri, Options{}); err == nil {
		t.Fatal("no format: no error")
	}
	s, err := Open(uri, Options{Format: LibSVM, Features: 4, BatchRows: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	x, y, _, err := readAll(t, s)
	if err != nil {
		t.Fatal(err)
	}
	if !equal(x, b.X) || !equal(y, b.Y) {
		t.Fatalf("%d rows", len(y))
	}
}

func TestTCPCancel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write([]byte("1,2\n")) // then nothing more until the end of the test
		<-done
	}()
	s, err := Open("tcp://"+ln.Addr().String()+"/x.csv", Options{BatchRows: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := s.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("cancel took %v", d)
	}
}

func TestHTTP(t *testing.T) {
	b := randomBatch(50, 3, true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/d.jsonl" {
			http.NotFound(w, r)
			return
		}
		Write(w, JSONLines, b)
	}))
	defer srv.Close()
	s, err := Open(srv.URL+"/d.jsonl", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	x, y, _, err := readAll(t, s)
	if err != nil || !equal(x, b.X) || !equal(y, b.Y) {
		t.Fatalf("%d rows, %v", len(y), err)
	}
	if _, err := Open(srv.URL+"/missing.jsonl", Options{}); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("got %v", err)
	}
}

func TestReaderGzip(t *testing.T) {
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	w.Write([]byte(`{"features": [1, 2], "label": 1}` + "\n" + `{"features": [3, 4], "label": 0, "id": "b"}`))
	w.Close()
	s, err := NewReader(&z, "stdin", Options{Format: JSONLines})
	if err != nil {
		t.Fatal(err)
	}
	x, y, cols, err := readAll(t, s)
	if err != nil || cols != 2 || !equal(x, []float64{1, 2, 3, 4}) || !equal(y, []float64{1, 0}) {
		t.Fatalf("%v %v %v", x, y, err)
	}
	if _, err := OpenShardAt("-", Options{Format: CSV}, 0, 1, 3); !errors.Is(err, ErrNotResumable) {
		t.Fatalf("resume stdin: %v", err)
	}
}

func TestLibSVMInferred(t *testing.T) {
	in := "1 3:1 1:2\n0 2:5 # comment\n-1 qid:3 1:1\n1 4:1\n"
	s, err := NewReader(strings.NewReader(in), "d.svm", Options{BatchRows: 3})
	if err != nil {
		t.Fatal(err)
	}
	x, y, cols, err := readAll(t, s)
	if cols != 3 || !equal(x, []float64{2, 0, 1, 0, 5, 0, 1, 0, 0}) || !equal(y, []float64{1, 0, -1}) {
		t.Fatalf("%d columns: %v %v", cols, x, y)
	}
	if err == nil || err.Error() != "d.svm:4: index 4 beyond the 3 features inferred from the first batch (set Options.Features)" {
		t.Fatalf("got %v", err)
	}
}

func TestErrors(t *testing.T) {
	for _, c := range []struct {
		name, in string
		opts     Options
		want     string
	}{
		{"data.csv", "1,2,3\n4,5,abc\n", Options{}, `data.csv:2: column 3: "abc" is not a number`},
		{"data.csv", "x,y\n1,2\n", Options{}, `data.csv:1: column 1: "x" is not a number (a header line? set Options.Header)`},
		{"data.csv", "1,2,3\n\n4,5\n", Options{}, `data.csv:3: 2 columns, expected 3 (as on the first row)`},
		{"data.csv", "1,,3\n", Options{}, `data.csv:1: column 2: empty, not a number`},
		{"data.csv", "1,NaN\n", Options{}, `data.csv:1: column 2: "NaN" is not a finite number`},
		{"data.csv", "1,2\n", Options{Label: 3}, `data.csv:1: label column 3, but the first row has 2 columns`},
		{"data.csv", "1\n", Options{Label: LastColumn}, `data.csv:1: only a label column, no features`},
		{"d.jsonl", `{"x": [1, 2]}` + "\n" + `{"x": [1]}`, Options{}, `d.jsonl:2: 1 features, expected 2 (as on the first row)`},
		{"d.jsonl", `{"x": [1], "y": 1}` + "\n" + `{"x": [1]}`, Options{}, `d.jsonl:2: no label ("y" or "label"), but the first row has one`},
		{"d.jsonl", `{"y": 1}`, Options{}, `d.jsonl:1: no features: want "x" (or "features"), a non-empty array of numbers`},
		{"d.jsonl", `[1, 2]`, Options{}, `d.jsonl:1: want an object {"x": [numbers], "y": number}: json: cannot unmarshal array`},
		{"d.jsonl", `{"x": [1], "features": [2]}`, Options{}, `d.jsonl:1: both "x" and "features"`},
		{"d.jsonl", `{"x": [1, null]}`, Options{}, `d.jsonl:1: feature 2: null, not a number`},
		{"d.jsonl", `{"x": [1], "y": "a"}`, Options{}, `d.jsonl:1: field "y" is a JSON string; want an object {"x": [numbers], "y": number}`},
		{"d.jsonl", `{"x": [1, true]}`, Options{}, `d.jsonl:1: field "x" is a JSON bool;`},
		{"d.jsonl", `{"x": [1}`, Options{}, `d.jsonl:1: want an object {"x": [numbers], "y": number}: `},
		{"d.svm", "1 1:1\n1 0:2\n", Options{}, `d.svm:2: "0:2": the index is not an integer from 1 to 1048576`},
		{"d.svm", "1 2:1 2:3\n", Options{}, `d.svm:1: index 2 repeated`},
		{"d.svm", "1 2:1\n1 5:1\n", Options{Features: 4}, `d.svm:2: index 5 beyond the 4 features (Options.Features)`},
		{"d.svm", "a 1:1\n", Options{}, `d.svm:1: label: "a" is not a number`},
		{"d.svm", "1 1=1\n", Options{}, `d.svm:1: "1=1": want index:value`},
		{"d.svm", "1 1:x\n", Options{}, `d.svm:1: index 1: "x" is not a number`},
		{"d.txt", "1\n", Options{}, `d.txt: unknown format`},
	} {
		s, err := NewReader(strings.NewReader(c.in), c.name, c.opts)
		if err == nil {
			_, _, _, err = readAll(t, s)
		}
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s %q: got %v, want %s", c.name, c.in, err, c.want)
		}
	}
	if _, err := Open(filepath.Join(t.TempDir(), "none.csv"), Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := OpenShard("x.csv", Options{}, 2, 2); err == nil {
		t.Error("shard 2 of 2: no error")
	}
	// A corrupt gzip stream.
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	w.Write(bytes.Repeat([]byte("1,2\n"), 1000))
	w.Close()
	data := z.Bytes()
	data[len(data)/2] ^= 0xff
	s, err := NewReader(bytes.NewReader(data), "c.csv.gz", Options{})
	if err == nil {
		_, _, _, err = readAll(t, s)
	}
	if err == nil || !strings.Contains(err.Error(), "c.csv.gz:") {
		t.Errorf("corrupt gzip: %v", err)
	}
}

func TestCommaSpace(t *testing.T) {
	s, err := NewReader(strings.NewReader("1 \t2  3\n\"4\" 5 6\n"), "d", Options{Format: CSV, Comma: ' ', Label: 1})
	if err != nil {
		t.Fatal(err)
	}
	x, y, cols, err := readAll(t, s)
	if err != nil || cols != 2 || !equal(x, []float64{2, 3, 5, 6}) || !equal(y, []float64{1, 4}) {
		t.Fatalf("%v %v %v", x, y, err)
	}
}

func TestLibSVMTooWide(t *testing.T) {
	in := strings.Repeat("1 1048576:1\n", 40)
	s, err := NewReader(strings.NewReader(in), "w.svm", Options{BatchRows: 40})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := readAll(t, s); err == nil || !strings.Contains(err.Error(), "lower Options.BatchRows") {
		t.Fatalf("got %v", err)
	}
}

// BenchmarkCSV parses dense 64-feature rows with a label (the digits
// shape); it reports rows per second.
func BenchmarkCSV(b *testing.B) {
	var buf bytes.Buffer
	Write(&buf, CSV, randomBatch(10000, 64, true))
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	rows := 0
	for range b.N {
		s, _ := NewReader(bytes.NewReader(data), "b.csv", Options{Label: LastColumn})
		_, y, _, err := readAll(b, s)
		if err != nil {
			b.Fatal(err)
		}
		rows += len(y)
	}
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
}

func TestReadAllDigits(t *testing.T) {
	x, y, cols, err := ReadAll("../../examples/data/digits.csv.gz", Options{Label: LastColumn})
	if err != nil {
		t.Fatal(err)
	}
	if cols != 64 || len(y) != 1797 || len(x) != 1797*64 {
		t.Fatalf("%d labels, %d values of width %d; want 1797 rows of 64", len(y), len(x), cols)
	}
}

// TestStdinIsOneShard: standard input cannot be split among readers (each
// would see some lines of the one stream, and lose the others').
func TestStdinIsOneShard(t *testing.T) {
	_, err := OpenShard("-", Options{Format: CSV}, 1, 2)
	if err == nil || !strings.Contains(err.Error(), "standard input is read once") {
		t.Fatalf("standard input as shard 1 of 2: %v; want an error", err)
	}
}

// TestWidth: a libsvm file's width is its largest index anywhere (not the
// first batch's), plain or gzip; a CSV file's is its first row's; a
// stream's cannot be known in advance.
func TestWidth(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for i := range 3000 {
		k := 5
		if i > 2500 {
			k = 11
		}
		fmt.Fprintf(&b, "%d 1:0.5 %d:1 # row %d\n", i%2, k, i)
	}
	plain := filepath.Join(dir, "a.libsvm")
	if err := os.WriteFile(plain, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	var z bytes.Buffer
	gz := gzip.NewWriter(&z)
	_, _ = gz.Write([]byte(b.String()))
	_ = gz.Close()
	zipped := filepath.Join(dir, "a.svm.gz")
	if err := os.WriteFile(zipped, z.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	csv := filepath.Join(dir, "a.csv")
	if err := os.WriteFile(csv, []byte("1,2,3\n4,5,6\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for path, want := range map[string]int{plain: 11, zipped: 11, csv: 3} {
		if got, err := Width(ctx, path, Options{}); err != nil || got != want {
			t.Errorf("Width(%s) = %d, %v; want %d", filepath.Base(path), got, err, want)
		}
	}
	// Every shard's reader, given the width, produces rows of that width.
	for k := range 2 {
		src, err := OpenShard(plain, Options{Features: 11}, k, 2)
		if err != nil {
			t.Fatal(err)
		}
		bt, err := src.Next(ctx)
		src.Close()
		if err != nil || bt.Cols != 11 {
			t.Errorf("shard %d of a.libsvm with Features 11: %v columns, %v", k, bt.Cols, err)
		}
	}
	bad := filepath.Join(dir, "bad.libsvm")
	_ = os.WriteFile(bad, []byte("1 1:1\n0 x:2\n"), 0o644)
	if _, err := Width(ctx, bad, Options{}); err == nil || !strings.Contains(err.Error(), "bad.libsvm:2") {
		t.Errorf("Width of a file with a bad index on line 2: %v; want an error naming bad.libsvm:2", err)
	}
	if _, err := Width(ctx, "-", Options{Format: CSV}); err == nil {
		t.Error("Width of standard input: no error")
	}
}
