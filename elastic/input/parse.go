package input

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/virga-ml/virga/elastic"
)

// MaxFeatures is the highest libsvm feature index accepted.
const MaxFeatures = 1 << 20

// MaxBatchValues bounds the values of a dense libsvm batch (rows times
// features, 256 MiB): sparse rows with high indices would otherwise take
// far more memory than their text.
const MaxBatchValues = 1 << 25

// parser turns the lines of one batch into a dense batch.
type parser interface {
	begin()
	row(line []byte) error // line is trimmed and not empty
	end() (*elastic.Batch, error)
}

// number parses one value.
func number(s []byte) (float64, error) {
	if len(s) == 0 {
		return 0, errors.New("empty, not a number")
	}
	v, err := strconv.ParseFloat(string(s), 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a finite number", s)
	}
	return v, nil
}

type csvParser struct {
	comma  rune
	label  int // option: 0 none, k > 0, LastColumn
	fields int // columns per line, from the first row
	lab    int // 1-based label column or 0
	x, y   []float64
	tmp    [][]byte
}

func (p *csvParser) begin() { p.x, p.y = nil, nil }

func (p *csvParser) split(line []byte) [][]byte {
	p.tmp = p.tmp[:0]
	if p.comma == ' ' {
		return append(p.tmp, bytes.Fields(line)...)
	}
	var sep [utf8.UTFMax]byte
	n := utf8.EncodeRune(sep[:], p.comma)
	for {
		i := bytes.Index(line, sep[:n])
		if i < 0 {
			return append(p.tmp, line)
		}
		p.tmp = append(p.tmp, line[:i])
		line = line[i+n:]
	}
}

func (p *csvParser) row(line []byte) error {
	fields := p.split(line)
	if p.fields == 0 {
		lab := p.label
		if lab == LastColumn {
			lab = len(fields)
		}
		if lab > len(fields) {
			return fmt.Errorf("label column %d, but the first row has %d columns", lab, len(fields))
		}
		if lab > 0 && len(fields) == 1 {
			return errors.New("only a label column, no features")
		}
		p.fields, p.lab = len(fields), lab
	} else if len(fields) != p.fields {
		return fmt.Errorf("%d columns, expected %d (as on the first row)", len(fields), p.fields)
	}
	start := len(p.x)
	for j, f := range fields {
		f = bytes.TrimSpace(f)
		if len(f) >= 2 && f[0] == '"' && f[len(f)-1] == '"' {
			f = bytes.TrimSpace(f[1 : len(f)-1])
		}
		v, err := number(f)
		if err != nil {
			p.x = p.x[:start]
			return fmt.Errorf("column %d: %v", j+1, err)
		}
		if j+1 == p.lab {
			p.y = append(p.y, v)
		} else {
			p.x = append(p.x, v)
		}
	}
	return nil
}

func (p *csvParser) end() (*elastic.Batch, error) {
	cols := p.fields
	if p.lab > 0 {
		cols--
	}
	return &elastic.Batch{X: p.x, Cols: cols, Y: p.y}, nil
}

type jsonParser struct {
	cols int // from the first row
	hasY int // -1 unknown, 0 no, 1 yes
	x, y []float64
}

type jsonRow struct {
	X        []*float64 `json:"x"` // pointers, to tell null from 0
	Y        *float64   `json:"y"`
	Features []*float64 `json:"features"`
	Label    *float64   `json:"label"`
}

func (p *jsonParser) begin() { p.x, p.y = nil, nil }

func (p *jsonParser) row(line []byte) error {
	var r jsonRow
	if err := json.Unmarshal(line, &r); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return fmt.Errorf(`field %q is a JSON %s; want an object {"x": [numbers], "y": number}`, te.Field, te.Value)
		}
		return fmt.Errorf(`want an object {"x": [numbers], "y": number}: %v`, err)
	}
	x, y := r.X, r.Y
	switch {
	case r.X != nil && r.Features != nil:
		return errors.New(`both "x" and "features"`)
	case r.X == nil:
		x = r.Features
	}
	switch {
	case r.Y != nil && r.Label != nil:
		return errors.New(`both "y" and "label"`)
	case r.Y == nil:
		y = r.Label
	}
	if len(x) == 0 {
		return errors.New(`no features: want "x" (or "features"), a non-empty array of numbers`)
	}
	if p.cols == 0 {
		p.cols = len(x)
	} else if len(x) != p.cols {
		return fmt.Errorf("%d features, expected %d (as on the first row)", len(x), p.cols)
	}
	has := 0
	if y != nil {
		has = 1
	}
	if p.hasY < 0 {
		p.hasY = has
	} else if has != p.hasY {
		if has == 1 {
			return errors.New("a label, but the first row has none")
		}
		return errors.New(`no label ("y" or "label"), but the first row has one`)
	}
	for j, v := range x {
		if v == nil {
			return fmt.Errorf("feature %d: null, not a number", j+1)
		}
	}
	for _, v := range x {
		p.x = append(p.x, *v)
	}
	if y != nil {
		p.y = append(p.y, *y)
	}
	return nil
}

func (p *jsonParser) end() (*elastic.Batch, error) {
	return &elastic.Batch{X: p.x, Cols: p.cols, Y: p.y}, nil
}

type svmParser struct {
	features int  // width, given or inferred
	inferred bool // features was inferred from the first batch
	idx      []int32
	val      []float64
	starts   []int
	y        []float64
	seen     map[int32]bool
	maxIdx   int
}

func (p *svmParser) begin() {
	p.idx, p.val, p.starts, p.y, p.maxIdx = p.idx[:0], p.val[:0], p.starts[:0], nil, 0
}

func (p *svmParser) row(line []byte) error {
	if i := bytes.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	toks := bytes.Fields(line)
	if len(toks) == 0 {
		return errors.New(`want "label index:value ..."`)
	}
	y, err := number(toks[0])
	if err != nil {
		return fmt.Errorf("label: %v", err)
	}
	start := len(p.idx)
	if p.seen == nil {
		p.seen = map[int32]bool{}
	}
	clear(p.seen)
	for _, t := range toks[1:] {
		c := bytes.IndexByte(t, ':')
		if c < 0 {
			p.idx, p.val = p.idx[:start], p.val[:start]
			return fmt.Errorf("%q: want index:value", t)
		}
		if string(t[:c]) == "qid" {
			continue
		}
		k, err := strconv.Atoi(string(t[:c]))
		if err != nil || k < 1 || k > MaxFeatures {
			p.idx, p.val = p.idx[:start], p.val[:start]
			return fmt.Errorf("%q: the index is not an integer from 1 to %d", t, MaxFeatures)
		}
		if p.features > 0 && k > p.features {
			p.idx, p.val = p.idx[:start], p.val[:start]
			if p.inferred {
				return fmt.Errorf("index %d beyond the %d features inferred from the first batch (set Options.Features)", k, p.features)
			}
			return fmt.Errorf("index %d beyond the %d features (Options.Features)", k, p.features)
		}
		if p.seen[int32(k)] {
			p.idx, p.val = p.idx[:start], p.val[:start]
			return fmt.Errorf("index %d repeated", k)
		}
		p.seen[int32(k)] = true
		v, err := number(t[c+1:])
		if err != nil {
			p.idx, p.val = p.idx[:start], p.val[:start]
			return fmt.Errorf("index %d: %v", k, err)
		}
		p.idx = append(p.idx, int32(k))
		p.val = append(p.val, v)
		p.maxIdx = max(p.maxIdx, k)
	}
	p.starts = append(p.starts, start)
	p.y = append(p.y, y)
	return nil
}

func (p *svmParser) end() (*elastic.Batch, error) {
	if p.features == 0 {
		p.features = max(p.maxIdx, 1)
		p.inferred = true
	}
	rows := len(p.starts)
	if rows*p.features > MaxBatchValues {
		return nil, fmt.Errorf("a dense batch of %d rows of %d features is too large (over %d values): lower Options.BatchRows", rows, p.features, MaxBatchValues)
	}
	x := make([]float64, rows*p.features)
	for r, s := range p.starts {
		e := len(p.idx)
		if r+1 < rows {
			e = p.starts[r+1]
		}
		for i := s; i < e; i++ {
			x[r*p.features+int(p.idx[i])-1] = p.val[i]
		}
	}
	return &elastic.Batch{X: x, Cols: p.features, Y: p.y}, nil
}
