package oip

import (
	"math"
	"strconv"
	"time"

	"github.com/virga-ml/virga/internal/serve"
)

// param is one request parameter's value, from JSON or from gRPC's
// InferParameter.
type param struct {
	kind paramKind
	b    bool
	i    int64 // kindInt
	u    uint64
	f    float64
	s    string
}

type paramKind uint8

const (
	kindBool paramKind = iota + 1
	kindInt
	kindUint
	kindFloat
	kindString
)

func (p param) String() string {
	switch p.kind {
	case kindBool:
		return strconv.FormatBool(p.b)
	case kindInt:
		return strconv.FormatInt(p.i, 10)
	case kindUint:
		return strconv.FormatUint(p.u, 10)
	case kindFloat:
		return strconv.FormatFloat(p.f, 'g', -1, 64)
	}
	return strconv.Quote(p.s)
}

// nonNegInt returns the parameter as a non-negative integer no larger than max.
func (p param) nonNegInt(field string, max uint64) (uint64, error) {
	var v uint64
	switch {
	case p.kind == kindInt && p.i >= 0:
		v = uint64(p.i)
	case p.kind == kindUint:
		v = p.u
	case p.kind == kindFloat && p.f >= 0 && p.f == math.Trunc(p.f) && p.f <= float64(max):
		v = uint64(p.f)
	default:
		return 0, serve.Inputf(field, "want a non-negative integer, got %s", p)
	}
	if v > max {
		return 0, serve.Inputf(field, "%d is too large (at most %d)", v, max)
	}
	return v, nil
}

// unsupportedParams are parameters of Triton's that change what a request
// means and that Virga does not implement: refused rather than ignored.
var unsupportedParams = map[string]string{
	"sequence_id":    "sequence batching",
	"sequence_start": "sequence batching",
	"sequence_end":   "sequence batching",
	"classification": "the classification extension",
}

// maxTimeoutMicros bounds the timeout parameter (about 292 years would
// overflow a time.Duration; a day is plenty).
const maxTimeoutMicros = uint64(24 * time.Hour / time.Microsecond)

// applyParams reads the request-level parameters Virga takes into r:
//   - priority: non-negative integer, Triton's meaning: 0 is the default
//     level, 1 the highest, larger values lower; Virga's default is its
//     highest level, so 0 and 1 both map to Request.Priority 0 and p > 1 to p-1.
//   - timeout: non-negative integer, microseconds (0: the model's latency
//     objective).
//
// A parameter of unsupportedParams is refused; any other is ignored, as the
// protocol leaves parameters to each server.
func applyParams(r *serve.Request, field string, params map[string]param) error {
	for name, p := range params {
		f := field + "." + name
		switch name {
		case "priority":
			v, err := p.nonNegInt(f, math.MaxInt32)
			if err != nil {
				return err
			}
			r.Priority = max(int(v)-1, 0)
		case "timeout":
			v, err := p.nonNegInt(f, maxTimeoutMicros)
			if err != nil {
				return err
			}
			r.Timeout = time.Duration(v) * time.Microsecond
		default:
			if what, ok := unsupportedParams[name]; ok {
				return serve.Inputf(f, "%s is not supported by this server", what)
			}
		}
	}
	return nil
}

// checkTensorParams refuses the tensor-level parameters of unsupportedParams.
func checkTensorParams(field string, params map[string]param) error {
	for name := range params {
		if what, ok := unsupportedParams[name]; ok {
			return serve.Inputf(field+"."+name, "%s is not supported by this server", what)
		}
	}
	return nil
}
