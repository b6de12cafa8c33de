package oip

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/virga-ml/virga/internal/serve"
)

// datatypes lists the protocol's datatypes in the order error messages name them.
var datatypes = []serve.Datatype{serve.Bool, serve.Uint8, serve.Uint16, serve.Uint32, serve.Uint64,
	serve.Int8, serve.Int16, serve.Int32, serve.Int64, serve.FP16, serve.FP32, serve.FP64, serve.Bytes}

// checkDatatype returns an error naming field unless dt is one of the protocol's datatypes.
func checkDatatype(field string, dt serve.Datatype) error {
	for _, d := range datatypes {
		if d == dt {
			return nil
		}
	}
	names := make([]string, len(datatypes))
	for i, d := range datatypes {
		names[i] = string(d)
	}
	return serve.Inputf(field, "unknown datatype %q (want one of %s)", dt, strings.Join(names, ", "))
}

// elemSize is the size in bytes of one element of dt; 0 for BYTES.
func elemSize(dt serve.Datatype) int {
	switch dt {
	case serve.Bool, serve.Uint8, serve.Int8:
		return 1
	case serve.Uint16, serve.Int16, serve.FP16:
		return 2
	case serve.Uint32, serve.Int32, serve.FP32:
		return 4
	case serve.Uint64, serve.Int64, serve.FP64:
		return 8
	}
	return 0
}

// elements returns how many elements shape holds, refusing a negative
// dimension or a count above limit (which no body could carry).
func elements(field string, shape []int64, limit int64) (int, error) {
	n := int64(1)
	for i, d := range shape {
		if d < 0 {
			return 0, serve.Inputf(field, "dimension %d is %d (want a non-negative size; -1 only appears in model metadata)", i, d)
		}
		if d != 0 && n > limit/d {
			return 0, serve.Inputf(field, "shape %s holds more elements than a request can carry (at most %d)", shapeString(shape), limit)
		}
		n *= d
	}
	if n > limit {
		return 0, serve.Inputf(field, "shape %s holds more elements than a request can carry (at most %d)", shapeString(shape), limit)
	}
	return int(n), nil
}

// shapeString writes a shape as [1,64].
func shapeString(shape []int64) string {
	b := make([]byte, 0, 2+4*len(shape))
	b = append(b, '[')
	for i, d := range shape {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, d, 10)
	}
	return string(append(b, ']'))
}

// dataLen is the number of elements in a Tensor's Data, or -1 if Data is
// not the Go type dt calls for.
func dataLen(dt serve.Datatype, data any) int {
	switch dt {
	case serve.Bool:
		return lenOf[bool](data)
	case serve.Uint8:
		return lenOf[uint8](data)
	case serve.Uint16, serve.FP16:
		return lenOf[uint16](data)
	case serve.Uint32:
		return lenOf[uint32](data)
	case serve.Uint64:
		return lenOf[uint64](data)
	case serve.Int8:
		return lenOf[int8](data)
	case serve.Int16:
		return lenOf[int16](data)
	case serve.Int32:
		return lenOf[int32](data)
	case serve.Int64:
		return lenOf[int64](data)
	case serve.FP32:
		return lenOf[float32](data)
	case serve.FP64:
		return lenOf[float64](data)
	case serve.Bytes:
		return lenOf[[]byte](data)
	}
	return -1
}

func lenOf[T any](data any) int {
	s, ok := data.([]T)
	if !ok {
		return -1
	}
	return len(s)
}

// checkOutput verifies a tensor the Service returned: a known datatype,
// Data of its Go type, and as many elements as its shape says.
func checkOutput(t *serve.Tensor) error {
	if err := checkDatatype("", t.Datatype); err != nil {
		return fmt.Errorf("output %q: %w", t.Name, err)
	}
	n := dataLen(t.Datatype, t.Data)
	if n < 0 {
		return fmt.Errorf("output %q: data of Go type %T for datatype %s", t.Name, t.Data, t.Datatype)
	}
	want, err := elements("", t.Shape, math.MaxInt32)
	if err != nil {
		return fmt.Errorf("output %q: %w", t.Name, err)
	}
	if n != want {
		return fmt.Errorf("output %q: %d values for shape %s (%d expected)", t.Name, n, shapeString(t.Shape), want)
	}
	return nil
}

// f32ToF16 converts to IEEE 754 half precision, rounding to nearest even.
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	switch {
	case exp == 0xff: // Inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp-127 > 15: // overflow
		return sign | 0x7c00
	case exp-127 >= -14: // normal
		e := uint32(exp-127+15) << 10
		m := mant >> 13
		h := e | m
		rest := mant & 0x1fff
		if rest > 0x1000 || rest == 0x1000 && m&1 == 1 {
			h++ // may carry into the exponent, up to Inf: correct
		}
		return sign | uint16(h)
	case exp-127 >= -25: // subnormal
		mant |= 0x800000
		shift := uint32(-14 - (exp - 127) + 13)
		m := mant >> shift
		rest := mant & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rest > half || rest == half && m&1 == 1 {
			m++
		}
		return sign | uint16(m)
	}
	return sign
}

// f16ToF32 converts from IEEE 754 half precision.
func f16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		f := float32(mant) / (1 << 24)
		if sign != 0 {
			return -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}
