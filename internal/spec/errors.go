package spec

import (
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

// Problem is one thing wrong with an experiment file, with its position.
type Problem struct {
	File string // the file name as given to Parse
	Line int    // 1-based; 0 when the problem concerns the whole file
	Col  int    // 1-based; 0 when unknown
	Path string // dotted path of the field, e.g. "hyperparameters.lr.max"; "" for the file itself
	Msg  string // what is wrong and what would be right
}

// String formats p as "file:line:col: path: message", leaving out the parts
// that are unknown (line and column 0, empty path).
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		b.WriteString(":" + strconv.Itoa(p.Line))
		if p.Col > 0 {
			b.WriteString(":" + strconv.Itoa(p.Col))
		}
	}
	b.WriteString(": ")
	if p.Path != "" {
		b.WriteString(p.Path + ": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Error is every problem found in an experiment file, sorted by position.
// Parse returns it (as error) whenever the file is not a valid experiment.
type Error struct {
	Problems []Problem
}

// FileError means a file to parse could not be read: it does not exist, is
// not a regular file, or may not be read. It unwraps to the cause, so
// errors.Is(err, os.ErrNotExist) tells a missing file.
type FileError struct {
	Kind string // "experiment" or "capacity"
	Path string // as given
	Err  error  // the cause, e.g. *fs.PathError
}

// Error names the file and why it could not be read.
func (e *FileError) Error() string {
	cause := e.Err
	if pe, ok := e.Err.(*fs.PathError); ok {
		cause = pe.Err
	}
	if errors.Is(e.Err, fs.ErrNotExist) {
		return fmt.Sprintf("%s: no such file (the %s file to read; a relative path is from the current directory)", e.Path, e.Kind)
	}
	return fmt.Sprintf("%s: cannot read the %s file: %v", e.Path, e.Kind, cause)
}

// Unwrap returns the cause.
func (e *FileError) Unwrap() error { return e.Err }

// Error prints one problem per line.
func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// sortProblems orders problems by position, keeping discovery order for ties.
func sortProblems(ps []Problem) {
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].Line != ps[j].Line {
			return ps[i].Line < ps[j].Line
		}
		return ps[i].Col < ps[j].Col
	})
}

// suggest returns the candidate closest to word by edit distance, or "" when
// none is close enough to be a plausible misspelling.
func suggest(word string, candidates []string) string {
	w := strings.ToLower(word)
	if len(w) > 64 {
		return ""
	}
	best, bestD := "", -1
	for _, c := range candidates {
		limit := (len(c) + 3) / 4
		d := editDistance(w, strings.ToLower(c))
		if d <= limit && (bestD < 0 || d < bestD) {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the optimal-string-alignment distance between a and b:
// insertions, deletions, substitutions and adjacent transpositions cost 1.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	// Three rows suffice: the one before last is needed for transpositions.
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
