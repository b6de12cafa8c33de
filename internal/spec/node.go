package spec

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxProblems bounds the problems reported for one file; past it the parser
// stops collecting and says so.
const maxProblems = 50

// parser collects problems while it walks one file's node tree.
type parser struct {
	file string
	dir  string // absolute directory of the file, for workdir
	// hpNodes maps each declared hyperparameter to its definition, for positions.
	hpNodes map[string]*yaml.Node
	probs   []Problem
	more    bool // problems were dropped past maxProblems
}

// at records a problem at node n (nil for the whole file).
func (p *parser) at(n *yaml.Node, path, format string, args ...any) {
	if len(p.probs) >= maxProblems {
		p.more = true
		return
	}
	pr := Problem{File: p.file, Path: path, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		pr.Line, pr.Col = n.Line, n.Column
	}
	p.probs = append(p.probs, pr)
}

// err returns the collected problems as an *Error, or nil when there are none.
func (p *parser) err() error {
	if len(p.probs) == 0 {
		return nil
	}
	sortProblems(p.probs)
	if p.more {
		p.probs = append(p.probs, Problem{File: p.file,
			Msg: fmt.Sprintf("too many problems; stopped after %d (fix these and run again)", maxProblems)})
	}
	return &Error{Problems: p.probs}
}

// join appends a field name to a dotted path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// field is one key: value pair of a mapping.
type field struct {
	name     string
	key, val *yaml.Node
}

// fields holds a mapping's pairs in file order, duplicates and non-string keys removed.
type fields struct {
	node *yaml.Node
	list []field
	by   map[string]field
	// suggested holds the allowed keys some unknown key was reported as a
	// likely misspelling of ("did you mean min?").
	suggested map[string]bool
}

// missing reports a required field that f lacks, at the mapping, unless an
// unknown key was already reported as its misspelling: one mistake, one message.
func (p *parser) missing(f *fields, path, format string, args ...any) {
	key := path[strings.LastIndexByte(path, '.')+1:]
	if f.suggested[key] {
		return
	}
	p.at(f.node, path, format, args...)
}

// get returns the value of key, or nil.
func (f *fields) get(key string) *yaml.Node {
	if f == nil {
		return nil
	}
	if fl, ok := f.by[key]; ok {
		return fl.val
	}
	return nil
}

// mapping checks that n is a mapping, reports duplicate and non-scalar keys
// and keys outside allowed (with a did-you-mean suggestion), and returns its
// fields. what describes the expected value for the type error. allowed nil
// means any key is allowed (checked by the caller).
func (p *parser) mapping(n *yaml.Node, path, what string, allowed []string) (*fields, bool) {
	if n.Kind != yaml.MappingNode {
		p.at(n, path, "expected %s, got %s", what, describe(n))
		return nil, false
	}
	f := &fields{node: n, by: map[string]field{}}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!null" {
			p.at(k, path, "keys must be plain names, got %s", describe(k))
			continue
		}
		if prev, dup := f.by[k.Value]; dup {
			p.at(k, join(path, k.Value), "duplicate key (first at line %d); keep one", prev.key.Line)
			continue
		}
		if allowed != nil && !contains(allowed, k.Value) {
			if s := p.unknown(k, path, "field", k.Value, allowed); s != "" {
				if f.suggested == nil {
					f.suggested = map[string]bool{}
				}
				f.suggested[s] = true
			}
			continue
		}
		fl := field{name: k.Value, key: k, val: v}
		f.by[k.Value] = fl
		f.list = append(f.list, fl)
	}
	return f, true
}

// unknown reports an unknown name with a suggestion or the allowed list, and
// returns the suggestion ("" when there is none).
func (p *parser) unknown(n *yaml.Node, path, kind, name string, allowed []string) string {
	s := suggest(name, allowed)
	switch {
	case s != "":
		p.at(n, path, "unknown %s %q; did you mean %s?", kind, clip(name), s)
	case len(allowed) == 0:
		p.at(n, path, "unknown %s %q (none are allowed here)", kind, clip(name))
	default:
		p.at(n, path, "unknown %s %q (allowed: %s)", kind, clip(name), strings.Join(allowed, ", "))
	}
	return s
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// clip shortens long user text quoted in messages.
func clip(s string) string {
	const max = 40
	r := []rune(s)
	if len(r) > max {
		return string(r[:max]) + "..."
	}
	return s
}

// yamlFloat is the YAML 1.2 core schema's syntax of a decimal number.
var yamlFloat = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)

// outOfRange reports whether n is written as a number (plain, not quoted)
// whose magnitude is beyond a float64's, such as -1e400: YAML resolves it as
// a string, but the user wrote a number.
func outOfRange(n *yaml.Node) bool {
	const written = yaml.TaggedStyle | yaml.SingleQuotedStyle | yaml.DoubleQuotedStyle | yaml.LiteralStyle | yaml.FoldedStyle
	if n.Kind != yaml.ScalarNode || n.Style&written != 0 || n.ShortTag() != "!!str" || !yamlFloat.MatchString(n.Value) {
		return false
	}
	_, err := strconv.ParseFloat(n.Value, 64)
	return errors.Is(err, strconv.ErrRange)
}

// rangeHint says what a float64 holds, after a number out of its range.
const rangeHint = "numbers must be within ±1.8e308"

// describe names what a node holds, for "expected X, got Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.DocumentNode:
		return "a document"
	}
	switch n.ShortTag() {
	case "!!null":
		return "an empty value"
	case "!!str":
		if outOfRange(n) {
			return fmt.Sprintf("the number %s, which is out of range (%s)", clip(n.Value), rangeHint)
		}
		return fmt.Sprintf("the string %q", clip(n.Value))
	case "!!int":
		return "the integer " + clip(n.Value)
	case "!!float":
		return "the number " + clip(n.Value)
	case "!!bool":
		return "the boolean " + n.Value
	case "!!timestamp":
		return "the timestamp " + clip(n.Value)
	}
	return fmt.Sprintf("%q tagged %s", clip(n.Value), clip(n.Tag))
}

// isScalar reports whether n is a scalar with a value (not null).
func isScalar(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() != "!!null"
}

// str reads a non-empty scalar as text. Numbers, booleans and timestamps are
// taken as written, so "name: 2024" is the name "2024".
func (p *parser) str(n *yaml.Node, path string) (string, bool) {
	if !isScalar(n) {
		p.at(n, path, "expected a string, got %s", describe(n))
		return "", false
	}
	return n.Value, true
}

// number reads an int or float scalar as a finite float64.
func (p *parser) number(n *yaml.Node, path string) (float64, bool) {
	if n.Kind == yaml.ScalarNode {
		switch n.ShortTag() {
		case "!!int", "!!float":
			var f float64
			if err := n.Decode(&f); err == nil {
				if math.IsNaN(f) || math.IsInf(f, 0) {
					p.at(n, path, "must be a finite number (got %s)", clip(n.Value))
					return 0, false
				}
				return f, true
			}
		}
	}
	if outOfRange(n) {
		p.at(n, path, "number %s is out of range (%s)", clip(n.Value), rangeHint)
		return 0, false
	}
	p.at(n, path, "expected a number, got %s", describe(n))
	return 0, false
}

// maxExactInt is the largest magnitude a float64 holds every integer up to.
const maxExactInt = 1 << 53

// integer reads an integer scalar. Integral floats ("20.0", "1e3") are accepted.
func (p *parser) integer(n *yaml.Node, path string) (int64, bool) {
	if n.Kind == yaml.ScalarNode {
		switch n.ShortTag() {
		case "!!int":
			var i int64
			if err := n.Decode(&i); err == nil {
				return i, true
			}
			p.at(n, path, "integer %s does not fit in 64 bits", clip(n.Value))
			return 0, false
		case "!!float":
			var f float64
			if err := n.Decode(&f); err == nil && f == math.Trunc(f) {
				if math.Abs(f) <= maxExactInt {
					return int64(f), true
				}
				p.at(n, path, "number %s is too large for an integer here (at most 2^53)", clip(n.Value))
				return 0, false
			}
		}
	}
	if outOfRange(n) {
		p.at(n, path, "number %s is out of range (an integer here is at most 2^53)", clip(n.Value))
		return 0, false
	}
	p.at(n, path, "expected an integer, got %s", describe(n))
	return 0, false
}

// intAtLeast reads an integer >= lo that fits an int.
func (p *parser) intAtLeast(n *yaml.Node, path string, lo int64) (int, bool) {
	v, ok := p.integer(n, path)
	if !ok {
		return 0, false
	}
	if v < lo {
		p.at(n, path, "must be >= %d (got %d)", lo, v)
		return 0, false
	}
	if v > math.MaxInt32 {
		p.at(n, path, "must be <= %d (got %d)", math.MaxInt32, v)
		return 0, false
	}
	return int(v), true
}

// boolean reads true or false.
func (p *parser) boolean(n *yaml.Node, path string) (bool, bool) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" {
		var b bool
		if err := n.Decode(&b); err == nil {
			return b, true
		}
	}
	p.at(n, path, "expected true or false, got %s", describe(n))
	return false, false
}

// scalarValue reads a hyperparameter value: int64, float64 (finite), bool or
// string. Timestamps and other scalars are kept as the text written.
func (p *parser) scalarValue(n *yaml.Node, path string) (any, bool) {
	if !isScalar(n) {
		p.at(n, path, "expected a string, number or boolean, got %s", describe(n))
		return nil, false
	}
	switch n.ShortTag() {
	case "!!int":
		var i int64
		if err := n.Decode(&i); err != nil {
			p.at(n, path, "integer %s does not fit in 64 bits", clip(n.Value))
			return nil, false
		}
		return i, true
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			p.at(n, path, "must be a finite number (got %s)", clip(n.Value))
			return nil, false
		}
		return f, true
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			p.at(n, path, "expected true or false, got %s", describe(n))
			return nil, false
		}
		return b, true
	}
	if outOfRange(n) {
		p.at(n, path, "number %s is out of range (%s); quote it (\"%s\") if it is a string", clip(n.Value), rangeHint, clip(n.Value))
		return nil, false
	}
	return n.Value, true
}

// duration reads a positive duration: Go syntax ("90s") or whole seconds.
func (p *parser) duration(n *yaml.Node, path string) (Duration, bool) {
	if !isScalar(n) || n.ShortTag() == "!!float" || n.ShortTag() == "!!bool" || outOfRange(n) {
		p.at(n, path, "expected a duration like 90s, 30m or 1h30m, or whole seconds, got %s", describe(n))
		return 0, false
	}
	d, err := ParseDuration(n.Value)
	if err != nil {
		p.at(n, path, "%v", err)
		return 0, false
	}
	if d <= 0 {
		p.at(n, path, "must be positive (got %s)", clip(n.Value))
		return 0, false
	}
	return d, true
}

// sameValue reports whether two hyperparameter values are equal, comparing
// numbers by value (so 1 and 1.0 are the same).
func sameValue(a, b any) bool {
	fa, aNum := asFloat(a)
	fb, bNum := asFloat(b)
	if aNum || bNum {
		return aNum && bNum && fa == fb
	}
	return a == b
}

func asFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// formatList formats values as "[a, b, c]" for messages.
func formatList(vs []any) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = clip(FormatValue(v))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// fmtNum formats a number for messages.
func fmtNum(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
