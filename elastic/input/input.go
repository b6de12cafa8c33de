package input

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	"github.com/virga-ml/virga/elastic"
)

// Format names an input format.
type Format string

// The formats (see the package documentation).
const (
	CSV       Format = "csv"
	JSONLines Format = "jsonl"
	LibSVM    Format = "libsvm"
)

// LastColumn as Options.Label makes the last CSV column the label.
const LastColumn = -1

// DefaultBatchRows is the batch size when Options.BatchRows is 0.
const DefaultBatchRows = 256

// MaxLine is the longest line accepted (bytes).
const MaxLine = 64 << 20

// Options say how to read an input. The zero value reads by the name's
// suffix, CSV without a label and without a header, in batches of
// DefaultBatchRows rows.
type Options struct {
	// Format; empty means by the name's suffix (.csv, .jsonl or .json,
	// .libsvm or .svm, each optionally followed by .gz).
	Format Format
	// BatchRows is the number of rows per batch (the last may have fewer).
	BatchRows int
	// Label is the CSV label column: 0 for none, k > 0 for the k-th column
	// (1-based), LastColumn for the last one.
	Label int
	// Header skips the first line of a CSV input.
	Header bool
	// Comma is the CSV delimiter (',' when 0); ' ' splits on runs of blanks
	// (spaces and tabs).
	Comma rune
	// Features is the libsvm width (the highest index); 0 infers it as the
	// highest index of the first batch, and a later larger index is an
	// error. Set it when reading shards or resuming, so that every reader
	// agrees on the width.
	Features int
	// Split is how the input's rows are divided among shards: SplitAuto
	// (the zero value) splits a regular uncompressed file opened by name
	// by byte ranges and anything else by rows; SplitRows and SplitRanges
	// force one (see "Shards and positions" in the package documentation).
	Split Split
}

// Source is an elastic.Source over an input that also reports its read
// position and holds a file or connection until Close.
type Source interface {
	elastic.Source
	// Pos is the number of rows of this shard returned so far (including
	// the rows skipped to reach the position it was opened at): a
	// checkpoint of the shard's read position.
	Pos() int64
	// Split is how the shard's rows were chosen: SplitRows or SplitRanges
	// (never SplitAuto).
	Split() Split
	// Close releases the file or connection.
	Close() error
}

var (
	// ErrNotResumable is returned when a position is asked of an input
	// that cannot be read again: standard input and network streams.
	ErrNotResumable = errors.New("input cannot be read again, so it cannot be resumed at a position")
	// ErrNotSplittable is returned when SplitRanges is asked of an input
	// that cannot be read at an offset: gzip compressed data, standard
	// input, a network stream, a pipe.
	ErrNotSplittable = errors.New("input cannot be split by byte ranges (Options.Split = SplitRanges): it must be an uncompressed regular file")
)

// Open opens a whole input: a file path, "-" for standard input,
// "tcp://host:port" (the reader connects and reads until the peer closes),
// or an "http://" or "https://" URL streamed as it arrives.
func Open(uri string, opts Options) (Source, error) {
	return OpenShardAt(uri, opts, 0, 1, 0)
}

// OpenShard opens shard k of n of an input, so that n readers together
// read every row exactly once. A regular uncompressed file is split by byte
// ranges: shard k holds the lines that start in its k-th n-th, and its
// reader reads about that much of the file. Other inputs (or Options.Split
// = SplitRows) are split by rows: shard k holds the data rows i (counted
// from 0 over the whole input) with i % n == k, and every reader reads (but
// does not parse) the whole input; for a network stream each reader opens
// its own connection.
func OpenShard(uri string, opts Options, shard, shards int) (Source, error) {
	return OpenShardAt(uri, opts, shard, shards, 0)
}

// OpenShardAt is OpenShard resumed at pos, a value of Pos from an earlier
// reader of the same shard: the first pos rows of the shard are skipped
// unparsed (a shard split by ranges reads them from the start of its
// range). Standard input and network streams cannot be resumed at pos > 0
// (ErrNotResumable). The input must not have changed since the reader whose
// position pos was: the split depends on the file's size and content.
func OpenShardAt(uri string, opts Options, shard, shards int, pos int64) (Source, error) {
	if err := checkShard(shard, shards, pos); err != nil {
		return nil, err
	}
	network := IsNetwork(uri)
	if pos > 0 && (network || uri == "-") {
		return nil, fmt.Errorf("%s: %w", uri, ErrNotResumable)
	}
	if opts.Split == SplitRanges && (network || uri == "-") {
		return nil, fmt.Errorf("%s: %w", uri, ErrNotSplittable)
	}
	if uri == "-" && shards > 1 {
		// Every reader would take its rows from the one stream: each would
		// see some of the lines, and the rows of the others would be lost.
		return nil, fmt.Errorf("standard input is read once, by one reader: it cannot be shard %d of %d", shard, shards)
	}
	name := uri
	if network {
		u, err := url.Parse(uri)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", uri, err)
		}
		name = u.Path
	}
	if opts.Format == "" {
		f, err := FormatOf(name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", uri, err)
		}
		opts.Format = f
	}
	var rc io.ReadCloser
	file := false
	switch {
	case uri == "-":
		rc = io.NopCloser(os.Stdin) // hides the *os.File: stdin is read once
		name = "stdin"
	case strings.HasPrefix(uri, "tcp://"):
		host := strings.TrimPrefix(uri, "tcp://")
		if i := strings.IndexByte(host, '/'); i >= 0 {
			host = host[:i]
		}
		c, err := net.DialTimeout("tcp", host, 30*time.Second)
		if err != nil {
			return nil, err
		}
		rc = c
		name = uri
	case network:
		resp, err := http.Get(uri)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, fmt.Errorf("%s: %s", uri, resp.Status)
		}
		rc = resp.Body
		name = uri
	default:
		f, err := os.Open(uri)
		if err != nil {
			return nil, err
		}
		rc = f
		file = true
	}
	r, err := newReader(rc, rc, name, opts, shard, shards, pos, file)
	if err != nil {
		rc.Close()
		return nil, err
	}
	r.network = network
	return r, nil
}

// NewReader reads a whole input from r (standard input, a pipe, a buffer);
// name is used in error messages. Gzip compressed data is recognised by its
// magic bytes. opts.Format must be set unless name has a known suffix.
// Close closes r if it is an io.Closer.
func NewReader(r io.Reader, name string, opts Options) (Source, error) {
	return NewShardReader(r, name, opts, 0, 1, 0)
}

// NewShardReader is NewReader for shard k of n, skipping the first pos rows
// of the shard; the caller vouches that r yields the same data as the
// reader whose position pos was. The shards are split by rows unless
// opts.Split is SplitRanges, which needs r to be an io.ReaderAt and
// io.Seeker over uncompressed data (an *os.File of a regular file, a
// bytes.Reader): it is read from its start to its end, whatever its current
// offset.
func NewShardReader(r io.Reader, name string, opts Options, shard, shards int, pos int64) (Source, error) {
	if err := checkShard(shard, shards, pos); err != nil {
		return nil, err
	}
	if opts.Format == "" {
		f, err := FormatOf(name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		opts.Format = f
	}
	c, ok := r.(io.Closer)
	if !ok {
		c = io.NopCloser(nil)
	}
	return newReader(r, c, name, opts, shard, shards, pos, false)
}

// IsNetwork reports whether uri names a network stream (tcp, http, https),
// which is read once and cannot be resumed.
func IsNetwork(uri string) bool {
	for _, p := range []string{"tcp://", "http://", "https://"} {
		if strings.HasPrefix(uri, p) {
			return true
		}
	}
	return false
}

// FormatOf returns the format named by a file name's suffix (.csv, .jsonl,
// .json, .libsvm, .svm), after an optional .gz.
func FormatOf(name string) (Format, error) {
	n := strings.ToLower(strings.TrimSuffix(strings.ToLower(name), ".gz"))
	switch path.Ext(n) {
	case ".csv":
		return CSV, nil
	case ".jsonl", ".json", ".ndjson":
		return JSONLines, nil
	case ".libsvm", ".svm":
		return LibSVM, nil
	}
	return "", fmt.Errorf("unknown format (no .csv, .jsonl, .json, .libsvm or .svm suffix): set Options.Format")
}

func checkShard(shard, shards int, pos int64) error {
	if shards < 1 || shard < 0 || shard >= shards {
		return fmt.Errorf("input: shard %d of %d: want 0 <= shard < shards", shard, shards)
	}
	if pos < 0 {
		return fmt.Errorf("input: negative position %d", pos)
	}
	return nil
}

// reader is the Source of every format.
type reader struct {
	name          string
	rc            io.Closer
	gz            *gzip.Reader
	sc            *bufio.Scanner
	opts          Options
	shard, shards int64
	network       bool

	// A shard split by ranges (ranged) reads the lines of ra that start at
	// offsets first <= o < end; off is the offset of the next line.
	ranged          bool
	ra              io.ReaderAt
	first, off, end int64
	base            int   // lines before first, -1 until counted (lineBase)
	bytesRead       int64 // bytes read from the input (before gunzip)

	line    int   // lines read by this reader (the last one's number if first is 0)
	global  int64 // data rows seen: in the whole input (rows) or the range
	pos     int64 // rows of this shard returned (or skipped at open)
	skip    int64 // rows of the shard still to skip
	started bool  // first line handled (header)
	p       parser
	err     error // sticky
}

// newReader reads in (closing c on Close); autoRanges lets SplitAuto split
// by ranges (a file opened by name).
func newReader(in io.Reader, c io.Closer, name string, opts Options, shard, shards int, pos int64, autoRanges bool) (*reader, error) {
	if opts.BatchRows <= 0 {
		opts.BatchRows = DefaultBatchRows
	}
	r := &reader{name: name, rc: c, opts: opts, shard: int64(shard), shards: int64(shards), pos: pos, skip: pos, base: -1}
	switch opts.Format {
	case CSV:
		if opts.Comma == 0 {
			opts.Comma = ','
		}
		if opts.Comma == '\n' || opts.Comma == '\r' || opts.Comma == '"' || opts.Comma == '#' || opts.Comma < 0 {
			return nil, fmt.Errorf("%s: invalid CSV delimiter %q", name, opts.Comma)
		}
		if opts.Label < LastColumn {
			return nil, fmt.Errorf("%s: invalid label column %d", name, opts.Label)
		}
		r.p = &csvParser{comma: opts.Comma, label: opts.Label}
	case JSONLines:
		r.p = &jsonParser{hasY: -1}
	case LibSVM:
		if opts.Features < 0 {
			return nil, fmt.Errorf("%s: negative number of features %d", name, opts.Features)
		}
		r.p = &svmParser{features: opts.Features}
	default:
		return nil, fmt.Errorf("%s: unknown format %q (want csv, jsonl or libsvm)", name, opts.Format)
	}
	r.opts = opts
	switch opts.Split {
	case SplitAuto, SplitRows, SplitRanges:
	default:
		return nil, fmt.Errorf("%s: unknown split %d (want SplitAuto, SplitRows or SplitRanges)", name, opts.Split)
	}
	if opts.Split == SplitRanges || opts.Split == SplitAuto && autoRanges {
		ra, size, ok := sizeOf(in)
		var magic [2]byte
		if ok {
			n, _ := ra.ReadAt(magic[:], 0)
			ok = !isGzip(magic[:n])
		}
		switch {
		case ok:
			r.ra = ra
			if err := r.openRange(ra, size); err != nil {
				return nil, err
			}
			r.sc.Buffer(make([]byte, 0, 64<<10), MaxLine)
			return r, nil
		case opts.Split == SplitRanges && isGzip(magic[:]):
			return nil, fmt.Errorf("%s: gzip compressed: %w", name, ErrNotSplittable)
		case opts.Split == SplitRanges:
			return nil, fmt.Errorf("%s: %w", name, ErrNotSplittable)
		}
	}
	br := bufio.NewReaderSize(&counter{r: in, n: &r.bytesRead}, 64<<10)
	var src io.Reader = br
	if magic, _ := br.Peek(2); isGzip(magic) {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%s: gzip: %v", name, err)
		}
		r.gz = gz
		src = gz
	}
	r.sc = bufio.NewScanner(src)
	r.sc.Buffer(make([]byte, 0, 64<<10), MaxLine)
	return r, nil
}

// Pos implements Source.
func (r *reader) Pos() int64 { return r.pos }

// Split implements Source.
func (r *reader) Split() Split {
	if r.ranged {
		return SplitRanges
	}
	return SplitRows
}

// Close implements Source.
func (r *reader) Close() error {
	if r.gz != nil {
		r.gz.Close()
	}
	return r.rc.Close()
}

// nextRow returns the next data line of this shard that is not skipped, or
// false at the end of the input or on an error (r.err).
func (r *reader) nextRow() ([]byte, bool) {
	for r.sc.Scan() {
		r.line++
		line := r.sc.Bytes()
		if !r.started {
			r.started = true
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf")) // UTF-8 BOM
			if r.opts.Format == CSV && r.opts.Header {
				continue
			}
		}
		t := bytes.TrimSpace(line)
		if len(t) == 0 || t[0] == '#' {
			continue
		}
		i := r.global
		r.global++
		if !r.ranged && i%r.shards != r.shard {
			continue
		}
		if r.skip > 0 {
			r.skip--
			continue
		}
		return t, true
	}
	if err := r.sc.Err(); err != nil && err != errRangeEnd {
		if errors.Is(err, bufio.ErrTooLong) {
			r.err = fmt.Errorf("%s: line longer than %d bytes", r.where(r.line+1), MaxLine)
		} else {
			r.err = fmt.Errorf("%s: read: %w", r.where(r.line+1), err)
		}
	} else {
		if r.skip > 0 {
			r.err = fmt.Errorf("%s: the input ended %d rows before position %d of shard %d of %d", r.name, r.skip, r.pos, r.shard, r.shards)
		} else {
			r.err = io.EOF
		}
	}
	return nil, false
}

// Next implements elastic.Source. Cancelling ctx while it waits on a
// network stream closes the stream (it cannot be read again).
func (r *reader) Next(ctx context.Context) (*elastic.Batch, error) {
	if r.err != nil {
		return nil, r.err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if r.network {
		stop := context.AfterFunc(ctx, func() { r.rc.Close() })
		defer stop()
	}
	r.p.begin()
	n := 0
	for n < r.opts.BatchRows {
		line, ok := r.nextRow()
		if !ok {
			break
		}
		if err := r.p.row(line); err != nil {
			if r.opts.Format == CSV && !r.opts.Header && r.global == 1 && r.first == 0 {
				err = fmt.Errorf("%w (a header line? set Options.Header)", err)
			}
			r.err = fmt.Errorf("%s: %w", r.where(r.line), err)
			return nil, r.err
		}
		n++
	}
	if r.err != nil && r.err != io.EOF {
		if cerr := ctx.Err(); cerr != nil && r.network {
			r.err = cerr
		}
		return nil, r.err
	}
	if n == 0 {
		return nil, io.EOF
	}
	b, err := r.p.end()
	if err != nil {
		r.err = fmt.Errorf("%s: %w", r.where(r.line), err)
		return nil, r.err
	}
	r.pos += int64(n)
	return b, nil
}

// ReadAll reads a whole input into memory: its feature rows (row-major,
// cols wide) and, when it has labels, one label per row.
func ReadAll(uri string, opts Options) (x, y []float64, cols int, err error) {
	src, err := Open(uri, opts)
	if err != nil {
		return nil, nil, 0, err
	}
	defer src.Close()
	ctx := context.Background()
	for {
		b, err := src.Next(ctx)
		if errors.Is(err, io.EOF) {
			return x, y, cols, nil
		}
		if err != nil {
			return nil, nil, 0, err
		}
		x, y, cols = append(x, b.X...), append(y, b.Y...), b.Cols
	}
}
