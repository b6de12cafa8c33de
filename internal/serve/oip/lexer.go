package oip

import (
	"strconv"

	"github.com/virga-ml/virga/internal/serve"
)

// lexer walks a JSON text, checking its syntax, for the inference request
// decoder: it finds each field's value without decoding it, so that large
// tensor data is read once, by scanValues, instead of through encoding/json.
type lexer struct {
	b     []byte
	i     int
	keyAt int // the offset of the object key read last
}

// maxDepth bounds the nesting of arrays and objects.
const maxDepth = 64

// syntaxErr describes malformed JSON at the lexer's offset.
func (l *lexer) syntaxErr(want string) error {
	if l.i >= len(l.b) {
		return serve.Inputf("request body", "the JSON value ends early, at offset %d (want %s)", l.i, want)
	}
	return serve.Inputf("request body", "malformed JSON at offset %d: %s where %s was expected", l.i, strconv.QuoteRune(rune(l.b[l.i])), want)
}

func (l *lexer) ws() {
	for l.i < len(l.b) {
		switch l.b[l.i] {
		case ' ', '\t', '\n', '\r':
			l.i++
		default:
			return
		}
	}
}

// peek returns the next byte after white space, or 0 at the end.
func (l *lexer) peek() byte {
	l.ws()
	if l.i < len(l.b) {
		return l.b[l.i]
	}
	return 0
}

// str reads a JSON string and returns it with its quotes.
func (l *lexer) str() ([]byte, error) {
	if l.peek() != '"' {
		return nil, l.syntaxErr("a string")
	}
	start := l.i
	l.i++
	for l.i < len(l.b) {
		c := l.b[l.i]
		switch {
		case c == '"':
			l.i++
			return l.b[start:l.i], nil
		case c == '\\':
			l.i++
			if l.i >= len(l.b) {
				return nil, l.syntaxErr("an escape")
			}
			switch l.b[l.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				l.i++
			case 'u':
				l.i++
				for range 4 {
					if l.i >= len(l.b) || !isHex(l.b[l.i]) {
						return nil, l.syntaxErr("a hexadecimal digit of a \\u escape")
					}
					l.i++
				}
			default:
				return nil, l.syntaxErr("an escape (one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)")
			}
		case c < 0x20:
			return nil, l.syntaxErr("a character of a string (control characters must be escaped)")
		default:
			l.i++
		}
	}
	return nil, l.syntaxErr("the string's closing quote")
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// number reads a JSON number.
func (l *lexer) number() error {
	b := l.b
	if l.i < len(b) && b[l.i] == '-' {
		l.i++
	}
	switch {
	case l.i < len(b) && b[l.i] == '0':
		l.i++
	case l.i < len(b) && isDigit(b[l.i]):
		for l.i < len(b) && isDigit(b[l.i]) {
			l.i++
		}
	default:
		return l.syntaxErr("a digit")
	}
	if l.i < len(b) && b[l.i] == '.' {
		l.i++
		if l.i >= len(b) || !isDigit(b[l.i]) {
			return l.syntaxErr("a digit after the decimal point")
		}
		for l.i < len(b) && isDigit(b[l.i]) {
			l.i++
		}
	}
	if l.i < len(b) && (b[l.i] == 'e' || b[l.i] == 'E') {
		l.i++
		if l.i < len(b) && (b[l.i] == '+' || b[l.i] == '-') {
			l.i++
		}
		if l.i >= len(b) || !isDigit(b[l.i]) {
			return l.syntaxErr("a digit of the exponent")
		}
		for l.i < len(b) && isDigit(b[l.i]) {
			l.i++
		}
	}
	return nil
}

// literal reads true, false or null.
func (l *lexer) literal(word string) error {
	if len(l.b)-l.i < len(word) || string(l.b[l.i:l.i+len(word)]) != word {
		return l.syntaxErr("a value")
	}
	l.i += len(word)
	return nil
}

// value reads any JSON value and returns its text.
func (l *lexer) value() ([]byte, error) {
	l.ws()
	start := l.i
	if err := l.skip(0); err != nil {
		return nil, err
	}
	return l.b[start:l.i], nil
}

func (l *lexer) skip(depth int) error {
	if depth > maxDepth {
		return l.syntaxErr("less nesting (at most 64 levels)")
	}
	switch c := l.peek(); {
	case c == '"':
		_, err := l.str()
		return err
	case c == '-' || isDigit(c):
		return l.number()
	case c == 't':
		return l.literal("true")
	case c == 'f':
		return l.literal("false")
	case c == 'n':
		return l.literal("null")
	case c == '[':
		return l.array(func(int) error { return l.skip(depth + 1) })
	case c == '{':
		return l.object(func(string) error { return l.skip(depth + 1) })
	}
	return l.syntaxErr("a value")
}

// array reads a JSON array, calling elem to read each element.
func (l *lexer) array(elem func(i int) error) error {
	if l.peek() != '[' {
		return l.syntaxErr("'['")
	}
	l.i++
	if l.peek() == ']' {
		l.i++
		return nil
	}
	for i := 0; ; i++ {
		if err := elem(i); err != nil {
			return err
		}
		switch l.peek() {
		case ',':
			l.i++
		case ']':
			l.i++
			return nil
		default:
			return l.syntaxErr("',' or ']'")
		}
	}
}

// object reads a JSON object, calling field with each key (unquoted) to
// read its value.
func (l *lexer) object(field func(key string) error) error {
	if l.peek() != '{' {
		return l.syntaxErr("'{'")
	}
	l.i++
	if l.peek() == '}' {
		l.i++
		return nil
	}
	for {
		l.ws()
		l.keyAt = l.i
		k, err := l.str()
		if err != nil {
			return err
		}
		key, err := unquote(k)
		if err != nil {
			return err
		}
		if l.peek() != ':' {
			return l.syntaxErr("':'")
		}
		l.i++
		if err := field(key); err != nil {
			return err
		}
		switch l.peek() {
		case ',':
			l.i++
		case '}':
			l.i++
			return nil
		default:
			return l.syntaxErr("',' or '}'")
		}
	}
}

// unquote decodes a JSON string's text (quotes included, syntax checked).
func unquote(q []byte) (string, error) {
	inner := q[1 : len(q)-1]
	for _, c := range inner {
		if c == '\\' {
			s, ok := unquoteEscaped(q)
			if !ok {
				return "", serve.Inputf("request body", "malformed string %s", clip(q, 40))
			}
			return s, nil
		}
	}
	return string(inner), nil
}
