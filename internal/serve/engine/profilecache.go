package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/virga-ml/virga/internal/serve"
	"github.com/virga-ml/virga/internal/serve/runtime"
	"github.com/virga-ml/virga/internal/serve/runtime/onnx"
)

// The profile cache. A cold load reads and decodes the model, warms it up
// and profiles every batch size; the profile is most of the time of a
// small model's load (a 2,048-unit MLP: 166 ms in all), and under a memory
// budget smaller than the models a model is loaded again and again. What a
// load measures is kept, keyed by the digest of the model directory's
// files and the runtime settings it ran with (format, runtime threads,
// instances): a model loaded again with the same files and settings skips
// the profile and the runtime's memory estimate (the MLP runtime's decodes
// the whole file), and is only decoded and warmed up with one call at one
// row and one at its largest batch. A changed file or setting is profiled
// again. The records live in memory for the engine's life and, with
// Options.ProfileCache, as one JSON file each in that directory, so a
// restarted server reuses them.

// loadRecord is what a cold load measured.
type loadRecord struct {
	Profile *Profile `json:"profile"`
	// Memory is the model's own figure once loaded (runtime.Model.Memory).
	Memory int64 `json:"memory"`
	// Load is the time of the last load that did not profile (read,
	// decode, warm-up), or of the decode alone after a cold load: what the
	// next load is expected to take.
	Load time.Duration `json:"load"`
}

type profileCache struct {
	dir string // "": in memory only

	mu        sync.Mutex
	records   map[string]loadRecord // by cache key
	estimates map[string]int64      // the runtime's memory estimate, by cache key
	stamps    map[string]dirStamp   // by model directory: its files' digest, while their sizes and times hold
}

// dirStamp is a model directory's files (name, size, modification time)
// and their digest.
type dirStamp struct {
	files  []fileStamp
	digest string
}

type fileStamp struct {
	name string
	size int64
	mod  time.Time
}

func newProfileCache(dir string) (*profileCache, error) {
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("profile cache: %w", err)
		}
	}
	return &profileCache{dir: dir, records: map[string]loadRecord{}, estimates: map[string]int64{}, stamps: map[string]dirStamp{}}, nil
}

// key is the cache key of the model in dir loaded by l with the engine's
// instances: a digest of its files and the settings.
func (c *profileCache) key(dir string, m serve.Manifest, l runtime.Loader, instances int) (string, error) {
	digest, err := c.digest(dir)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "files %s\nformat %s\nruntime %s\ninstances %d\n", digest, m.Format, runtimeSettings(l), instances)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// runtimeSettings names the settings of a runtime that change a model's
// latency.
func runtimeSettings(l runtime.Loader) string {
	switch l := l.(type) {
	case *onnx.Loader:
		return fmt.Sprintf("%T threads %d", l, max(l.Settings.IntraOpThreads, 1))
	default:
		return fmt.Sprintf("%T", l)
	}
}

// digest hashes the regular files under dir (names and contents), reusing
// the last digest while every file keeps its size and modification time.
func (c *profileCache) digest(dir string) (string, error) {
	var files []fileStamp
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		files = append(files, fileStamp{name: filepath.ToSlash(rel), size: info.Size(), mod: info.ModTime()})
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("model files: %w", err)
	}
	c.mu.Lock()
	st, ok := c.stamps[dir]
	c.mu.Unlock()
	if ok && slices.EqualFunc(st.files, files, func(a, b fileStamp) bool {
		return a.name == b.name && a.size == b.size && a.mod.Equal(b.mod)
	}) {
		return st.digest, nil
	}
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%s %d\n", f.name, f.size)
		r, err := os.Open(filepath.Join(dir, filepath.FromSlash(f.name)))
		if err != nil {
			return "", fmt.Errorf("model files: %w", err)
		}
		_, err = io.Copy(h, r)
		r.Close()
		if err != nil {
			return "", fmt.Errorf("model files: %w", err)
		}
	}
	digest := hex.EncodeToString(h.Sum(nil))
	c.mu.Lock()
	c.stamps[dir] = dirStamp{files: files, digest: digest}
	c.mu.Unlock()
	return digest, nil
}

// get returns the record of key, from memory or the cache directory. A
// record file that does not decode is ignored (the model is profiled again
// and the file rewritten).
func (c *profileCache) get(key string) (loadRecord, bool) {
	c.mu.Lock()
	rec, ok := c.records[key]
	c.mu.Unlock()
	if ok || c.dir == "" {
		return rec, ok
	}
	data, err := os.ReadFile(filepath.Join(c.dir, key+".json"))
	if err != nil {
		return loadRecord{}, false
	}
	rec, err = decodeLoadRecord(data)
	if err != nil {
		return loadRecord{}, false
	}
	c.mu.Lock()
	c.records[key] = rec
	c.mu.Unlock()
	return rec, true
}

// put keeps rec as key's record; with a cache directory, also on disk
// (written to a temporary file and renamed, so a reader never sees half a
// record). A failure to write costs only a profile at the next restart.
func (c *profileCache) put(key string, rec loadRecord, persist bool) {
	c.mu.Lock()
	c.records[key] = rec
	c.mu.Unlock()
	if c.dir == "" || !persist {
		return
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return
	}
	f, err := os.CreateTemp(c.dir, "."+key+"-*")
	if err != nil {
		return
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if werr != nil || cerr != nil || os.Rename(f.Name(), filepath.Join(c.dir, key+".json")) != nil {
		os.Remove(f.Name())
	}
}

// decodeLoadRecord reads a record file, checking what a profile needs to
// be used: at least one point, rows increasing from 1, durations not
// negative, a largest batch at least the last point's rows.
func decodeLoadRecord(data []byte) (loadRecord, error) {
	var rec loadRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return loadRecord{}, err
	}
	p := rec.Profile
	switch {
	case p == nil || len(p.Points) == 0:
		return loadRecord{}, errors.New("profile: no points")
	case rec.Memory < 0:
		return loadRecord{}, fmt.Errorf("memory: %d, want at least 0", rec.Memory)
	case rec.Load < 0:
		return loadRecord{}, fmt.Errorf("load: %v, want at least 0", rec.Load)
	}
	for i, pt := range p.Points {
		if pt.Rows < 1 || (i > 0 && pt.Rows <= p.Points[i-1].Rows) || pt.Took < 0 {
			return loadRecord{}, fmt.Errorf("profile.points[%d]: rows %d took %v, want rows increasing from 1 and a duration at least 0", i, pt.Rows, pt.Took)
		}
	}
	if p.Max < p.Points[len(p.Points)-1].Rows {
		return loadRecord{}, fmt.Errorf("profile.max: %d, want at least the last point's rows (%d)", p.Max, p.Points[len(p.Points)-1].Rows)
	}
	return rec, nil
}

// estimate is the memory the model of key will hold: its own figure from
// an earlier load, else the runtime's estimate (kept: the MLP runtime's
// decodes the whole file, and a load refused admission must not pay that
// at every request).
func (c *profileCache) estimate(key string, l runtime.Loader, dir string, m serve.Manifest) (int64, error) {
	if rec, ok := c.get(key); ok && rec.Memory > 0 {
		return rec.Memory, nil
	}
	c.mu.Lock()
	est, ok := c.estimates[key]
	c.mu.Unlock()
	if ok {
		return est, nil
	}
	est, err := estimateMemory(l, dir, m)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	c.estimates[key] = est
	c.mu.Unlock()
	return est, nil
}

// warmUp runs the model once at one row and once at its largest batch: a
// load whose profile is known does this instead of Measure.
func warmUp(ctx context.Context, m runtime.Model) error {
	maxRows := max(m.MaxBatch(), 1)
	for _, rows := range []int{1, maxRows} {
		inputs, err := zeroInputs(m.Signature(), rows, m.MaxBatch() > 0)
		if err != nil {
			return err
		}
		if _, err := m.Run(ctx, inputs); err != nil {
			return fmt.Errorf("warm-up call with %d rows of zeros: %w", rows, err)
		}
		if maxRows == 1 {
			break
		}
	}
	return nil
}
