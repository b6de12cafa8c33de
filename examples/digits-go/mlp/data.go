package main

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
	numInputs  = 64 // 8x8 pixels
	numClasses = 10 // digits 0..9
	maxPixel   = 16 // pixel counts are 0..16
	splitSeed  = 42 // the SplitMix64 seed of the fixed train/validation split
)

// defaultDataPath is where the data set lives relative to the repository root.
const defaultDataPath = "examples/data/digits.csv.gz"

// dataset is the digits data set, split into training and validation rows.
type dataset struct {
	trainX [][]float64 // scaled to 0..1
	trainY []int
	valX   [][]float64
	valY   []int
}

// splitMix64 is the SplitMix64 generator: tiny, fast, fully specified, and
// easy to reproduce in another language (the Python example uses the same split).
type splitMix64 struct{ state uint64 }

// next returns the next 64 random bits.
func (s *splitMix64) next() uint64 {
	s.state += 0x9E3779B97F4A7C15
	z := s.state
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// float64 returns a uniform number in [0, 1).
func (s *splitMix64) float64() float64 {
	return float64(s.next()>>11) * (1.0 / (1 << 53))
}

// shuffle permutes p in place with Fisher–Yates.
func (s *splitMix64) shuffle(p []int) {
	for i := len(p) - 1; i > 0; i-- {
		j := int(s.next() % uint64(i+1))
		p[i], p[j] = p[j], p[i]
	}
}

// splitIndices returns the validation and training row indices of a data set
// of n rows: a SplitMix64(42) Fisher–Yates shuffle of 0..n-1, the first n/5
// of which are the validation rows (examples/data/SOURCE.md).
func splitIndices(n int) (val, train []int) {
	perm := make([]int, n)
	for i := range perm {
		perm[i] = i
	}
	rng := splitMix64{state: splitSeed}
	rng.shuffle(perm)
	nVal := n / 5
	return perm[:nVal], perm[nVal:]
}

// resolveDataPath finds the data file. An explicit path is used as given.
// The default, relative to the working directory, is also looked for in the
// working directory's parents, so the trainer runs from the repository root
// (as experiments do) as well as from its own directory (as tests do).
func resolveDataPath(path string, explicit bool) (string, error) {
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

// loadDataset reads the gzip-compressed CSV at path and splits it.
func loadDataset(path string) (*dataset, error) {
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
	val, train := splitIndices(len(xs))
	ds := &dataset{}
	for _, i := range train {
		ds.trainX = append(ds.trainX, xs[i])
		ds.trainY = append(ds.trainY, ys[i])
	}
	for _, i := range val {
		ds.valX = append(ds.valX, xs[i])
		ds.valY = append(ds.valY, ys[i])
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
		if len(fields) != numInputs+1 {
			return nil, nil, fmt.Errorf("line %d: %d columns, want %d (64 pixels and a label)", line, len(fields), numInputs+1)
		}
		x := make([]float64, numInputs)
		for j := 0; j < numInputs; j++ {
			v, err := strconv.ParseFloat(strings.TrimSpace(fields[j]), 64)
			if err != nil || v < 0 || v > maxPixel {
				return nil, nil, fmt.Errorf("line %d, column %d: %q: want a pixel count 0..16", line, j+1, fields[j])
			}
			x[j] = v / maxPixel
		}
		y, err := strconv.ParseFloat(strings.TrimSpace(fields[numInputs]), 64)
		if err != nil || y != float64(int(y)) || y < 0 || y >= numClasses {
			return nil, nil, fmt.Errorf("line %d, column %d: %q: want a label 0..9", line, numInputs+1, fields[numInputs])
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
