package input

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// lineFile is a CSV file whose data row i is "i,<padding>v" (so its first
// column is i), with blank and comment lines of random lengths between the
// rows, CRLF endings on some lines, an optional header and an optional
// final newline.
type lineFile struct {
	data   []byte
	starts []int64 // offset of data row i's line
	header bool
}

func randomLineFile(rng *rand.Rand, rows int) lineFile {
	var f lineFile
	var b bytes.Buffer
	eol := func() {
		if rng.IntN(4) == 0 {
			b.WriteString("\r\n")
		} else {
			b.WriteByte('\n')
		}
	}
	if rng.IntN(2) == 0 {
		f.header = true
		b.WriteString("id,value")
		eol()
	}
	for i := range rows {
		for rng.IntN(4) == 0 {
			switch rng.IntN(3) {
			case 0:
				b.WriteString(strings.Repeat(" ", rng.IntN(3)))
			case 1:
				b.WriteString("\r")
			default:
				b.WriteString(" # comment" + strings.Repeat("x", rng.IntN(40)))
			}
			eol()
		}
		f.starts = append(f.starts, int64(b.Len()))
		fmt.Fprintf(&b, "%d,%s%d", i, strings.Repeat(" ", rng.IntN(60)), rng.IntN(1000))
		if i < rows-1 || rng.IntN(2) == 0 {
			eol()
		}
	}
	f.data = b.Bytes()
	return f
}

// shardRows opens shard k of n of the file at p and returns the row
// numbers (first column) it reads, and the source.
func shardRows(t testing.TB, p string, opts Options, k, n int, pos int64) ([]int, Source) {
	t.Helper()
	s, err := OpenShardAt(p, opts, k, n, pos)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	x, _, cols, err := readAll(t, s)
	if err != nil {
		t.Fatalf("shard %d of %d at %d: %v", k, n, pos, err)
	}
	var ids []int
	for i := 0; i < len(x); i += max(cols, 1) {
		ids = append(ids, int(x[i]))
	}
	if s.Pos() != pos+int64(len(ids)) {
		t.Fatalf("shard %d of %d at %d: pos %d after %d rows", k, n, pos, s.Pos(), len(ids))
	}
	return ids, s
}

// TestRanges splits random files (random line lengths, CRLF, blank and
// comment lines, a header or none, a final newline or none, fewer rows
// than shards) into 1 to 8 shards by byte ranges: shard k holds exactly
// the rows whose line starts in its k-th n-th of the bytes, in order, so
// the shards in turn are the file's rows, each once.
func TestRanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for file := range 120 {
		rows := rng.IntN(40)
		if file%10 == 0 {
			rows = rng.IntN(4) // fewer rows than shards
		}
		f := randomLineFile(rng, rows)
		p := filepath.Join(t.TempDir(), "r.csv")
		if err := os.WriteFile(p, f.data, 0o644); err != nil {
			t.Fatal(err)
		}
		opts := Options{Header: f.header, BatchRows: 1 + rng.IntN(5)}
		size := int64(len(f.data))
		for n := 1; n <= 8; n++ {
			var all []int
			for k := range n {
				ids, s := shardRows(t, p, opts, k, n, 0)
				if s.Split() != SplitRanges {
					t.Fatalf("file %d, shard %d of %d: split %v", file, k, n, s.Split())
				}
				start, end := k*int(size)/n, (k+1)*int(size)/n
				var want []int
				for i, o := range f.starts {
					if int(o) >= start && int(o) < end {
						want = append(want, i)
					}
				}
				if !slices.Equal(ids, want) {
					t.Fatalf("file %d (%q), shard %d of %d (bytes %d to %d): rows %v, want %v", file, f.data, k, n, start, end, ids, want)
				}
				all = append(all, ids...)
			}
			for i, id := range all {
				if id != i {
					t.Fatalf("file %d, %d shards: rows %v, want 0 to %d in order", file, n, all, rows-1)
				}
			}
			if len(all) != rows {
				t.Fatalf("file %d, %d shards: %d rows, want %d", file, n, len(all), rows)
			}
		}
	}
}

// TestRangeBoundaries places shard boundaries on chosen bytes of small
// files: on a line's first byte, on its '\n', inside a CRLF, inside the
// last line of a file without a final newline.
func TestRangeBoundaries(t *testing.T) {
	for _, c := range []struct {
		name, data string
		n          int
		on         string  // what shard 1 starts on ("" for no check)
		want       [][]int // rows of each shard
	}{
		{"on a line start", "0,0\n1,0\n", 2, "1", [][]int{{0}, {1}}},
		{"on a newline", "0,00\n1,0\n", 2, "\n1", [][]int{{0}, {1}}},
		{"on the LF of a CRLF", "0,00\r\n1,0\r\n", 2, "\n1", [][]int{{0}, {1}}},
		{"on the CR of a CRLF", "0,    0\r\n1,0\r\n", 2, "\r\n1", [][]int{{0}, {1}}},
		{"on a blank line", "0,0\n\n\n1,0\n", 2, "\n1", [][]int{{0}, {1}}},
		{"inside the last line, no final newline", "0,0\n1,0000000000", 3, ",000", [][]int{{0, 1}, {}, {}}},
		{"8 shards of 7 bytes", "0,0\n1,0", 8, "", [][]int{{}, {0}, {}, {}, {}, {1}, {}, {}}},
		{"one byte, 8 shards", "7", 8, "", [][]int{{}, {}, {}, {}, {}, {}, {}, {7}}},
		{"empty file", "", 3, "", [][]int{{}, {}, {}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			start, _ := byteRange(int64(len(c.data)), 1, c.n)
			if !strings.HasPrefix(c.data[start:], c.on) {
				t.Fatalf("test premise: shard 1 starts at byte %d, on %q, not %q", start, c.data[start:], c.on)
			}
			p := filepath.Join(t.TempDir(), "b.csv")
			if err := os.WriteFile(p, []byte(c.data), 0o644); err != nil {
				t.Fatal(err)
			}
			for k := range c.n {
				ids, _ := shardRows(t, p, Options{BatchRows: 2}, k, c.n, 0)
				if !slices.Equal(ids, c.want[k]) {
					t.Errorf("shard %d of %d: rows %v, want %v", k, c.n, ids, c.want[k])
				}
			}
		})
	}
}

// TestRangeHeader: only the input's first line is a header, in whichever
// shard it falls (with 8 shards of a 1-line file, the last one).
func TestRangeHeader(t *testing.T) {
	p := filepath.Join(t.TempDir(), "h.csv")
	os.WriteFile(p, []byte("a,b\n0,1\n1,1\n2,1\n3,1\n"), 0o644)
	for n := 1; n <= 8; n++ {
		var all []int
		for k := range n {
			ids, _ := shardRows(t, p, Options{Header: true}, k, n, 0)
			all = append(all, ids...)
		}
		if !slices.Equal(all, []int{0, 1, 2, 3}) {
			t.Fatalf("%d shards: %v", n, all)
		}
	}
	// Without Header, the header line is an error in the shard that has it
	// (with the hint), and only there.
	for k := range 2 {
		s, _ := OpenShard(p, Options{}, k, 2)
		_, _, _, err := readAll(t, s)
		if k == 0 && (err == nil || !strings.Contains(err.Error(), "h.csv:1:") || !strings.Contains(err.Error(), "set Options.Header")) {
			t.Errorf("shard 0: got %v", err)
		}
		if k == 1 && err != nil {
			t.Errorf("shard 1: %v", err)
		}
		s.Close()
	}
}

// TestRangeResume resumes every shard of random files at every position:
// the reader gives the shard's remaining rows, and a position past the
// shard's end is an error.
func TestRangeResume(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for file := range 8 {
		f := randomLineFile(rng, 5+rng.IntN(60))
		p := filepath.Join(t.TempDir(), "r.csv")
		os.WriteFile(p, f.data, 0o644)
		opts := Options{Header: f.header, BatchRows: 3}
		for _, n := range []int{1, 3, 8} {
			for k := range n {
				ids, _ := shardRows(t, p, opts, k, n, 0)
				for pos := range len(ids) + 1 {
					rest, _ := shardRows(t, p, opts, k, n, int64(pos))
					if !slices.Equal(rest, ids[pos:]) {
						t.Fatalf("file %d, shard %d of %d at %d: %v, want %v", file, k, n, pos, rest, ids[pos:])
					}
				}
				s, err := OpenShardAt(p, opts, k, n, int64(len(ids)+1))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.Next(context.Background()); err == nil || errors.Is(err, io.EOF) {
					t.Fatalf("file %d, shard %d of %d: resumed past its end: %v", file, k, n, err)
				}
				s.Close()
			}
		}
	}
}

// TestRangeReadsItsShare: a shard split by ranges reads about size/n bytes
// of the file (its range, the rest of its last line and a read-ahead
// buffer); split by rows, every shard reads the whole file.
func TestRangeReadsItsShare(t *testing.T) {
	var buf bytes.Buffer
	Write(&buf, CSV, randomBatch(20000, 8, true))
	p := filepath.Join(t.TempDir(), "big.csv")
	os.WriteFile(p, buf.Bytes(), 0o644)
	size := int64(buf.Len())
	const n = 4
	for _, split := range []Split{SplitRanges, SplitRows} {
		var total int64
		for k := range n {
			s, err := OpenShard(p, Options{Label: LastColumn, Split: split}, k, n)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, _, err := readAll(t, s); err != nil {
				t.Fatal(err)
			}
			read := s.(*reader).bytesRead
			s.Close()
			total += read
			switch split {
			case SplitRanges:
				if read < size/n || read > size/n+128<<10 {
					t.Errorf("ranges: shard %d of %d read %d bytes of %d, want about %d", k, n, read, size, size/n)
				}
			case SplitRows:
				if read != size {
					t.Errorf("rows: shard %d of %d read %d bytes of %d", k, n, read, size)
				}
			}
		}
		t.Logf("%v: %d shards read %d bytes of a %d-byte file", split, n, total, size)
	}
}

// TestSplitChoice: gzip files, standard input and readers keep the split
// by rows (i % n == k); SplitRanges is an error naming them, except for a
// reader that can be read at any offset.
func TestSplitChoice(t *testing.T) {
	b := randomBatch(97, 3, true)
	gz := writeFile(t, "d.csv.gz", CSV, b)
	plain := writeFile(t, "d.csv", CSV, b)
	opts := Options{Label: LastColumn, BatchRows: 8}
	rowsOf := func(s Source) []float64 {
		t.Helper()
		x, _, _, err := readAll(t, s)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		return x
	}
	// The rows i % 3 == 1 of b, as the split by rows gives them.
	var want []float64
	for i := 1; i < b.Rows(); i += 3 {
		want = append(want, b.Row(i)...)
	}
	s, err := OpenShard(gz, opts, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if s.Split() != SplitRows {
		t.Errorf("gzip file: split %v", s.Split())
	}
	if got := rowsOf(s); !equal(got, want) {
		t.Errorf("gzip file: %d values, want %d", len(got), len(want))
	}
	data, _ := os.ReadFile(plain)
	s, _ = NewShardReader(bytes.NewReader(data), "d.csv", opts, 1, 3, 0)
	if s.Split() != SplitRows {
		t.Errorf("reader: split %v", s.Split())
	}
	if got := rowsOf(s); !equal(got, want) {
		t.Errorf("reader: %d values, want %d", len(got), len(want))
	}
	s, _ = OpenShard(plain, Options{Label: LastColumn, Split: SplitRows}, 1, 3)
	if got := rowsOf(s); !equal(got, want) {
		t.Errorf("file split by rows: %d values, want %d", len(got), len(want))
	}
	// SplitRanges on a bytes.Reader is the split of the same file.
	ranges := opts
	ranges.Split, ranges.Format = SplitRanges, CSV
	s, _ = OpenShard(plain, opts, 1, 3)
	fromFile := rowsOf(s)
	s, err = NewShardReader(bytes.NewReader(data), "d.csv", ranges, 1, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := rowsOf(s); !equal(got, fromFile) || equal(got, want) {
		t.Errorf("bytes.Reader split by ranges: %d values; the file's shard has %d", len(got), len(fromFile))
	}
	// SplitRanges where it cannot be.
	for _, c := range []struct {
		name string
		open func() (Source, error)
	}{
		{"gzip file", func() (Source, error) { return OpenShard(gz, ranges, 0, 2) }},
		{"stdin", func() (Source, error) { return OpenShard("-", ranges, 0, 2) }},
		{"tcp", func() (Source, error) { return OpenShard("tcp://127.0.0.1:1/d.csv", ranges, 0, 2) }},
		{"pipe", func() (Source, error) {
			return NewShardReader(io.MultiReader(bytes.NewReader(data)), "pipe.csv", ranges, 0, 2, 0)
		}},
	} {
		_, err := c.open()
		if !errors.Is(err, ErrNotSplittable) {
			t.Errorf("%s: got %v, want ErrNotSplittable", c.name, err)
		}
		if err != nil && c.name == "gzip file" && !strings.HasPrefix(err.Error(), gz+": gzip compressed") {
			t.Errorf("gzip file: the error does not name it: %v", err)
		}
	}
	if _, err := OpenShard(plain, Options{Split: 7}, 0, 1); err == nil || !strings.Contains(err.Error(), "unknown split 7") {
		t.Errorf("split 7: %v", err)
	}
}

// TestRangeErrorLine: an error in a shard that starts mid-file names the
// line of the file.
func TestRangeErrorLine(t *testing.T) {
	var b strings.Builder
	for i := range 100 {
		if i == 80 {
			b.WriteString("80,x\n")
			continue
		}
		fmt.Fprintf(&b, "%d,1\n", i)
	}
	p := filepath.Join(t.TempDir(), "e.csv")
	os.WriteFile(p, []byte(b.String()), 0o644)
	s, err := OpenShard(p, Options{}, 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, _, _, err = readAll(t, s)
	if want := p + `:81: column 2: "x" is not a number`; err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
}

// fileLines returns the data lines (trimmed) of a reader in order, using
// nextRow, so that any content can be compared without parsing it.
func fileLines(t testing.TB, r *reader) []string {
	var lines []string
	for {
		line, ok := r.nextRow()
		if !ok {
			if !errors.Is(r.err, io.EOF) {
				t.Fatalf("%v", r.err)
			}
			return lines
		}
		lines = append(lines, string(line))
	}
}

func openLines(t testing.TB, p string, opts Options, k, n int, pos int64) []string {
	s, err := OpenShardAt(p, opts, k, n, pos)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	return fileLines(t, s.(*reader))
}

// FuzzRanges: for any content, the shards split by ranges, in turn, are
// the data lines of the whole file read by rows, and a shard resumed at a
// position gives the rest of its lines.
func FuzzRanges(f *testing.F) {
	f.Add([]byte("a,b\n1,2\r\n\n# c\n3,4\n5"), uint8(3), true, uint8(1))
	f.Add([]byte("1\r\n2\r\n3\r\n"), uint8(2), false, uint8(0))
	f.Add([]byte("\n\n\n1\n"), uint8(8), false, uint8(2))
	f.Add([]byte("\xef\xbb\xbfh\n\r\n 1 \n  # x\n2"), uint8(5), true, uint8(1))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte, shards uint8, header bool, at uint8) {
		if isGzip(data) {
			return // gzip content is read whole, never by ranges (TestRangeErrors)
		}
		n := int(shards%8) + 1
		file, err := os.CreateTemp(dir, "f*.csv")
		if err != nil {
			t.Fatal(err)
		}
		p := file.Name()
		defer os.Remove(p)
		_, err = file.Write(data)
		if cerr := file.Close(); err != nil || cerr != nil {
			t.Fatal(err, cerr)
		}
		opts := Options{Header: header}
		whole := opts
		whole.Split = SplitRows
		want := openLines(t, p, whole, 0, 1, 0)
		var got []string
		for k := range n {
			lines := openLines(t, p, opts, k, n, 0)
			if pos := int(at) % (len(lines) + 1); pos > 0 {
				if rest := openLines(t, p, opts, k, n, int64(pos)); !slices.Equal(rest, lines[pos:]) {
					t.Fatalf("shard %d of %d at %d: %q, want %q", k, n, pos, rest, lines[pos:])
				}
			}
			got = append(got, lines...)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%d shards: %q, want %q", n, got, want)
		}
	})
}

// BenchmarkShards reads a ~100 MB CSV file (64 features and a label a
// row) as 2 shards split by rows and by ranges, one shard after the other:
// "lines" only reads and splits the lines of its shard (the read cost),
// "parse" parses them too.
// It reports each shard's throughput over its share of the file (MB/s:
// file MB / 2 / seconds per shard), the seconds per shard and the MB each
// shard read. The file is in the page cache: no disk is measured.
func BenchmarkShards(b *testing.B) {
	const shards = 2
	var chunk bytes.Buffer
	Write(&chunk, CSV, randomBatch(10000, 64, true))
	p := filepath.Join(b.TempDir(), "big.csv")
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	var size int64
	for size < 100<<20 {
		n, err := f.Write(chunk.Bytes())
		if err != nil {
			b.Fatal(err)
		}
		size += int64(n)
	}
	f.Close()
	for _, mode := range []string{"lines", "parse"} {
		for _, split := range []Split{SplitRows, SplitRanges} {
			b.Run(mode+"/"+split.String(), func(b *testing.B) {
				opts := Options{Label: LastColumn, Split: split}
				var read int64
				var spent time.Duration
				for b.Loop() {
					for k := range shards {
						start := time.Now()
						s, err := OpenShard(p, opts, k, shards)
						if err != nil {
							b.Fatal(err)
						}
						if mode == "lines" {
							r := s.(*reader)
							for _, ok := r.nextRow(); ok; _, ok = r.nextRow() {
							}
							if !errors.Is(r.err, io.EOF) {
								b.Fatal(r.err)
							}
						} else if _, _, _, err := readAll(b, s); err != nil {
							b.Fatal(err)
						}
						spent += time.Since(start)
						read += s.(*reader).bytesRead
						s.Close()
					}
				}
				perShard := spent.Seconds() / float64(b.N*shards)
				b.ReportMetric(float64(size)/shards/1e6/perShard, "MB/s")
				b.ReportMetric(perShard, "s/shard")
				b.ReportMetric(float64(read)/float64(b.N*shards)/1e6, "MB-read/shard")
			})
		}
	}
}

// synthetic is an input of size bytes, read at any offset without being
// stored: 100-byte lines "1,<spaces>2\n" up to byte long, then one line of
// 'x' to the end.
type synthetic struct {
	long, size, at int64
}

var _ randomAccess = (*synthetic)(nil)

func (s *synthetic) ReadAt(p []byte, off int64) (int, error) {
	if off >= s.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), s.size-off))
	for i := range n {
		o := off + int64(i)
		switch {
		case o >= s.long:
			p[i] = 'x'
		case o%100 == 0:
			p[i] = '1'
		case o%100 == 1:
			p[i] = ','
		case o%100 == 98:
			p[i] = '2'
		case o%100 == 99:
			p[i] = '\n'
		default:
			p[i] = ' '
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (s *synthetic) Read(p []byte) (int, error) {
	n, err := s.ReadAt(p, s.at)
	s.at += int64(n)
	return n, err
}

func (s *synthetic) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekCurrent:
		off += s.at
	case io.SeekEnd:
		off += s.size
	}
	s.at = off
	return off, nil
}

// TestRangeLongLineBeyond: a line longer than MaxLine is an error for the
// shard it starts in (naming its line of the input), not for the shard
// before, which stops before reading it.
func TestRangeLongLineBeyond(t *testing.T) {
	// The long line starts on the first line start at or after shard 1's
	// start: the line shard 0 would read next if it read past its end.
	const n = 8
	var long int64
	for {
		start1, _ := byteRange(long+MaxLine+1000, 1, n)
		next := (start1 + 99) / 100 * 100
		if next == long {
			break
		}
		long = next
	}
	in := &synthetic{long: long, size: long + MaxLine + 1000}
	opts := Options{Format: CSV, Split: SplitRanges}
	count := func(k int) (int, error) {
		s, err := NewShardReader(in, "long.csv", opts, k, n, 0)
		if err != nil {
			t.Fatal(err)
		}
		r := s.(*reader)
		rows := 0
		for {
			if _, ok := r.nextRow(); !ok {
				break
			}
			rows++
		}
		if !errors.Is(r.err, io.EOF) {
			return rows, r.err
		}
		return rows, nil
	}
	if rows, err := count(0); err != nil || rows != int(long/100) {
		t.Errorf("shard 0: %d rows, %v; want %d rows", rows, err, long/100)
	}
	want := fmt.Sprintf("long.csv:%d: line longer than %d bytes", long/100+1, MaxLine)
	if _, err := count(1); err == nil || err.Error() != want {
		t.Errorf("shard 1: got %v, want %s", err, want)
	}
	if rows, err := count(n - 1); err != nil || rows != 0 {
		t.Errorf("shard %d: %d rows, %v; want none", n-1, rows, err)
	}
}
