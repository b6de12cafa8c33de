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
}

// Source is an elastic.Source over an input that also reports its read
// position and holds a file or connection until Close.
type Source interface {
	elastic.Source
	// Pos is the number of rows of this shard returned so far (including
	// the rows skipped to reach the position it was opened at): a
	// checkpoint of the shard's read position.
	Pos() int64
	// Close releases the file or connection.
	Close() error
}

// ErrNotResumable is returned when a position is asked of an input that
// cannot be read again: standard input and network streams.
var ErrNotResumable = errors.New("input cannot be read again, so it cannot be resumed at a position")

// Open opens a whole input: a file path, "-" for standard input,
// "tcp://host:port" (the reader connects and reads until the peer closes),
// or an "http://" or "https://" URL streamed as it arrives.
func Open(uri string, opts Options) (Source, error) {
	return OpenShardAt(uri, opts, 0, 1, 0)
}

// OpenShard opens shard k of n of an input: the data rows i (counted from
// 0 over the whole input) with i % n == k, so that n readers together read
// every row exactly once. Every reader reads (but does not parse) the whole
// input; for a network stream each reader opens its own connection.
func OpenShard(uri string, opts Options, shard, shards int) (Source, error) {
	return OpenShardAt(uri, opts, shard, shards, 0)
}

// OpenShardAt is OpenShard resumed at pos, a value of Pos from an earlier
// reader of the same shard: the first pos rows of the shard are skipped
// unparsed. Standard input and network streams cannot be resumed at pos >
// 0 (ErrNotResumable).
func OpenShardAt(uri string, opts Options, shard, shards int, pos int64) (Source, error) {
	if err := checkShard(shard, shards, pos); err != nil {
		return nil, err
	}
	network := IsNetwork(uri)
	if pos > 0 && (network || uri == "-") {
		return nil, fmt.Errorf("%s: %w", uri, ErrNotResumable)
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
	switch {
	case uri == "-":
		rc = io.NopCloser(os.Stdin)
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
	}
	r, err := newReader(rc, name, opts, shard, shards, pos)
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
// reader whose position pos was.
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
	rc, ok := r.(io.ReadCloser)
	if !ok {
		rc = io.NopCloser(r)
	}
	return newReader(rc, name, opts, shard, shards, pos)
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

	line    int   // physical line number of the last line read
	global  int64 // data rows seen in the whole input
	pos     int64 // rows of this shard returned (or skipped at open)
	skip    int64 // rows of the shard still to skip
	started bool  // first line handled (header)
	p       parser
	err     error // sticky
}

func newReader(rc io.ReadCloser, name string, opts Options, shard, shards int, pos int64) (*reader, error) {
	if opts.BatchRows <= 0 {
		opts.BatchRows = DefaultBatchRows
	}
	r := &reader{name: name, rc: rc, opts: opts, shard: int64(shard), shards: int64(shards), pos: pos, skip: pos}
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
	br := bufio.NewReaderSize(rc, 64<<10)
	var src io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
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
		if i%r.shards != r.shard {
			continue
		}
		if r.skip > 0 {
			r.skip--
			continue
		}
		return t, true
	}
	if err := r.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			r.err = fmt.Errorf("%s:%d: line longer than %d bytes", r.name, r.line+1, MaxLine)
		} else {
			r.err = fmt.Errorf("%s:%d: read: %w", r.name, r.line+1, err)
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
			if r.opts.Format == CSV && !r.opts.Header && r.global == 1 {
				err = fmt.Errorf("%w (a header line? set Options.Header)", err)
			}
			r.err = fmt.Errorf("%s:%d: %w", r.name, r.line, err)
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
		r.err = fmt.Errorf("%s:%d: %w", r.name, r.line, err)
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
