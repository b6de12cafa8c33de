package oip

import (
	"encoding/json"
	"math"
	"strconv"

	"github.com/virga-ml/virga/internal/serve"
)

// appendInferResponse appends the protocol's $inference_response for r,
// and after it the binary data of the outputs bo asks for as binary;
// jsonLen is the length of the JSON object if binary data follows, else -1.
// Outputs were checked with checkOutput.
func appendInferResponse(b []byte, r *serve.Response, bo binaryOutputs) (_ []byte, jsonLen int) {
	start := len(b)
	anyBinary := false
	b = append(b, `{"model_name":`...)
	b = appendString(b, r.ModelName)
	if r.ModelVersion != "" {
		b = append(b, `,"model_version":`...)
		b = appendString(b, r.ModelVersion)
	}
	if r.ID != "" {
		b = append(b, `,"id":`...)
		b = appendString(b, r.ID)
	}
	b = append(b, `,"outputs":[`...)
	for i := range r.Outputs {
		t := &r.Outputs[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendString(b, t.Name)
		b = append(b, `,"datatype":`...)
		b = appendString(b, string(t.Datatype))
		b = append(b, `,"shape":[`...)
		for j, d := range t.Shape {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, d, 10)
		}
		if ref, ok := bo.shm[t.Name]; ok {
			b = append(b, `],"parameters":{"shared_memory_region":`...)
			b = appendString(b, ref.region)
			b = append(b, `,"shared_memory_byte_size":`...)
			b = strconv.AppendInt(b, int64(rawSize(t.Datatype, t.Data)), 10)
			if ref.offset != 0 {
				b = append(b, `,"shared_memory_offset":`...)
				b = strconv.AppendUint(b, ref.offset, 10)
			}
			b = append(b, "}}"...)
			continue
		}
		if bo.binary(t.Name) {
			anyBinary = true
			b = append(b, `],"parameters":{"binary_data_size":`...)
			b = strconv.AppendInt(b, int64(rawSize(t.Datatype, t.Data)), 10)
			b = append(b, "}}"...)
			continue
		}
		b = append(b, `],"data":`...)
		b = appendData(b, t.Datatype, t.Data)
		b = append(b, '}')
	}
	b = append(b, "]}\n"...)
	if !anyBinary {
		return b, -1
	}
	jsonLen = len(b) - start
	for i := range r.Outputs {
		if t := &r.Outputs[i]; bo.binary(t.Name) {
			b = appendRaw(b, t.Datatype, t.Data)
		}
	}
	return b, jsonLen
}

func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x7f || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendData appends a tensor's values as a flat JSON array.
func appendData(b []byte, dt serve.Datatype, data any) []byte {
	b = append(b, '[')
	switch dt {
	case serve.Bool:
		for i, v := range data.([]bool) {
			b = comma(b, i)
			b = strconv.AppendBool(b, v)
		}
	case serve.Uint8:
		b = appendUints(b, data.([]uint8))
	case serve.Uint16:
		b = appendUints(b, data.([]uint16))
	case serve.Uint32:
		b = appendUints(b, data.([]uint32))
	case serve.Uint64:
		b = appendUints(b, data.([]uint64))
	case serve.Int8:
		b = appendInts(b, data.([]int8))
	case serve.Int16:
		b = appendInts(b, data.([]int16))
	case serve.Int32:
		b = appendInts(b, data.([]int32))
	case serve.Int64:
		b = appendInts(b, data.([]int64))
	case serve.FP16:
		for i, v := range data.([]uint16) {
			b = comma(b, i)
			b = appendFloat(b, float64(f16ToF32(v)), 32)
		}
	case serve.FP32:
		for i, v := range data.([]float32) {
			b = comma(b, i)
			b = appendFloat(b, float64(v), 32)
		}
	case serve.FP64:
		for i, v := range data.([]float64) {
			b = comma(b, i)
			b = appendFloat(b, v, 64)
		}
	case serve.Bytes:
		for i, v := range data.([][]byte) {
			b = comma(b, i)
			b = appendString(b, string(v))
		}
	}
	return append(b, ']')
}

func comma(b []byte, i int) []byte {
	if i > 0 {
		return append(b, ',')
	}
	return b
}

func appendUints[T uint8 | uint16 | uint32 | uint64](b []byte, s []T) []byte {
	for i, v := range s {
		b = comma(b, i)
		b = strconv.AppendUint(b, uint64(v), 10)
	}
	return b
}

func appendInts[T int8 | int16 | int32 | int64](b []byte, s []T) []byte {
	for i, v := range s {
		b = comma(b, i)
		b = strconv.AppendInt(b, int64(v), 10)
	}
	return b
}

// appendFloat writes f as a JSON number, or as the string "NaN",
// "Infinity" or "-Infinity", which JSON numbers cannot express.
func appendFloat(b []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(b, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(b, `"-Infinity"`...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, bits)
}
