package oip

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/virga-ml/virga/internal/serve"
)

// decodeRaw reads a tensor of n elements of dt from its raw contents, as the
// protocol lays them out: flat, row-major, without padding, each element
// little-endian (as Triton sends them); BOOL one byte, 0 or 1; BYTES each
// element a 4-byte little-endian length and that many bytes.
func decodeRaw(f string, dt serve.Datatype, shape []int64, n int, raw []byte) (any, error) {
	if dt == serve.Bytes {
		return decodeRawBytes(f, shape, n, raw)
	}
	size := elemSize(dt)
	if size == 0 {
		return nil, checkDatatype(f, dt)
	}
	if len(raw) != n*size {
		return nil, serve.Inputf(f, "%d bytes for shape %s of %s (%d expected: %d values of %d bytes)", len(raw), shapeString(shape), dt, n*size, n, size)
	}
	if littleEndian {
		// The host lays numbers out as the protocol does: one copy.
		switch dt {
		case serve.Uint16, serve.FP16:
			return fromRaw[uint16](raw, n), nil
		case serve.Int16:
			return fromRaw[int16](raw, n), nil
		case serve.Uint32:
			return fromRaw[uint32](raw, n), nil
		case serve.Int32:
			return fromRaw[int32](raw, n), nil
		case serve.FP32:
			return fromRaw[float32](raw, n), nil
		case serve.Uint64:
			return fromRaw[uint64](raw, n), nil
		case serve.Int64:
			return fromRaw[int64](raw, n), nil
		case serve.FP64:
			return fromRaw[float64](raw, n), nil
		}
	}
	le := binary.LittleEndian
	switch dt {
	case serve.Bool:
		out := make([]bool, n)
		for i, b := range raw {
			if b > 1 {
				return nil, serve.Inputf(f, "byte %d is %d, not a BOOL value (want 0 or 1)", i, b)
			}
			out[i] = b == 1
		}
		return out, nil
	case serve.Uint8:
		return append([]uint8(nil), raw...), nil
	case serve.Int8:
		out := make([]int8, n)
		for i, b := range raw {
			out[i] = int8(b)
		}
		return out, nil
	case serve.Uint16, serve.FP16:
		out := make([]uint16, n)
		for i := range out {
			out[i] = le.Uint16(raw[2*i:])
		}
		return out, nil
	case serve.Int16:
		out := make([]int16, n)
		for i := range out {
			out[i] = int16(le.Uint16(raw[2*i:]))
		}
		return out, nil
	case serve.Uint32:
		out := make([]uint32, n)
		for i := range out {
			out[i] = le.Uint32(raw[4*i:])
		}
		return out, nil
	case serve.Int32:
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(le.Uint32(raw[4*i:]))
		}
		return out, nil
	case serve.FP32:
		out := make([]float32, n)
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		}
		return out, nil
	case serve.Uint64:
		out := make([]uint64, n)
		for i := range out {
			out[i] = le.Uint64(raw[8*i:])
		}
		return out, nil
	case serve.Int64:
		out := make([]int64, n)
		for i := range out {
			out[i] = int64(le.Uint64(raw[8*i:]))
		}
		return out, nil
	case serve.FP64:
		out := make([]float64, n)
		for i := range out {
			out[i] = math.Float64frombits(le.Uint64(raw[8*i:]))
		}
		return out, nil
	}
	return nil, checkDatatype(f, dt)
}

// decodeRawBytes reads n length-prefixed BYTES elements, which must fill raw exactly.
func decodeRawBytes(f string, shape []int64, n int, raw []byte) ([][]byte, error) {
	if n > len(raw)/4 {
		return nil, serve.Inputf(f, "%d bytes cannot hold the %d BYTES elements of shape %s (each takes a 4-byte length first)", len(raw), n, shapeString(shape))
	}
	out := make([][]byte, n)
	off := 0
	for i := range out {
		if len(raw)-off < 4 {
			return nil, serve.Inputf(f, "ends at element %d of %d (shape %s): want a 4-byte length at byte %d", i, n, shapeString(shape), off)
		}
		l := int64(binary.LittleEndian.Uint32(raw[off:]))
		off += 4
		if l > int64(len(raw)-off) {
			return nil, serve.Inputf(f, "element %d claims %d bytes at byte %d, but only %d remain", i, l, off, len(raw)-off)
		}
		out[i] = raw[off : off+int(l) : off+int(l)]
		off += int(l)
	}
	if off != len(raw) {
		return nil, serve.Inputf(f, "%d bytes left after the %d BYTES elements of shape %s (send exactly the elements the shape holds)", len(raw)-off, n, shapeString(shape))
	}
	return out, nil
}

// encodeRaw lays a tensor's values out as decodeRaw reads them.
func encodeRaw(dt serve.Datatype, data any) []byte {
	if dt == serve.Uint8 {
		return data.([]uint8)
	}
	return appendRaw(make([]byte, 0, rawSize(dt, data)), dt, data)
}

// rawSize is the length of a tensor's raw layout.
func rawSize(dt serve.Datatype, data any) int {
	if dt == serve.Bytes {
		n := 0
		for _, x := range data.([][]byte) {
			n += 4 + len(x)
		}
		return n
	}
	return elemSize(dt) * dataLen(dt, data)
}

// littleEndian: the host lays numbers out little-endian, as raw contents
// are, so they copy as bytes.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// number is an element type whose raw layout, on a little-endian host, is
// its memory.
type number interface {
	uint16 | int16 | uint32 | int32 | float32 | uint64 | int64 | float64
}

// fromRaw is raw, n elements' bytes, as a []T (a little-endian host only):
// raw's own memory when it is aligned for T, no copy (the tensor shares
// the request's memory, which the caller keeps until the engine's Infer
// returns), else a copy.
func fromRaw[T number](raw []byte, n int) []T {
	if n == 0 {
		return []T{}
	}
	var zero T
	p := unsafe.Pointer(unsafe.SliceData(raw))
	if uintptr(p)%unsafe.Alignof(zero) == 0 {
		return unsafe.Slice((*T)(p), n)
	}
	out := make([]T, n)
	copy(asBytes(out), raw)
	return out
}

// asBytes is v's memory as bytes.
func asBytes[T number](v []T) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), len(v)*int(unsafe.Sizeof(v[0])))
}

// appendRaw appends a tensor's raw layout to out.
func appendRaw(out []byte, dt serve.Datatype, data any) []byte {
	if littleEndian {
		switch v := data.(type) {
		case []uint16:
			return append(out, asBytes(v)...)
		case []int16:
			return append(out, asBytes(v)...)
		case []uint32:
			return append(out, asBytes(v)...)
		case []int32:
			return append(out, asBytes(v)...)
		case []float32:
			return append(out, asBytes(v)...)
		case []uint64:
			return append(out, asBytes(v)...)
		case []int64:
			return append(out, asBytes(v)...)
		case []float64:
			return append(out, asBytes(v)...)
		}
	}
	le := binary.LittleEndian
	switch dt {
	case serve.Bool:
		v := data.([]bool)
		for _, b := range v {
			if b {
				out = append(out, 1)
			} else {
				out = append(out, 0)
			}
		}
		return out
	case serve.Uint8:
		return append(out, data.([]uint8)...)
	case serve.Int8:
		v := data.([]int8)
		for _, x := range v {
			out = append(out, byte(x))
		}
		return out
	case serve.Uint16, serve.FP16:
		v := data.([]uint16)
		for _, x := range v {
			out = le.AppendUint16(out, x)
		}
		return out
	case serve.Int16:
		v := data.([]int16)
		for _, x := range v {
			out = le.AppendUint16(out, uint16(x))
		}
		return out
	case serve.Uint32:
		v := data.([]uint32)
		for _, x := range v {
			out = le.AppendUint32(out, x)
		}
		return out
	case serve.Int32:
		v := data.([]int32)
		for _, x := range v {
			out = le.AppendUint32(out, uint32(x))
		}
		return out
	case serve.FP32:
		v := data.([]float32)
		for _, x := range v {
			out = le.AppendUint32(out, math.Float32bits(x))
		}
		return out
	case serve.Uint64:
		v := data.([]uint64)
		for _, x := range v {
			out = le.AppendUint64(out, x)
		}
		return out
	case serve.Int64:
		v := data.([]int64)
		for _, x := range v {
			out = le.AppendUint64(out, uint64(x))
		}
		return out
	case serve.FP64:
		v := data.([]float64)
		for _, x := range v {
			out = le.AppendUint64(out, math.Float64bits(x))
		}
		return out
	case serve.Bytes:
		for _, x := range data.([][]byte) {
			out = le.AppendUint32(out, uint32(len(x)))
			out = append(out, x...)
		}
		return out
	}
	return out
}
