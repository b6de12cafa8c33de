package input

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/virga-ml/virga/elastic"
)

// Write writes a batch in a format that Open reads back to the same
// values: CSV with the label (if any) as the last column (read it with
// Options.Label = LastColumn), JSON lines {"x": [...], "y": ...}, or libsvm
// with the zero features left out (a batch without labels gets label 0).
func Write(w io.Writer, f Format, b *elastic.Batch) error {
	if b.Cols <= 0 || len(b.X)%b.Cols != 0 || (b.Y != nil && len(b.Y) != b.Rows()) {
		return errors.New("input: malformed batch")
	}
	bw := bufio.NewWriter(w)
	var buf []byte
	num := func(v float64) error {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("input: %v is not a finite number", v)
		}
		buf = strconv.AppendFloat(buf, v, 'g', -1, 64)
		return nil
	}
	for i := range b.Rows() {
		buf = buf[:0]
		row := b.Row(i)
		switch f {
		case CSV:
			for j, v := range row {
				if j > 0 {
					buf = append(buf, ',')
				}
				if err := num(v); err != nil {
					return err
				}
			}
			if b.Y != nil {
				buf = append(buf, ',')
				if err := num(b.Y[i]); err != nil {
					return err
				}
			}
		case JSONLines:
			buf = append(buf, `{"x":[`...)
			for j, v := range row {
				if j > 0 {
					buf = append(buf, ',')
				}
				if err := num(v); err != nil {
					return err
				}
			}
			buf = append(buf, ']')
			if b.Y != nil {
				buf = append(buf, `,"y":`...)
				if err := num(b.Y[i]); err != nil {
					return err
				}
			}
			buf = append(buf, '}')
		case LibSVM:
			y := 0.0
			if b.Y != nil {
				y = b.Y[i]
			}
			if err := num(y); err != nil {
				return err
			}
			for j, v := range row {
				if v != 0 {
					buf = append(buf, ' ')
					buf = strconv.AppendInt(buf, int64(j+1), 10)
					buf = append(buf, ':')
					if err := num(v); err != nil {
						return err
					}
				}
			}
		default:
			return fmt.Errorf("input: unknown format %q", f)
		}
		buf = append(buf, '\n')
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return bw.Flush()
}
