package spec

import (
	"fmt"
	"math"
	"strings"

	"go.yaml.in/yaml/v3"
)

const hpExample = "a definition like {type: float, min: 0.001, max: 0.1} or a constant value"

// hyperparameters reads the hyperparameters mapping into e and returns the
// declared names in file order (including ones whose definition is wrong).
// An empty value is an empty mapping, so every entry may be commented out.
func (p *parser) hyperparameters(n *yaml.Node, e *Experiment) []string {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil
	}
	f, ok := p.mapping(n, "hyperparameters", "a mapping of names to definitions", nil)
	if !ok {
		return nil
	}
	var declared []string
	for _, fl := range f.list {
		if !hpNamePattern.MatchString(fl.name) {
			p.at(fl.key, "hyperparameters", "%q is not a valid hyperparameter name; start with a letter or '_' and go on with letters, digits, '_', '.' or '-' (at most 64)", clip(fl.name))
			continue
		}
		declared = append(declared, fl.name)
		p.hpNodes[fl.name] = fl.val
		if h, ok := p.hyperparameter(fl.name, fl.val); ok {
			e.Hyperparameters[fl.name] = h
			e.Order = append(e.Order, fl.name)
		}
	}
	return declared
}

// hyperparameter reads one definition: a bare scalar (a const) or a mapping.
func (p *parser) hyperparameter(name string, n *yaml.Node) (*Hyperparameter, bool) {
	path := join("hyperparameters", name)
	h := &Hyperparameter{Name: name}
	switch {
	case n.Kind == yaml.SequenceNode:
		p.at(n, path, "expected %s, got a list; for choices write {type: categorical, values: [...]}", hpExample)
		return nil, false
	case n.Kind == yaml.ScalarNode && !isScalar(n):
		p.at(n, path, "expected %s, got %s", hpExample, describe(n))
		return nil, false
	case n.Kind == yaml.ScalarNode:
		v, ok := p.scalarValue(n, path)
		h.Type, h.Value = HPConst, v
		return h, ok
	}
	f, ok := p.mapping(n, path, hpExample, hpFields)
	if !ok {
		return nil, false
	}
	tn := f.get("type")
	if tn == nil {
		p.missing(f, join(path, "type"), "required; one of %s", strings.Join(hpTypes, ", "))
		return nil, false
	}
	ts, ok := p.str(tn, join(path, "type"))
	if !ok {
		return nil, false
	}
	h.Type = HPType(ts)
	allowed, known := hpTypeFields[h.Type]
	if !known {
		p.unknown(tn, join(path, "type"), "type", ts, hpTypes)
		return nil, false
	}
	good := true
	for _, fl := range f.list {
		if !contains(allowed, fl.name) {
			p.at(fl.key, join(path, fl.name), "not allowed for type %s (it takes %s)", h.Type, strings.Join(allowed[1:], ", "))
			good = false
		}
	}
	switch h.Type {
	case HPInt, HPFloat:
		good = p.numeric(h, f, path) && good
	case HPCategorical:
		good = p.categorical(h, f, path) && good
	case HPConst:
		if vn := f.get("value"); vn == nil {
			p.missing(f, join(path, "value"), "required for type const")
			good = false
		} else {
			v, ok := p.scalarValue(vn, join(path, "value"))
			h.Value = v
			good = ok && good
		}
	}
	return h, good
}

// numeric reads min, max, log, count and default of an int or float parameter.
func (p *parser) numeric(h *Hyperparameter, f *fields, path string) bool {
	good := true
	isInt := h.Type == HPInt
	// read returns a bound or default; int parameters need whole numbers.
	read := func(key string, required bool) (float64, *yaml.Node, bool) {
		n := f.get(key)
		if n == nil {
			if required {
				p.missing(f, join(path, key), "required for type %s", h.Type)
			}
			return 0, nil, false
		}
		v, ok := p.number(n, join(path, key))
		if ok && isInt && (v != math.Trunc(v) || math.Abs(v) > maxExactInt) {
			p.at(n, join(path, key), "must be an integer for type int (got %s)", clip(n.Value))
			ok = false
		}
		if !ok {
			good = false
		}
		return v, n, ok
	}
	lo, loN, loOK := read("min", true)
	hi, hiN, hiOK := read("max", true)
	if loN == nil || hiN == nil {
		good = false
	}
	h.Min, h.Max = lo, hi
	if ln := f.get("log"); ln != nil {
		v, ok := p.boolean(ln, join(path, "log"))
		h.Log = v
		good = ok && good
	}
	if loOK && hiOK && hi <= lo {
		p.at(hiN, join(path, "max"), "must be > min (got %s <= %s)", clip(hiN.Value), clip(loN.Value))
		good = false
	}
	if loOK && h.Log && lo <= 0 {
		p.at(loN, join(path, "min"), "must be > 0 when log is true (got %s)", clip(loN.Value))
		good = false
	}
	if cn := f.get("count"); cn != nil {
		c, ok := p.intAtLeast(cn, join(path, "count"), 2)
		if ok && c > MaxCount {
			p.at(cn, join(path, "count"), "must be <= %d (got %d)", MaxCount, c)
			ok = false
		}
		h.Count = c
		good = ok && good
	}
	if d, dn, ok := read("default", false); ok {
		switch {
		case loOK && hiOK && (d < lo || d > hi):
			p.at(dn, join(path, "default"), "must be within min and max [%s, %s] (got %s)", clip(loN.Value), clip(hiN.Value), clip(dn.Value))
			good = false
		case isInt:
			h.Default = int64(d)
		default:
			h.Default = d
		}
	}
	return good
}

// categorical reads values and default of a categorical parameter.
func (p *parser) categorical(h *Hyperparameter, f *fields, path string) bool {
	vpath := join(path, "values")
	vn := f.get("values")
	switch {
	case vn == nil:
		p.missing(f, vpath, "required for type categorical; a list of choices like [relu, tanh]")
		return false
	case vn.Kind != yaml.SequenceNode:
		p.at(vn, vpath, "expected a list of choices like [relu, tanh], got %s", describe(vn))
		return false
	case len(vn.Content) == 0:
		p.at(vn, vpath, "must not be empty; list the choices, e.g. [relu, tanh]")
		return false
	}
	good := true
	var seen []*yaml.Node
	for i, en := range vn.Content {
		epath := fmt.Sprintf("%s[%d]", vpath, i)
		v, ok := p.scalarValue(en, epath)
		if !ok {
			good = false
			continue
		}
		dup := false
		for j, prev := range h.Values {
			if sameValue(prev, v) {
				p.at(en, epath, "duplicate value %s (first at line %d); each choice must appear once", clip(FormatValue(v)), seen[j].Line)
				dup, good = true, false
				break
			}
		}
		if !dup {
			h.Values = append(h.Values, v)
			seen = append(seen, en)
		}
	}
	if dn := f.get("default"); dn != nil {
		d, ok := p.scalarValue(dn, join(path, "default"))
		if !ok {
			return false
		}
		for _, v := range h.Values {
			if sameValue(v, d) {
				h.Default = v
				return good
			}
		}
		if good {
			p.at(dn, join(path, "default"), "must be one of the values %s (got %s)", formatList(h.Values), clip(FormatValue(d)))
		}
		return false
	}
	return good
}
