package input

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

// fuzzRead reads data to the end or the first error: it must not panic and
// every batch must be well formed (checkBatch).
func fuzzRead(t *testing.T, data []byte, opts Options, shard, shards int) {
	opts.BatchRows = 3
	s, err := NewShardReader(bytes.NewReader(data), "fuzz", opts, shard, shards, 0)
	if err != nil {
		return
	}
	cols, labels := 0, -1
	var rows int64
	for {
		b, err := s.Next(context.Background())
		if err != nil {
			if errors.Is(err, io.EOF) && s.Pos() != rows {
				t.Fatalf("pos %d after %d rows", s.Pos(), rows)
			}
			return
		}
		checkBatch(t, b, &cols, &labels)
		if opts.Features > 0 && b.Cols != opts.Features {
			t.Fatalf("%d columns, Options.Features %d", b.Cols, opts.Features)
		}
		rows += int64(b.Rows())
	}
}

func FuzzCSV(f *testing.F) {
	f.Add([]byte("1,2,3\n4,5,6\n7,8,9\n1,1,1\n"), int8(-1), false, byte(','), uint8(1))
	f.Add([]byte("a,b\n1,2\n\n# c\n3,4\n"), int8(1), true, byte(','), uint8(2))
	f.Add([]byte("1 2\t3\n4 5 6\n"), int8(0), false, byte(' '), uint8(1))
	f.Add([]byte("\"1\";2\r\n3;x\n"), int8(2), false, byte(';'), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, label int8, header bool, comma byte, shards uint8) {
		n := int(shards%4) + 1
		fuzzRead(t, data, Options{Format: CSV, Label: int(label), Header: header, Comma: rune(comma)}, n-1, n)
	})
}

func FuzzJSONLines(f *testing.F) {
	f.Add([]byte(`{"x": [1, 2], "y": 1}`+"\n"+`{"x": [3, 4], "y": 0}`+"\n"), uint8(1))
	f.Add([]byte(`{"features": [1], "label": 2}`+"\n\n"+`{"features": [1, 2]}`), uint8(2))
	f.Add([]byte(`{"x": [1e400]}`+"\n"+`null`+"\n"+`[1]`), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, shards uint8) {
		n := int(shards%4) + 1
		fuzzRead(t, data, Options{Format: JSONLines}, 0, n)
	})
}

func FuzzLibSVM(f *testing.F) {
	f.Add([]byte("1 1:2 3:4\n0 2:1\n-1 qid:1 5:1 # c\n1\n"), uint16(0), uint8(1))
	f.Add([]byte("+1 1:1\n1 0:1\n1 2:1 2:1\n"), uint16(3), uint8(2))
	f.Add([]byte("1 9999999:1\n1 1:x\n"), uint16(2), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, features uint16, shards uint8) {
		n := int(shards%4) + 1
		fuzzRead(t, data, Options{Format: LibSVM, Features: int(features % 1000)}, 0, n)
	})
}

// FuzzLibSVMWidth: the width scan never panics, and a reader given the
// width it finds never meets an index beyond it.
func FuzzLibSVMWidth(f *testing.F) {
	f.Add([]byte("1 1:2 3:4\n0 2:1\n-1 qid:1 5:1 # c\n1\n"))
	f.Add([]byte("+1 1:1\n1 0:1\n1 2:1 2:1\n"))
	f.Add([]byte("1 9999999:1\n1 1:x # 7:1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := scanWidth(bytes.NewReader(data), "f")
		if err != nil {
			return
		}
		src, err := NewReader(bytes.NewReader(data), "f", Options{Format: LibSVM, Features: w})
		if err != nil {
			return
		}
		for {
			b, err := src.Next(context.Background())
			if err != nil {
				if strings.Contains(err.Error(), "beyond") {
					t.Fatalf("width %d, yet the reader says %v", w, err)
				}
				return
			}
			if b.Cols != w {
				t.Fatalf("width %d, a batch of %d columns", w, b.Cols)
			}
		}
	})
}
