package input

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
)

// Split says how the rows of an input are divided among its shards.
type Split int

// The splits (see "Shards and positions" in the package documentation).
const (
	// SplitAuto, the default, is SplitRanges when Open reads a regular,
	// uncompressed file and SplitRows otherwise (gzip, standard input,
	// network streams, and every NewShardReader).
	SplitAuto Split = iota
	// SplitRows gives shard k of n the rows i with i % n == k: it works on
	// any input, but every reader reads the whole input.
	SplitRows
	// SplitRanges gives shard k of n the lines that start in the bytes
	// [k*size/n, (k+1)*size/n) of the input, so each reader reads about
	// 1/n of it. The input must be uncompressed and readable at any offset
	// (a regular file); otherwise opening it is an error.
	SplitRanges
)

// String returns "auto", "rows" or "ranges".
func (s Split) String() string {
	switch s {
	case SplitAuto:
		return "auto"
	case SplitRows:
		return "rows"
	case SplitRanges:
		return "ranges"
	}
	return fmt.Sprintf("Split(%d)", int(s))
}

// randomAccess is an input that can be read at any offset.
type randomAccess interface {
	io.ReaderAt
	io.Seeker
}

// sizeOf returns the size of an input that can be split by byte ranges, or
// false: an *os.File must be a regular file.
func sizeOf(r io.Reader) (io.ReaderAt, int64, bool) {
	if f, ok := r.(*os.File); ok {
		fi, err := f.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			return nil, 0, false
		}
		return f, fi.Size(), true
	}
	ra, ok := r.(randomAccess)
	if !ok {
		return nil, 0, false
	}
	cur, err := ra.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, 0, false
	}
	size, err := ra.Seek(0, io.SeekEnd)
	if _, err2 := ra.Seek(cur, io.SeekStart); err != nil || err2 != nil {
		return nil, 0, false
	}
	return ra, size, true
}

// isGzip reports whether data starts with the gzip magic bytes.
func isGzip(data []byte) bool {
	return len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b
}

// byteRange returns the bytes [start, end) of shard k of n of size bytes:
// floor(k*size/n) to floor((k+1)*size/n), computed without overflow.
func byteRange(size int64, k, n int) (start, end int64) {
	at := func(k int64) int64 {
		q, r := size/int64(n), size%int64(n)
		return k*q + k*r/int64(n) // k*r < n*n
	}
	return at(int64(k)), at(int64(k + 1))
}

// errRangeEnd stops the scanner of a range shard at the first line that
// starts at or after the range's end, before it reads that line (which may
// be longer than MaxLine: its shard reports that).
var errRangeEnd = errors.New("end of the shard's byte range")

// openRange positions r at the first line of its byte range: the line at
// offset 0, or else the line after the first '\n' at or after start-1 (so a
// range starting just after a '\n' starts with that line, and a line that
// starts before the range belongs to the shard before). Lines starting at
// or after end belong to the next shard.
func (r *reader) openRange(ra io.ReaderAt, size int64) error {
	start, end := byteRange(size, int(r.shard), int(r.shards))
	from := max(start-1, 0)
	sec := &counter{r: io.NewSectionReader(ra, from, size-from), n: &r.bytesRead}
	br := bufio.NewReaderSize(sec, 64<<10)
	off := from
	if start > 0 {
		for {
			chunk, err := br.ReadSlice('\n')
			off += int64(len(chunk))
			if err == nil {
				break
			}
			if err == io.EOF {
				break // no line starts in the range: off == size
			}
			if err != bufio.ErrBufferFull {
				return fmt.Errorf("%s: read at byte %d: %w", r.name, off, err)
			}
		}
	}
	r.ranged = true
	r.first, r.off, r.end = off, off, end
	r.started = off > 0 // only the input's first line can be a header
	r.sc = bufio.NewScanner(br)
	r.sc.Split(r.scanRange)
	return nil
}

// scanRange is the scanner's split function for a range shard: lines as
// bufio.ScanLines, with the input offset of each, up to the range's end.
func (r *reader) scanRange(data []byte, atEOF bool) (int, []byte, error) {
	if r.off >= r.end {
		return 0, nil, errRangeEnd
	}
	adv, tok, err := bufio.ScanLines(data, atEOF)
	r.off += int64(adv)
	return adv, tok, err
}

// lineBase returns the number of lines of the input before the shard's
// first line, so that errors name lines of the input: it reads the input
// up to there, which is done only on an error.
func (r *reader) lineBase() (int, bool) {
	if !r.ranged || r.first == 0 {
		return 0, true
	}
	if r.base < 0 {
		n, buf := 0, make([]byte, 64<<10)
		sec := io.NewSectionReader(r.ra, 0, r.first)
		for {
			m, err := sec.Read(buf)
			n += bytes.Count(buf[:m], []byte{'\n'})
			if err == io.EOF {
				break
			}
			if err != nil {
				return 0, false
			}
		}
		r.base = n
	}
	return r.base, true
}

// where names line i (counted from 1 at the shard's first line) as
// "name:line" in the input, or, if the input cannot be read again to count
// its lines, as "name: line i of shard k of n".
func (r *reader) where(i int) string {
	base, ok := r.lineBase()
	if !ok {
		return fmt.Sprintf("%s: line %d of shard %d of %d (from byte %d)", r.name, i, r.shard, r.shards, r.first)
	}
	return fmt.Sprintf("%s:%d", r.name, base+i)
}

// counter counts the bytes read through it.
type counter struct {
	r io.Reader
	n *int64
}

func (c *counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	*c.n += int64(n)
	return n, err
}
