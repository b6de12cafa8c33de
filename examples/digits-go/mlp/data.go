// Package mlp is the digits-go example's network and data: the UCI digits data
// set with its fixed train/validation split, a one-hidden-layer perceptron, and
// one epoch of mini-batch SGD with momentum. The example binary (checkpoints,
// the trial protocol) and bench/search/gentable (tabular benchmarks) both train
// through it. It never touches the file system except to read the data set,
// and never draws from a global random generator: every shuffle and
// initialization derives from an explicit seed.
package mlp

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Shape of the digits data set (examples/data/SOURCE.md).
const (
	NumInputs  = 64 // 8x8 pixels
	NumClasses = 10 // digits 0..9
	maxPixel   = 16 // pixel counts are 0..16
	// InputScale is what the loader multiplies each raw pixel count by:
	// the network sees pixels in 0..1.
	InputScale = 1.0 / maxPixel
	SplitSeed  = 42 // the SplitMix64 seed of the fixed train/validation split
)

// DefaultDataPath is where the data set lives relative to the repository root.
const DefaultDataPath = "examples/data/digits.csv.gz"

// Dataset is the digits data set, split into training and validation rows.
type Dataset struct {
	TrainX [][]float64 // scaled to 0..1
	TrainY []int
	ValX   [][]float64
	ValY   []int
}

// SplitMix64 is the SplitMix64 generator: tiny, fast, fully specified, and
// easy to reproduce in another language (the Python example uses the same split).
type SplitMix64 struct{ State uint64 }

// Next returns the next 64 random bits.
func (s *SplitMix64) Next() uint64 {
	s.State += 0x9E3779B97F4A7C15
	z := s.State
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// Float64 returns a uniform number in [0, 1).
func (s *SplitMix64) Float64() float64 {
	return float64(s.Next()>>11) * (1.0 / (1 << 53))
}

// Shuffle permutes p in place with Fisher–Yates.
func (s *SplitMix64) Shuffle(p []int) {
	for i := len(p) - 1; i > 0; i-- {
		j := int(s.Next() % uint64(i+1))
		p[i], p[j] = p[j], p[i]
	}
}

// SplitIndices returns the validation and training row indices of a data set
// of n rows: a SplitMix64(42) Fisher–Yates shuffle of 0..n-1, the first n/5
// of which are the validation rows (examples/data/SOURCE.md).
func SplitIndices(n int) (val, train []int) {
	perm := make([]int, n)
	for i := range perm {
		perm[i] = i
	}
	rng := SplitMix64{State: SplitSeed}
	rng.Shuffle(perm)
	nVal := n / 5
	return perm[:nVal], perm[nVal:]
}

// ResolveDataPath finds the data file. An explicit path is used as given.
// The default, relative to the working directory, is also looked for in the
// working directory's parents, so the trainer runs from the repository root
// (as experiments do) as well as from its own directory (as tests do).
func ResolveDataPath(path string, explicit bool) (string, error) {
	if explicit || filepath.IsAbs(path) {
		return path, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return path, nil
	}
	for {
		candidate := filepath.Join(dir, path)
		if _, err := os.Stat(candidate); err == nil {
			return candidate, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("data set %s not found in the working directory or its parents; "+
				"run from the repository root or pass --data", path)
		}
		dir = parent
	}
}

// LoadDefault loads the data set at DefaultDataPath, looked for in the
// working directory and its parents as ResolveDataPath does.
func LoadDefault() (*Dataset, error) {
	path, err := ResolveDataPath(DefaultDataPath, false)
	if err != nil {
		return nil, err
	}
	return LoadDataset(path)
}

// LoadDataset reads the CSV at path (gzip-compressed when it ends in .gz) and splits it.
func LoadDataset(path string) (*Dataset, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening data set: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		gz, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		defer gz.Close()
		r = gz
	}
	xs, ys, err := parseCSV(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	val, train := SplitIndices(len(xs))
	ds := &Dataset{}
	for _, i := range train {
		ds.TrainX = append(ds.TrainX, xs[i])
		ds.TrainY = append(ds.TrainY, ys[i])
	}
	for _, i := range val {
		ds.ValX = append(ds.ValX, xs[i])
		ds.ValY = append(ds.ValY, ys[i])
	}
	return ds, nil
}

// parseCSV reads rows of 64 pixels (0..16) and a label (0..9), scaling pixels to 0..1.
func parseCSV(r io.Reader) (xs [][]float64, ys []int, err error) {
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		fields := strings.Split(text, ",")
		if len(fields) != NumInputs+1 {
			return nil, nil, fmt.Errorf("line %d: %d columns, want %d (64 pixels and a label)", line, len(fields), NumInputs+1)
		}
		x := make([]float64, NumInputs)
		for j := 0; j < NumInputs; j++ {
			v, err := strconv.ParseFloat(strings.TrimSpace(fields[j]), 64)
			if err != nil || v < 0 || v > maxPixel {
				return nil, nil, fmt.Errorf("line %d, column %d: %q: want a pixel count 0..16", line, j+1, fields[j])
			}
			x[j] = v / maxPixel
		}
		y, err := strconv.ParseFloat(strings.TrimSpace(fields[NumInputs]), 64)
		if err != nil || y != float64(int(y)) || y < 0 || y >= NumClasses {
			return nil, nil, fmt.Errorf("line %d, column %d: %q: want a label 0..9", line, NumInputs+1, fields[NumInputs])
		}
		xs = append(xs, x)
		ys = append(ys, int(y))
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("reading line %d: %w", line+1, err)
	}
	if len(xs) < 5 {
		return nil, nil, errors.New("fewer than 5 rows: too few to split")
	}
	return xs, ys, nil
}
