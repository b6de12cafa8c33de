package input

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
)

// Width returns the number of feature columns of a file input, the same
// for every reader of every shard: for CSV and JSON lines that of its first
// row; for libsvm the largest feature index in the whole file, found by a
// scan of it (a reader infers it from its first batch otherwise, and the
// readers of different shards may disagree). Set it as Options.Features.
// Standard input and network streams cannot be looked at in advance.
func Width(ctx context.Context, uri string, opts Options) (int, error) {
	if uri == "-" || IsNetwork(uri) {
		return 0, fmt.Errorf("%s: the width of a stream cannot be read in advance", uri)
	}
	if opts.Format == "" {
		f, err := FormatOf(uri)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", uri, err)
		}
		opts.Format = f
	}
	if opts.Format == LibSVM {
		return libsvmWidth(uri)
	}
	src, err := Open(uri, opts)
	if err != nil {
		return 0, err
	}
	defer src.Close()
	b, err := src.Next(ctx)
	if err != nil {
		return 0, fmt.Errorf("%s: reading the first rows: %w", uri, err)
	}
	return b.Cols, nil
}

// libsvmWidth scans a libsvm file (plain or gzip) for its largest index.
func libsvmWidth(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return scanWidth(f, path)
}

// scanWidth returns the largest feature index of libsvm text (plain or
// gzip) read from r; name is used in errors.
func scanWidth(r io.Reader, name string) (int, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var in = bufio.NewScanner(br)
	if magic, _ := br.Peek(2); isGzip(magic) {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return 0, fmt.Errorf("%s: gzip: %v", name, err)
		}
		defer gz.Close()
		in = bufio.NewScanner(gz)
	}
	in.Buffer(make([]byte, 0, 64<<10), MaxLine)
	width, line := 0, 0
	for in.Scan() {
		line++
		l := in.Bytes()
		if i := bytes.IndexByte(l, '#'); i >= 0 {
			l = l[:i]
		}
		toks := bytes.Fields(l)
		for _, t := range toks[min(1, len(toks)):] {
			c := bytes.IndexByte(t, ':')
			if c < 0 || string(t[:c]) == "qid" {
				continue // the reader reports a malformed token
			}
			k, err := strconv.Atoi(string(t[:c]))
			if err != nil || k < 1 || k > MaxFeatures {
				return 0, fmt.Errorf("%s:%d: %q: the index is not an integer from 1 to %d", name, line, t, MaxFeatures)
			}
			width = max(width, k)
		}
	}
	if err := in.Err(); err != nil {
		return 0, fmt.Errorf("%s:%d: %w", name, line+1, err)
	}
	if width == 0 {
		return 0, fmt.Errorf("%s: no features (libsvm rows are \"label index:value ...\")", name)
	}
	return width, nil
}
