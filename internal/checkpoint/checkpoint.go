// Package checkpoint keeps trials' checkpoint directories as immutable,
// content-addressed copies under one root directory (the data directory's
// checkpoints/), named by the hex SHA-256 of their content, so equal
// checkpoints are stored once. It saves, restores and deletes whole
// directories and never modifies a stored checkpoint in place; retention is
// the caller's decision, and it never links stored files into a trial's
// directory (trials may write in place). Object stores keep checkpoints with
// the same IDs through the Storage interface; their drivers live in package
// blobstore and below, which this package must never import, so that what
// imports checkpoint (the control loop, the API, the agent) links no
// object-store SDK.
package checkpoint

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/virga-ml/virga"
)

// Errors returned by the store.
var (
	// ErrInvalidID means a checkpoint ID is not 64 lowercase hex digits.
	ErrInvalidID = errors.New("invalid checkpoint ID")
	// ErrUnsupported means the directory holds something a checkpoint cannot
	// (a link leading outside it, a device, a socket, a pipe): the trial's
	// doing, not the store's.
	ErrUnsupported = errors.New("not allowed in a checkpoint")
)

// tmpPrefix starts the names of directories being written or deleted under
// the root. Open removes such leftovers of a crash.
const tmpPrefix = ".tmp-"

// Store is a directory of immutable checkpoints, one subdirectory per ID.
// Its methods are safe for concurrent use, except that Delete of an ID must
// not race a Save or Restore of the same ID (the caller serialises retention).
type Store struct {
	root string
}

// Info describes a saved checkpoint. The zero Info (empty ID) means there was
// nothing to save.
type Info struct {
	ID    string // hex SHA-256 of the content (see Save)
	Size  int64  // bytes of regular file content
	Files int    // number of regular files
}

// Open opens the store at root, creating the directory if needed, and removes
// what crashed saves and deletes left behind. Only one process (the owner of
// the data directory) should open a given root.
func Open(root string) (*Store, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("opening checkpoint store %s: %w", root, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("opening checkpoint store: %w", err)
	}
	entries, err := os.ReadDir(abs)
	if err != nil {
		return nil, fmt.Errorf("opening checkpoint store: %w", err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			if err := removeAll(filepath.Join(abs, e.Name())); err != nil {
				return nil, fmt.Errorf("opening checkpoint store: removing leftover of a crashed save: %w", err)
			}
		}
	}
	return &Store{root: abs}, nil
}

// Root returns the store's directory (an absolute path).
func (s *Store) Root() string { return s.root }

// ValidID reports whether id is a well-formed checkpoint ID: 64 lowercase hex digits.
func ValidID(id string) bool {
	if len(id) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Path returns the directory holding checkpoint id, or "" when id is not a
// valid ID. The directory must be treated as read-only.
func (s *Store) Path(id string) string {
	if !ValidID(id) {
		return ""
	}
	return filepath.Join(s.root, id)
}

// Exists reports whether checkpoint id is stored. It is false for invalid IDs.
func (s *Store) Exists(id string) bool {
	p := s.Path(id)
	if p == "" {
		return false
	}
	fi, err := os.Lstat(p)
	return err == nil && fi.IsDir()
}

// Save stores the content of directory src as a checkpoint and returns its
// Info. A missing or empty src is not an error: it returns the zero Info,
// meaning there is no checkpoint.
//
// Save takes directories, regular files and symbolic links. A link must stay
// inside src: its target must be relative, and may start with ".." elements
// that do not climb out of src but hold no ".." after that (so that no link
// can lead another one outside); other links, and other kinds of file
// (devices, sockets, pipes), make Save fail. Only permission bits (0777) of
// modes are kept.
//
// The ID is the hex SHA-256 of the list, sorted by slash-separated relative
// path, of every entry's (kind, path, permission bits, size, SHA-256 of the
// content or link target). Equal content gives an equal ID, and an ID already
// stored is not stored again. Content is hashed as it is copied, so the ID
// always matches what is stored even if src changes during the Save; when
// Save returns, the checkpoint is durable (files and directories are synced
// before the atomic rename that publishes it).
func (s *Store) Save(src string) (Info, error) {
	return s.SaveFor("", src)
}

// SaveFor is Save with the checkpoint's ID scoped to owner (for example a
// trial): equal content of different owners gets different IDs, so deleting
// one owner's checkpoint never removes another's files. An empty owner is
// Save.
func (s *Store) SaveFor(owner, src string) (Info, error) {
	fi, err := os.Stat(src)
	if errors.Is(err, fs.ErrNotExist) {
		return Info{}, nil
	}
	if err != nil {
		return Info{}, fmt.Errorf("saving checkpoint: %w", err)
	}
	if !fi.IsDir() {
		return Info{}, fmt.Errorf("saving checkpoint: %s is not a directory", src)
	}
	tmp, err := os.MkdirTemp(s.root, tmpPrefix+"save-")
	if err != nil {
		return Info{}, fmt.Errorf("saving checkpoint %s: %w", src, err)
	}
	published := false
	defer func() {
		if !published {
			_ = removeAll(tmp)
		}
	}()

	// 1. Copy the tree into tmp, hashing each file as it is copied.
	info, entries, dirs, err := copyTree(src, tmp, true)
	if err != nil {
		return Info{}, fmt.Errorf("saving checkpoint %s: %w", src, err)
	}
	if len(entries) == 0 {
		return Info{}, nil
	}
	info.ID = treeID(owner, entries)

	// 2. Give directories their modes and sync them, deepest first, then the
	// tmp root itself.
	if err := finishDirs(tmp, dirs, true); err != nil {
		return Info{}, fmt.Errorf("saving checkpoint %s: %w", src, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return Info{}, fmt.Errorf("saving checkpoint %s: %w", src, err)
	}
	if err := syncDir(tmp); err != nil {
		return Info{}, fmt.Errorf("saving checkpoint %s: %w", src, err)
	}

	// 3. Publish with one rename. If the ID exists (the same content was saved
	// before, or concurrently), keep the stored copy.
	if s.Exists(info.ID) {
		return info, nil
	}
	if err := os.Rename(tmp, s.Path(info.ID)); err != nil {
		if s.Exists(info.ID) {
			return info, nil
		}
		return Info{}, fmt.Errorf("saving checkpoint %s: publishing: %w", src, err)
	}
	published = true
	if err := syncDir(s.root); err != nil {
		return Info{}, fmt.Errorf("saving checkpoint %s: %w", src, err)
	}
	return info, nil
}

// Restore makes dst hold exactly checkpoint id's content: it creates dst if
// needed, removes everything else in it, and copies the files (never links
// them, so the trial may write in place). dst itself keeps its own mode. An
// unknown ID is an error wrapping virga.ErrNotFound.
func (s *Store) Restore(id, dst string) error {
	if !ValidID(id) {
		return fmt.Errorf("restoring checkpoint %q: %w", id, ErrInvalidID)
	}
	if !s.Exists(id) {
		return fmt.Errorf("restoring checkpoint %s: %w", id, virga.ErrNotFound)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("restoring checkpoint %s: %w", id, err)
	}
	old, err := os.ReadDir(dst)
	if err != nil {
		return fmt.Errorf("restoring checkpoint %s: %w", id, err)
	}
	for _, e := range old {
		if err := removeAll(filepath.Join(dst, e.Name())); err != nil {
			return fmt.Errorf("restoring checkpoint %s: clearing %s: %w", id, dst, err)
		}
	}
	_, _, dirs, err := copyTree(s.Path(id), dst, false)
	if err != nil {
		return fmt.Errorf("restoring checkpoint %s into %s: %w", id, dst, err)
	}
	if err := finishDirs(dst, dirs, false); err != nil {
		return fmt.Errorf("restoring checkpoint %s into %s: %w", id, dst, err)
	}
	return nil
}

// Delete removes checkpoint id. Deleting a checkpoint that does not exist is
// not an error. The checkpoint disappears atomically (it is renamed away
// first), so a crash never leaves a partial checkpoint under its ID.
func (s *Store) Delete(id string) error {
	if !ValidID(id) {
		return fmt.Errorf("deleting checkpoint %q: %w", id, ErrInvalidID)
	}
	p := s.Path(id)
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	trash := filepath.Join(s.root, tmpPrefix+"delete-"+id)
	if err := removeAll(trash); err != nil { // left by an earlier crashed Delete
		return fmt.Errorf("deleting checkpoint %s: %w", id, err)
	}
	if err := os.Rename(p, trash); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("deleting checkpoint %s: %w", id, err)
	}
	if err := syncDir(s.root); err != nil {
		return fmt.Errorf("deleting checkpoint %s: %w", id, err)
	}
	if err := removeAll(trash); err != nil {
		return fmt.Errorf("deleting checkpoint %s: %w", id, err)
	}
	return nil
}

// entry is one item of a checkpoint's manifest, the input of its ID.
type entry struct {
	kind byte   // 'd' directory, 'f' regular file, 'l' symbolic link
	path string // slash-separated, relative to the checkpoint root
	perm fs.FileMode
	size int64
	sum  []byte // SHA-256 of the content (files) or of the target (links)
}

// dirMode is a directory created by copyTree whose final mode is set later,
// once its content is written.
type dirMode struct {
	rel  string
	perm fs.FileMode
}

// copyTree copies the tree under src into dst (which exists), returning the
// totals, the manifest and the directories created, parents before children.
// With sync, every file is synced before it is closed.
func copyTree(src, dst string, sync bool) (Info, []entry, []dirMode, error) {
	var (
		info    Info
		entries []entry
		dirs    []dirMode
	)
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		to := filepath.Join(dst, rel)
		slash := filepath.ToSlash(rel)
		switch t := d.Type(); {
		case t.IsDir():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if err := os.Mkdir(to, 0o700); err != nil {
				return err
			}
			perm := fi.Mode().Perm()
			dirs = append(dirs, dirMode{rel: rel, perm: perm})
			entries = append(entries, entry{kind: 'd', path: slash, perm: perm})
		case t.IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			perm := fi.Mode().Perm()
			n, sum, err := copyFile(path, to, perm, sync)
			if err != nil {
				return err
			}
			info.Files++
			info.Size += n
			entries = append(entries, entry{kind: 'f', path: slash, perm: perm, size: n, sum: sum})
		case t&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if !linkInside(rel, target) {
				return fmt.Errorf("symbolic link %s -> %s leads outside the checkpoint directory: %w", rel, target, ErrUnsupported)
			}
			if err := os.Symlink(target, to); err != nil {
				return err
			}
			sum := sha256.Sum256([]byte(target))
			entries = append(entries, entry{kind: 'l', path: slash, size: int64(len(target)), sum: sum[:]})
		default:
			return fmt.Errorf("%s is a %s; a checkpoint holds only directories, regular files and symbolic links: %w", rel, t.Type(), ErrUnsupported)
		}
		return nil
	})
	if err != nil {
		return Info{}, nil, nil, err
	}
	return info, entries, dirs, nil
}

// copyFile copies regular file from into a new file to with mode perm and
// returns the bytes copied and their SHA-256.
func copyFile(from, to string, perm fs.FileMode, sync bool) (int64, []byte, error) {
	in, err := os.Open(from)
	if err != nil {
		return 0, nil, err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, nil, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), in)
	if err == nil {
		err = out.Chmod(perm)
	}
	if err == nil && sync {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, nil, err
	}
	return n, h.Sum(nil), nil
}

// finishDirs gives the directories copyTree created under root their final
// modes, children before parents (a parent may lose write permission), and
// with sync makes their entries durable.
func finishDirs(root string, dirs []dirMode, sync bool) error {
	for _, d := range slices.Backward(dirs) {
		p := filepath.Join(root, d.rel)
		if sync {
			if err := syncDir(p); err != nil {
				return err
			}
		}
		if err := os.Chmod(p, d.perm); err != nil {
			return err
		}
	}
	return nil
}

// treeID returns the checkpoint ID of a manifest.
func treeID(owner string, entries []entry) string {
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.path, b.path) })
	h := sha256.New()
	if owner != "" {
		var buf [binary.MaxVarintLen64]byte
		h.Write([]byte{'o'})
		h.Write(buf[:binary.PutUvarint(buf[:], uint64(len(owner)))])
		h.Write([]byte(owner))
	}
	for _, e := range entries {
		writeEntry(h, e)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// writeEntry writes one manifest entry in an unambiguous binary form.
func writeEntry(h hash.Hash, e entry) {
	var buf [binary.MaxVarintLen64]byte
	h.Write([]byte{e.kind})
	h.Write(buf[:binary.PutUvarint(buf[:], uint64(len(e.path)))])
	h.Write([]byte(e.path))
	h.Write(buf[:binary.PutUvarint(buf[:], uint64(e.perm))])
	h.Write(buf[:binary.PutUvarint(buf[:], uint64(e.size))])
	h.Write(buf[:binary.PutUvarint(buf[:], uint64(len(e.sum)))])
	h.Write(e.sum)
}

// linkInside reports whether a symbolic link at rel (relative to the
// checkpoint root) with the given target stays inside the checkpoint: the
// target is relative, its leading ".." elements do not climb above the root,
// and no ".." follows another element (which could climb out through a link).
func linkInside(rel, target string) bool {
	if target == "" || filepath.IsAbs(target) || strings.HasPrefix(target, "/") {
		return false
	}
	depth := 0
	if dir := filepath.Dir(rel); dir != "." {
		depth = len(strings.Split(filepath.ToSlash(dir), "/"))
	}
	up, leading := 0, true
	for _, el := range strings.Split(filepath.ToSlash(target), "/") {
		switch el {
		case "", ".":
		case "..":
			if !leading {
				return false
			}
			up++
		default:
			leading = false
		}
	}
	return up <= depth
}

// syncDir makes a directory's entries durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}

// removeAll removes path and everything under it, first granting the owner
// write permission on directories that lack it (stored checkpoints keep the
// modes they were saved with, read-only directories included).
func removeAll(path string) error {
	if err := os.RemoveAll(path); err == nil {
		return nil
	}
	_ = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700) // before WalkDir reads it
		}
		return nil
	})
	return os.RemoveAll(path)
}
