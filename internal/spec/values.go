package spec

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// maxMemoryMB bounds memory sizes (1 PiB) so that arithmetic never overflows.
const maxMemoryMB = 1 << 30

// memoryUnits maps a lower-case unit to its size in bytes. Binary units
// (KiB, Ki, MiB, ...) are powers of 1024; decimal ones (KB, K, MB, M, ...) are
// powers of 1000, as in Kubernetes.
var memoryUnits = map[string]float64{
	"b":   1,
	"k":   1e3,
	"kb":  1e3,
	"ki":  1 << 10,
	"kib": 1 << 10,
	"m":   1e6,
	"mb":  1e6,
	"mi":  1 << 20,
	"mib": 1 << 20,
	"g":   1e9,
	"gb":  1e9,
	"gi":  1 << 30,
	"gib": 1 << 30,
	"t":   1e12,
	"tb":  1e12,
	"ti":  1 << 40,
	"tib": 1 << 40,
}

// ParseMemory parses a memory size and returns it in mebibytes, rounded up.
// It accepts a plain number of MiB ("512", "0.5") or a number with a unit:
// binary KiB, MiB, GiB, TiB (also Ki, Mi, Gi, Ti) or decimal KB, MB, GB, TB
// (also K, M, G, T), or B for bytes; units are case-insensitive and may be
// separated from the number by spaces. So "512MiB" is 512, "2GiB" is 2048 and
// "1G" (10^9 bytes) is 954.
func ParseMemory(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		if strings.HasPrefix(t, "-") {
			return 0, fmt.Errorf("memory must be >= 0 (got %s)", t)
		}
		return 0, fmt.Errorf("expected a size like 512MiB, 2GiB, 1G or a number of MiB (got %q)", s)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("expected a size like 512MiB, 2GiB, 1G or a number of MiB (got %q)", s)
	}
	mult := float64(1 << 20)
	if unit != "" {
		m, ok := memoryUnits[unit]
		if !ok {
			return 0, fmt.Errorf("unknown memory unit %q (use KiB, MiB, GiB, TiB, KB, MB, GB, TB, or no unit for MiB)", t[i:])
		}
		mult = m
	}
	mib := math.Ceil(v * mult / (1 << 20))
	if mib > maxMemoryMB {
		return 0, fmt.Errorf("memory %s is too large (at most 1 PiB)", t)
	}
	return int64(mib), nil
}

// ParseDuration parses a Go duration ("90s", "30m", "1h30m") or an integer
// number of seconds ("120"). It does not check the sign; Parse requires
// durations in the file to be positive.
func ParseDuration(s string) (Duration, error) {
	t := strings.TrimSpace(s)
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		if n > math.MaxInt64/int64(time.Second) || n < math.MinInt64/int64(time.Second) {
			return 0, fmt.Errorf("duration %s seconds is too large", t)
		}
		return Duration(time.Duration(n) * time.Second), nil
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, fmt.Errorf("expected a duration like 90s, 30m or 1h30m, or whole seconds (got %q)", s)
	}
	return Duration(d), nil
}

// FormatValue formats a hyperparameter value as it appears on a command line:
// floats in their shortest form ("0.001", "1e-05") but integral floats without
// an exponent ("32"), integers in decimal, booleans as true/false, strings as
// they are, nil as the empty string.
func FormatValue(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case float64:
		return formatFloat(x, 64)
	case float32:
		return formatFloat(float64(x), 32)
	case int:
		return strconv.FormatInt(int64(x), 10)
	case int8:
		return strconv.FormatInt(int64(x), 10)
	case int16:
		return strconv.FormatInt(int64(x), 10)
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case int64:
		return strconv.FormatInt(x, 10)
	case uint:
		return strconv.FormatUint(uint64(x), 10)
	case uint8:
		return strconv.FormatUint(uint64(x), 10)
	case uint16:
		return strconv.FormatUint(uint64(x), 10)
	case uint32:
		return strconv.FormatUint(uint64(x), 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case fmt.Stringer:
		return x.String()
	}
	return fmt.Sprint(v)
}

func formatFloat(f float64, bits int) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e21 {
		return strconv.FormatFloat(f, 'f', -1, bits)
	}
	return strconv.FormatFloat(f, 'g', -1, bits)
}

// FillString replaces each ${name} in s with FormatValue(hparams[name]).
// "$${" stands for a literal "${". It fails on an unterminated or empty
// placeholder and on a name that hparams lacks.
func FillString(s string, hparams map[string]any) (string, error) {
	return expand(s, func(name string) (string, error) {
		v, ok := hparams[name]
		if !ok {
			return "", fmt.Errorf("no hyperparameter %q for ${%s}", name, name)
		}
		return FormatValue(v), nil
	})
}

// FillArgv returns a copy of argv with every element filled by FillString.
func FillArgv(argv []string, hparams map[string]any) ([]string, error) {
	out := make([]string, len(argv))
	for i, a := range argv {
		s, err := FillString(a, hparams)
		if err != nil {
			return nil, fmt.Errorf("argument %d (%q): %w", i, a, err)
		}
		out[i] = s
	}
	return out, nil
}

var (
	errUnterminated = errors.New("unterminated ${ (close it with }, or write $${ for a literal ${)")
	errEmptyName    = errors.New("empty placeholder ${} (write ${name} with a hyperparameter name, or $${ for a literal ${)")
)

// expand is the one placeholder scanner: it copies s, replacing ${name} with
// fill(name) and $${ with ${.
func expand(s string, fill func(name string) (string, error)) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			b.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", errUnterminated
			}
			name := s[i+2 : i+2+end]
			if name == "" {
				return "", errEmptyName
			}
			v, err := fill(name)
			if err != nil {
				return "", err
			}
			b.WriteString(v)
			i += end + 3
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String(), nil
}

// splitCommand splits a command line into words like a POSIX shell does,
// without any expansion: blanks separate words; '...' keeps everything
// literally; "..." keeps everything but lets a backslash escape $ ` " \ and
// newline; outside quotes a backslash escapes the next character and a
// backslash-newline joins lines.
func splitCommand(s string) ([]string, error) {
	var (
		words  []string
		cur    strings.Builder
		inWord bool
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '\\':
			if i+1 >= len(s) {
				return nil, errors.New(`command ends with a lone backslash; write \\ for a literal one`)
			}
			i++
			if s[i] != '\n' {
				cur.WriteByte(s[i])
				inWord = true
			}
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, errors.New(`unterminated single quote in command; close it, or write \' for a literal quote`)
			}
			cur.WriteString(s[i+1 : i+1+end])
			inWord = true
			i += end + 1
		case c == '"':
			inWord = true
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("$`\"\\\n", s[i+1]) >= 0 {
					i++
					if s[i] == '\n' {
						continue
					}
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, errors.New(`unterminated double quote in command; close it, or write \" for a literal quote`)
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
