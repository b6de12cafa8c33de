package checkpoint

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync/atomic"
	"time"
)

// racyWindow is how recent a modification time must be for Fingerprint to
// distrust it. File systems stamp times from a clock that advances in ticks
// of a few milliseconds, so a file rewritten within one tick of the last
// fingerprint can keep its size and modification time; such a fingerprint is
// made unique instead, so that the caller saves (and Save deduplicates).
const racyWindow = 100 * time.Millisecond

// racyCount makes racy fingerprints unique within the process.
var racyCount atomic.Uint64

// Fingerprint returns a cheap digest of dir's metadata: the relative path,
// size, modification time and mode of every entry, read without opening any
// file. A caller keeps the last fingerprint of each trial's checkpoint
// directory and calls Save only when it changes; take the fingerprint before
// the Save, so that a change during the Save shows at the next comparison.
//
// A missing or empty dir has the fingerprint "". When an entry was modified
// less than 100 ms ago (or its time cannot be trusted to tell later writes
// apart), the fingerprint is unique, never equal to an earlier or later one,
// which makes the caller save. Writes that restore an entry's earlier size and
// modification time on purpose (cp -p, rsync -t) can go unnoticed.
func Fingerprint(dir string) (string, error) {
	now := time.Now()
	h := sha256.New()
	var buf [binary.MaxVarintLen64]byte
	n, racy := 0, false
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			return err
		}
		if path == dir {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		mt := fi.ModTime()
		if now.Sub(mt) < racyWindow {
			racy = true
		}
		n++
		h.Write(buf[:binary.PutUvarint(buf[:], uint64(len(rel)))])
		h.Write([]byte(rel))
		h.Write(buf[:binary.PutUvarint(buf[:], uint64(fi.Size()))])
		h.Write(buf[:binary.PutVarint(buf[:], mt.UnixNano())])
		h.Write(buf[:binary.PutUvarint(buf[:], uint64(fi.Mode()))])
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("fingerprinting %s: %w", dir, err)
	}
	if n == 0 {
		return "", nil
	}
	if racy {
		h.Write([]byte("racy"))
		h.Write(buf[:binary.PutVarint(buf[:], now.UnixNano())])
		h.Write(buf[:binary.PutUvarint(buf[:], racyCount.Add(1))])
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
