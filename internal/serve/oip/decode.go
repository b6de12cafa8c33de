package oip

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"unsafe"

	"github.com/virga-ml/virga/internal/serve"
)

// inputJSON is the protocol's $request_input; Data is the raw text of
// "data", decoded by decodeData once the datatype and shape are known.
type inputJSON struct {
	Name       string                     `json:"name"`
	Shape      []int64                    `json:"shape"`
	Datatype   serve.Datatype             `json:"datatype"`
	Parameters map[string]json.RawMessage `json:"parameters"`
	Data       json.RawMessage            `json:"data"`
}

// outputJSON is the protocol's $request_output.
type outputJSON struct {
	Name       string                     `json:"name"`
	Parameters map[string]json.RawMessage `json:"parameters"`
}

// decodeInfer decodes an $inference_request body for model (and version).
// Every error is a *serve.InputError naming the field at fault (or the
// offset of malformed JSON) and what would be right.
//
// It walks the body with lexer rather than through encoding/json's
// reflection, and reads each input's data once, straight into the
// datatype's Go slice: this is on every request's path
// (BenchmarkDecodeInfer). The small fields go through encoding/json.
func decodeInfer(body []byte, model, version string) (*serve.Request, error) {
	r, _, err := decodeInferBody(body, -1, model, version, nil)
	return r, err
}

// binaryOutputs says which outputs to answer as binary data (Triton's
// binary tensor data extension): the request's binary_data_output, unless
// the output's own binary_data says otherwise; and which to write into a
// shared-memory region instead (shm).
type binaryOutputs struct {
	all  bool
	each map[string]bool
	shm  map[string]shmRef
	// bufs hold the inputs read from shared memory: give them back with
	// putShmBufs once the Service's Infer has returned.
	bufs []*[]byte
}

func (b binaryOutputs) binary(name string) bool {
	if _, ok := b.shm[name]; ok {
		return false
	}
	if v, ok := b.each[name]; ok {
		return v
	}
	return b.all
}

// decodeInferBody decodes an inference request body whose first jsonLen
// bytes are the JSON object and the rest the binary data of the inputs
// that give a binary_data_size, in their order (Triton's binary tensor
// data extension, announced by the Inference-Header-Content-Length
// header); jsonLen < 0 means the body is JSON only.
//
// Inputs and outputs may name regions of shm (nil: none are served).
func decodeInferBody(body []byte, jsonLen int, model, version string, shm *SharedMemory) (*serve.Request, binaryOutputs, error) {
	var bo binaryOutputs
	var bin []byte
	if jsonLen >= 0 {
		if jsonLen > len(body) {
			return nil, bo, serve.Inputf("Inference-Header-Content-Length", "%d is more than the body's %d bytes", jsonLen, len(body))
		}
		body, bin = body[:jsonLen], body[jsonLen:]
	}
	r, bo, err := decodeInferJSON(body, bin, jsonLen >= 0, model, version, shm)
	return r, bo, err
}

func decodeInferJSON(body, bin []byte, hasBinary bool, model, version string, shm *SharedMemory) (*serve.Request, binaryOutputs, error) {
	var bo binaryOutputs
	l := &lexer{b: body}
	if l.ws(); l.i == len(body) {
		return nil, bo, serve.Inputf("request body", "empty: want a JSON object (an inference request)")
	}
	r := &serve.Request{Model: model, Version: version}
	var rawParams map[string]json.RawMessage
	var inputs []inputJSON
	var outputs []outputJSON
	err := l.object(func(key string) error {
		switch key {
		case "model_name", "model_version": // Triton's examples send them; the path decides
			var v string
			if err := l.field(key, &v); err != nil {
				return err
			}
			if want := map[string]string{"model_name": model, "model_version": version}[key]; v != "" && want != "" && v != want {
				return serve.Inputf(key, "%q, but the path names %q", v, want)
			}
			return nil
		case "id":
			return l.field("id", &r.ID)
		case "parameters":
			return l.field("parameters", &rawParams)
		case "inputs":
			if l.peek() == 'n' {
				return l.literal("null")
			}
			return l.array(func(i int) error {
				inputs = append(inputs, inputJSON{})
				return l.input("inputs["+strconv.Itoa(i)+"]", &inputs[i])
			})
		case "outputs":
			if l.peek() == 'n' {
				return l.literal("null")
			}
			return l.array(func(i int) error {
				outputs = append(outputs, outputJSON{})
				return l.output("outputs["+strconv.Itoa(i)+"]", &outputs[i])
			})
		}
		return l.unknown("request body", key, "an inference request has id, parameters, inputs and outputs")
	})
	if err != nil {
		return nil, bo, err
	}
	if l.ws(); l.i < len(body) {
		return nil, bo, serve.Inputf("request body", "data after the JSON object at offset %d: %q (send one JSON object, or give the JSON's length in the Inference-Header-Content-Length header if binary data follows)", l.i, clip(body[l.i:], 32))
	}
	params, err := jsonParams("parameters", rawParams)
	if err != nil {
		return nil, bo, err
	}
	if err := applyParams(r, "parameters", params); err != nil {
		return nil, bo, err
	}
	if p, ok := params["binary_data_output"]; ok {
		if p.kind != kindBool {
			return nil, bo, serve.Inputf("parameters.binary_data_output", "want true or false, got %s", p)
		}
		bo.all = p.b
	}
	// A JSON value takes at least two bytes ("0,"), which bounds what a shape may claim.
	limit := int64(len(body)/2 + 1)
	r.Inputs = make([]serve.Tensor, len(inputs))
	seen := make(map[string]int, len(inputs))
	off := 0 // into bin
	for i := range inputs {
		x := &inputs[i]
		f := "inputs[" + strconv.Itoa(i) + "]"
		if err := checkInputHeader(f, x.Name, x.Datatype, x.Shape != nil, seen, i); err != nil {
			return nil, bo, err
		}
		tp, err := jsonParams(f+".parameters", x.Parameters)
		if err != nil {
			return nil, bo, err
		}
		if err := checkTensorParams(f+".parameters", tp); err != nil {
			return nil, bo, err
		}
		var data any
		ref, inShm, err := sharedMemoryRef(f+".parameters", tp)
		if err != nil {
			return nil, bo, err
		}
		if inShm {
			if _, ok := tp["binary_data_size"]; ok {
				return nil, bo, serve.Inputf(f+".parameters.binary_data_size", "given with shared_memory_region (send the tensor's data one way)")
			}
			if x.Data != nil {
				return nil, bo, serve.Inputf(f+".data", "given with shared_memory_region (send the tensor's data one way)")
			}
			n, err := elements(f+".shape", x.Shape, 1<<40)
			if err != nil {
				return nil, bo, err
			}
			var buf *[]byte
			if data, buf, err = shm.read(f, ref, x.Datatype, x.Shape, n); err != nil {
				putShmBufs(bo.bufs)
				return nil, bo, err
			}
			bo.bufs = append(bo.bufs, buf)
		} else if p, ok := tp["binary_data_size"]; ok {
			pf := f + ".parameters.binary_data_size"
			if !hasBinary {
				return nil, bo, serve.Inputf(pf, "binary data needs the Inference-Header-Content-Length header (the length of the JSON object before it)")
			}
			if x.Data != nil {
				return nil, bo, serve.Inputf(f+".data", "given with binary_data_size (send the tensor's data one way)")
			}
			size, err := p.nonNegInt(pf, uint64(len(bin)-off))
			if err != nil {
				return nil, bo, serve.Inputf(pf, "want a byte count of at most %d (the binary data left after the inputs before), got %s", len(bin)-off, p)
			}
			n, err := elements(f+".shape", x.Shape, 1<<40)
			if err != nil {
				return nil, bo, err
			}
			chunk := bin[off : off+int(size)]
			off += int(size)
			if data, err = decodeRaw(f+" (binary data)", x.Datatype, x.Shape, n, chunk); err != nil {
				return nil, bo, err
			}
		} else {
			n, err := elements(f+".shape", x.Shape, limit)
			if err != nil {
				return nil, bo, err
			}
			if x.Data == nil || string(x.Data) == "null" {
				return nil, bo, serve.Inputf(f+".data", "missing: want the tensor's %d values as a JSON array", n)
			}
			if data, err = decodeData(f+".data", x.Datatype, x.Shape, n, x.Data); err != nil {
				return nil, bo, err
			}
		}
		r.Inputs[i] = serve.Tensor{Name: x.Name, Datatype: x.Datatype, Shape: x.Shape, Data: data}
	}
	if off != len(bin) {
		return nil, bo, serve.Inputf("request body", "%d bytes of binary data after the inputs' binary_data_size bytes (%d) (Inference-Header-Content-Length gives the JSON object's length, the inputs' binary_data_size the rest)", len(bin)-off, off)
	}
	if len(outputs) > 0 {
		r.Outputs = make([]string, len(outputs))
		seenOut := make(map[string]int, len(outputs))
		for i, o := range outputs {
			f := "outputs[" + strconv.Itoa(i) + "]"
			if err := checkOutputRequest(f, o.Name, seenOut, i); err != nil {
				return nil, bo, err
			}
			op, err := jsonParams(f+".parameters", o.Parameters)
			if err != nil {
				return nil, bo, err
			}
			if err := checkTensorParams(f+".parameters", op); err != nil {
				return nil, bo, err
			}
			ref, inShm, err := sharedMemoryRef(f+".parameters", op)
			if err != nil {
				return nil, bo, err
			}
			if inShm {
				if _, ok := op["binary_data"]; ok {
					return nil, bo, serve.Inputf(f+".parameters.binary_data", "given with shared_memory_region (an output goes one way)")
				}
				if err := shm.checkRef(f+".parameters", ref); err != nil {
					return nil, bo, err
				}
				if bo.shm == nil {
					bo.shm = make(map[string]shmRef)
				}
				bo.shm[o.Name] = ref
			}
			if p, ok := op["binary_data"]; ok {
				if p.kind != kindBool {
					return nil, bo, serve.Inputf(f+".parameters.binary_data", "want true or false, got %s", p)
				}
				if bo.each == nil {
					bo.each = make(map[string]bool)
				}
				bo.each[o.Name] = p.b
			}
			r.Outputs[i] = o.Name
		}
	}
	return r, bo, nil
}

// input reads one $request_input object.
func (l *lexer) input(f string, x *inputJSON) error {
	return l.object(func(key string) error {
		switch key {
		case "name":
			return l.field(f+".name", &x.Name)
		case "shape":
			return l.field(f+".shape", &x.Shape)
		case "datatype":
			return l.field(f+".datatype", &x.Datatype)
		case "parameters":
			return l.field(f+".parameters", &x.Parameters)
		case "data":
			v, err := l.value()
			x.Data = v
			return err
		}
		return l.unknown(f, key, "an input has name, shape, datatype, parameters and data")
	})
}

// output reads one $request_output object.
func (l *lexer) output(f string, o *outputJSON) error {
	return l.object(func(key string) error {
		switch key {
		case "name":
			return l.field(f+".name", &o.Name)
		case "parameters":
			return l.field(f+".parameters", &o.Parameters)
		}
		return l.unknown(f, key, "an output has name and parameters")
	})
}

// unknown is the error for the unknown field key just read.
func (l *lexer) unknown(f, key, what string) error {
	return serve.Inputf(f, "unknown field %q at offset %d (%s)", key, l.keyAt, what)
}

// field reads a small value with encoding/json into v, naming f if it is
// not of v's type.
func (l *lexer) field(f string, v any) error {
	raw, err := l.value()
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return serve.Inputf(f, "want %s, got %s", typeWords(reflect.TypeOf(v).Elem()), clip(raw, 40))
		}
		return serve.Inputf(f, "%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// typeWords names what a Go type takes in JSON words.
func typeWords(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Slice:
		return kindWord(t) + " of " + strings.TrimPrefix(strings.TrimPrefix(kindWord(t.Elem()), "an "), "a ") + "s"
	case reflect.Map:
		return "an object"
	}
	return kindWord(t)
}

func unquoteEscaped(q []byte) (string, bool) {
	var s string
	return s, json.Unmarshal(q, &s) == nil
}

// checkInputHeader checks an input's name, datatype and that it has a shape.
func checkInputHeader(f, name string, dt serve.Datatype, hasShape bool, seen map[string]int, i int) error {
	if name == "" {
		return serve.Inputf(f+".name", "missing: want the name of one of the model's inputs")
	}
	if j, dup := seen[name]; dup {
		return serve.Inputf(f+".name", "input %q is also inputs[%d] (each input is given once)", name, j)
	}
	seen[name] = i
	if dt == "" {
		return serve.Inputf(f+".datatype", "missing: want the input's datatype, e.g. \"FP32\"")
	}
	if err := checkDatatype(f+".datatype", dt); err != nil {
		return err
	}
	if !hasShape {
		return serve.Inputf(f+".shape", "missing: want the input's shape, e.g. [1, 64] ([] for a scalar)")
	}
	return nil
}

// checkOutputRequest checks a requested output's name.
func checkOutputRequest(f, name string, seen map[string]int, i int) error {
	if name == "" {
		return serve.Inputf(f+".name", "missing: want the name of one of the model's outputs")
	}
	if j, dup := seen[name]; dup {
		return serve.Inputf(f+".name", "output %q is also outputs[%d] (each output is asked for once)", name, j)
	}
	seen[name] = i
	return nil
}

// unmarshalStrict decodes one JSON value from body into v, refusing unknown
// fields, and turns encoding/json's errors into InputErrors that say where
// and what would be right.
func unmarshalStrict(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return serve.Inputf("request body", "empty: want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if rest := bytes.TrimLeft(body[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
			return serve.Inputf("request body", "data after the JSON object at offset %d: %q (send one JSON object)", len(body)-len(rest), clip(rest, 32))
		}
		return nil
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return serve.Inputf("request body", "malformed JSON at offset %d: %s", se.Offset-1, strings.TrimPrefix(se.Error(), "json: "))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return serve.Inputf("request body", "the JSON value ends early, at offset %d", len(body))
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "request body"
		}
		return serve.Inputf(field, "want %s, got a JSON %s (at offset %d)", kindWord(te.Type), te.Value, te.Offset)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return serve.Inputf("request body", "unknown field %s at offset %d (an inference request has id, parameters, inputs and outputs; an input has name, shape, datatype, parameters and data; an output has name and parameters)",
			strings.TrimPrefix(err.Error(), "json: unknown field "), dec.InputOffset())
	}
	return serve.Inputf("request body", "%s", strings.TrimPrefix(err.Error(), "json: "))
}

// kindWord names what a Go type takes in JSON words.
func kindWord(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Int:
		return "an integer"
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uint:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return t.String()
}

// clip returns b's first n bytes.
func clip(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// jsonParams decodes a $parameters object: each value a string, number or boolean.
func jsonParams(field string, raw map[string]json.RawMessage) (map[string]param, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	out := make(map[string]param, len(raw))
	for k, v := range raw {
		v = bytes.TrimSpace(v)
		var p param
		switch {
		case len(v) == 0 || v[0] == '{' || v[0] == '[' || string(v) == "null":
			return nil, serve.Inputf(field+"."+k, "want a string, number or boolean, got %s", clip(v, 32))
		case v[0] == '"':
			if err := json.Unmarshal(v, &p.s); err != nil {
				return nil, serve.Inputf(field+"."+k, "%v", err)
			}
			p.kind = kindString
		case string(v) == "true" || string(v) == "false":
			p.kind, p.b = kindBool, string(v) == "true"
		default:
			s := string(v)
			if i, err := strconv.ParseInt(s, 10, 64); err == nil {
				p.kind, p.i = kindInt, i
			} else if u, err := strconv.ParseUint(s, 10, 64); err == nil {
				p.kind, p.u = kindUint, u
			} else if f, err := strconv.ParseFloat(s, 64); err == nil {
				p.kind, p.f = kindFloat, f
			} else {
				return nil, serve.Inputf(field+"."+k, "%s is not a number", clip(v, 32))
			}
		}
		out[k] = p
	}
	return out, nil
}

// decodeData decodes a tensor's "data": a JSON array of n values of dt, flat
// in row-major order or nested as the shape's dimensions (nesting is
// flattened; only the count of values must match the shape).
//
// It walks the bytes itself rather than through encoding/json's reflection:
// the body was already checked to be valid JSON, and this is on every
// request's path (BenchmarkDecodeInfer).
func decodeData(field string, dt serve.Datatype, shape []int64, n int, raw []byte) (any, error) {
	switch dt {
	case serve.Bool:
		return scanValues(field, dt, shape, n, raw, parseBool)
	case serve.Uint8:
		return scanValues(field, dt, shape, n, raw, parseUint[uint8](8))
	case serve.Uint16:
		return scanValues(field, dt, shape, n, raw, parseUint[uint16](16))
	case serve.Uint32:
		return scanValues(field, dt, shape, n, raw, parseUint[uint32](32))
	case serve.Uint64:
		return scanValues(field, dt, shape, n, raw, parseUint[uint64](64))
	case serve.Int8:
		return scanValues(field, dt, shape, n, raw, parseInt[int8](8))
	case serve.Int16:
		return scanValues(field, dt, shape, n, raw, parseInt[int16](16))
	case serve.Int32:
		return scanValues(field, dt, shape, n, raw, parseInt[int32](32))
	case serve.Int64:
		return scanValues(field, dt, shape, n, raw, parseInt[int64](64))
	case serve.FP16:
		return scanValues(field, dt, shape, n, raw, func(tok []byte) (uint16, string) {
			f, bad := parseFloat(tok, 32)
			return f32ToF16(float32(f)), bad
		})
	case serve.FP32:
		return scanValues(field, dt, shape, n, raw, func(tok []byte) (float32, string) {
			f, bad := parseFloat(tok, 32)
			return float32(f), bad
		})
	case serve.FP64:
		return scanValues(field, dt, shape, n, raw, func(tok []byte) (float64, string) { return parseFloat(tok, 64) })
	case serve.Bytes:
		return scanValues(field, dt, shape, n, raw, parseBytes)
	}
	return nil, checkDatatype(field, dt)
}

// scanValues collects the leaf values of the JSON array raw (valid JSON) with
// parse, which returns what was wanted if a token is not a value of the type.
func scanValues[T any](field string, dt serve.Datatype, shape []int64, n int, raw []byte, parse func(tok []byte) (T, string)) ([]T, error) {
	if len(raw) == 0 || raw[0] != '[' {
		return nil, serve.Inputf(field, "want a JSON array of %d %s values, got %s", n, dt, clip(raw, 32))
	}
	// Allocate as values come rather than as the shape claims, up to a
	// first 64Ki: a shape cannot make the server allocate more than the
	// body's values take.
	out := make([]T, 0, min(n, 1<<16))
	count := 0
	for i := 0; i < len(raw); {
		c := raw[i]
		switch c {
		case ' ', '\t', '\n', '\r', ',', '[', ']':
			i++
			continue
		case '{':
			return nil, serve.Inputf(field+"["+strconv.Itoa(count)+"]", "an object is not a %s value", dt)
		}
		j := i + 1
		if c == '"' {
			for j < len(raw) && raw[j] != '"' {
				if raw[j] == '\\' {
					j++
				}
				j++
			}
			j++ // the closing quote
		} else {
			for j < len(raw) && raw[j] != ',' && raw[j] != ']' && raw[j] != ' ' && raw[j] != '\n' && raw[j] != '\t' && raw[j] != '\r' {
				j++
			}
		}
		if count < n {
			v, want := parse(raw[i:j])
			if want != "" {
				return nil, serve.Inputf(field+"["+strconv.Itoa(count)+"]", "%s is not a %s value (want %s)", clip(raw[i:j], 40), dt, want)
			}
			out = append(out, v)
		}
		count++
		i = j
	}
	if count != n {
		return nil, serve.Inputf(field, "%d values for shape %s (%d expected)", count, shapeString(shape), n)
	}
	return out, nil
}

// str views b as a string without copying; the string must not outlive the call.
func str(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

func parseBool(tok []byte) (bool, string) {
	switch string(tok) {
	case "true":
		return true, ""
	case "false":
		return false, ""
	}
	return false, "true or false"
}

func parseInt[T int8 | int16 | int32 | int64](bits int) func([]byte) (T, string) {
	want := fmt.Sprintf("an integer from %d to %d", int64(-1)<<(bits-1), int64(1)<<(bits-1)-1) // wraps to MaxInt64 at 64
	return func(tok []byte) (T, string) {
		v, err := strconv.ParseInt(str(tok), 10, bits)
		if err != nil {
			return 0, want
		}
		return T(v), ""
	}
}

func parseUint[T uint8 | uint16 | uint32 | uint64](bits int) func([]byte) (T, string) {
	want := fmt.Sprintf("an integer from 0 to %d", uint64(1)<<(bits-1)*2-1)
	return func(tok []byte) (T, string) {
		v, err := strconv.ParseUint(str(tok), 10, bits)
		if err != nil {
			return 0, want
		}
		return T(v), ""
	}
}

// parseFloat parses a JSON number, or one of the strings "NaN", "Infinity"
// and "-Infinity" (which is how responses carry them).
func parseFloat(tok []byte, bits int) (float64, string) {
	const want = `a number, or "NaN", "Infinity", "-Infinity"`
	if len(tok) == 0 {
		return 0, want
	}
	if tok[0] == '"' {
		switch string(tok) {
		case `"NaN"`:
			return math.NaN(), ""
		case `"Infinity"`:
			return math.Inf(1), ""
		case `"-Infinity"`:
			return math.Inf(-1), ""
		}
		return 0, want
	}
	if c := tok[0]; c != '-' && (c < '0' || c > '9') {
		return 0, want // true, false, null
	}
	if f, ok := fastFloat(tok, bits); ok {
		return f, ""
	}
	f, err := strconv.ParseFloat(str(tok), bits)
	if err != nil {
		if bits == 32 {
			return 0, "a number within FP32's range (about ±3.4e38)"
		}
		return 0, "a number within FP64's range"
	}
	return f, ""
}

func parseBytes(tok []byte) ([]byte, string) {
	if len(tok) < 2 || tok[0] != '"' {
		return nil, "a JSON string"
	}
	inner := tok[1 : len(tok)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return bytes.Clone(inner), ""
	}
	var s string
	if err := json.Unmarshal(tok, &s); err != nil {
		return nil, "a JSON string"
	}
	return []byte(s), ""
}

var (
	pow10f32 = [...]float32{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10}
	pow10f64 = [...]float64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
		1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}
)

// fastFloat parses a JSON number (syntax already checked) whose decimal
// mantissa and power of ten are both exactly representable in the float
// type of bits, where one multiplication or division rounds correctly
// (Clinger's fast path, as strconv's own atof32exact/atof64exact); ok is
// false for any other, which strconv.ParseFloat then reads.
func fastFloat(tok []byte, bits int) (_ float64, ok bool) {
	if len(tok) == 0 {
		return 0, false
	}
	i, neg := 0, false
	if tok[0] == '-' {
		neg = true
		i++
	}
	var m uint64
	exp, digits := 0, 0
	for ; i < len(tok) && isDigit(tok[i]); i++ {
		m = m*10 + uint64(tok[i]-'0')
		if m != 0 {
			digits++
		}
	}
	if i < len(tok) && tok[i] == '.' {
		for i++; i < len(tok) && isDigit(tok[i]); i++ {
			m = m*10 + uint64(tok[i]-'0')
			if m != 0 {
				digits++
			}
			exp--
		}
	}
	if digits > 15 {
		return 0, false
	}
	if i < len(tok) { // an exponent
		if tok[i] != 'e' && tok[i] != 'E' || i+1 == len(tok) {
			return 0, false
		}
		i++
		eneg := false
		if tok[i] == '+' || tok[i] == '-' {
			eneg = tok[i] == '-'
			i++
		}
		e := 0
		for ; i < len(tok); i++ {
			if e > 1000 || !isDigit(tok[i]) {
				return 0, false
			}
			e = e*10 + int(tok[i]-'0')
		}
		if eneg {
			e = -e
		}
		exp += e
	}
	if bits == 32 {
		if m > 1<<24 || exp < -10 || exp > 10 {
			return 0, false
		}
		f := float32(m)
		if exp < 0 {
			f /= pow10f32[-exp]
		} else {
			f *= pow10f32[exp]
		}
		if neg {
			f = -f
		}
		return float64(f), true
	}
	if m > 1<<53 || exp < -22 || exp > 22 {
		return 0, false
	}
	f := float64(m)
	if exp < 0 {
		f /= pow10f64[-exp]
	} else {
		f *= pow10f64[exp]
	}
	if neg {
		f = -f
	}
	return f, true
}
