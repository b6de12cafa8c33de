package checkpoint

import (
	"archive/tar"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// ErrBadArchive means a checkpoint archive is malformed or hostile (a name
// that is absolute, climbs with "..", repeats, or passes through a link; more
// content than allowed; a broken tar stream): the sender's doing.
var ErrBadArchive = errors.New("bad checkpoint archive")

// archiveTime is the modification time of every archive entry, so that equal
// trees give byte-equal archives.
var archiveTime = time.Unix(0, 0).UTC()

// WriteArchive writes the tree under dir to w as a tar stream and returns its
// Info, with the ID Save would give the same tree. The archive holds
// directories, regular files and symbolic links that stay inside dir (the
// rules of Save: anything else is an error wrapping ErrUnsupported), with
// only their permission bits, in a deterministic order (a directory before
// its content, names in lexical order within a directory) and with fixed
// times and owners, so that equal trees give equal archives. A missing or
// empty dir gives an empty archive and the zero Info.
//
// A file that grows while it is written is archived up to the size it had
// when it was opened; one that shrinks is an error. The ID is computed from
// what was written.
func WriteArchive(w io.Writer, dir string) (Info, error) {
	info, err := writeArchive(w, dir, "")
	if err != nil {
		return Info{}, fmt.Errorf("archiving checkpoint %s: %w", dir, err)
	}
	return info, nil
}

// WriteArchiveFor is WriteArchive with the ID scoped to owner, the ID
// Store.SaveFor gives the same tree and owner (for the object stores, which
// keep a checkpoint as its archive). Its errors are not wrapped: what a
// checkpoint cannot hold wraps ErrUnsupported, anything else is w's or the
// tree's error as it is.
func WriteArchiveFor(w io.Writer, dir, owner string) (Info, error) {
	return writeArchive(w, dir, owner)
}

// writeArchive is WriteArchive with the ID scoped to owner (see SaveFor).
func writeArchive(w io.Writer, dir, owner string) (Info, error) {
	tw := tar.NewWriter(w)
	var (
		info    Info
		entries []entry
	)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			return err
		}
		if p == dir {
			if !d.IsDir() {
				return fmt.Errorf("%s is not a directory", dir)
			}
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		slash := filepath.ToSlash(rel)
		hdr := &tar.Header{ModTime: archiveTime, Format: tar.FormatPAX}
		switch t := d.Type(); {
		case t.IsDir():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			perm := fi.Mode().Perm()
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, slash+"/", int64(perm)
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			entries = append(entries, entry{kind: 'd', path: slash, perm: perm})
		case t.IsRegular():
			n, perm, sum, err := archiveFile(tw, hdr, p, slash)
			if err != nil {
				return err
			}
			info.Files++
			info.Size += n
			entries = append(entries, entry{kind: 'f', path: slash, perm: perm, size: n, sum: sum})
		case t&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if !linkInside(rel, target) {
				return fmt.Errorf("symbolic link %s -> %s leads outside the checkpoint directory: %w", rel, target, ErrUnsupported)
			}
			hdr.Typeflag, hdr.Name, hdr.Linkname, hdr.Mode = tar.TypeSymlink, slash, target, 0o777
			if err := tw.WriteHeader(hdr); err != nil {
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
		return Info{}, err
	}
	if err := tw.Close(); err != nil {
		return Info{}, err
	}
	if len(entries) == 0 {
		return Info{}, nil
	}
	info.ID = treeID(owner, entries)
	return info, nil
}

// archiveFile writes regular file p to tw as name and returns its size,
// permission bits and SHA-256.
func archiveFile(tw *tar.Writer, hdr *tar.Header, p, name string) (int64, fs.FileMode, []byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, 0, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, nil, err
	}
	if !fi.Mode().IsRegular() { // replaced since the walk saw it
		return 0, 0, nil, fmt.Errorf("%s changed while it was archived", name)
	}
	perm := fi.Mode().Perm()
	hdr.Typeflag, hdr.Name, hdr.Mode, hdr.Size = tar.TypeReg, name, int64(perm), fi.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return 0, 0, nil, err
	}
	h := sha256.New()
	n, err := io.CopyN(io.MultiWriter(tw, h), f, fi.Size())
	if errors.Is(err, io.EOF) {
		return 0, 0, nil, fmt.Errorf("%s shrank while it was archived", name)
	}
	if err != nil {
		return 0, 0, nil, err
	}
	return n, perm, h.Sum(nil), nil
}

// ExtractArchive makes dst hold exactly the tree of the archive read from r
// (one written by WriteArchive) and returns its Info, with the ID Save would
// give that tree. dst is created if needed (with its parents) and emptied;
// dst itself keeps its mode.
//
// The archive is checked as it is read, for it may come from anywhere: names
// must be canonical relative slash paths ("a/b", a directory's optionally
// with a trailing slash) that appear once, each after its parent directory;
// links must stay inside (the rules of Save); only directories, regular files
// and symbolic links are allowed; and files may hold at most limit bytes in
// all (a negative limit means no limit). A breach is an error wrapping
// ErrBadArchive, or ErrUnsupported for what a checkpoint cannot hold; so is
// a malformed stream, while an error of r itself is returned as it is.
//
// The tree is built in a temporary directory next to dst and moved into dst
// only once the whole archive has been read and checked: an archive that
// fails (a bad entry, a broken stream, an error of r) leaves dst as it was,
// or not created, and nothing is ever written outside dst and that
// temporary directory.
func ExtractArchive(r io.Reader, dst string, limit int64) (Info, error) {
	info, err := extractArchive(r, dst, limit)
	if err != nil {
		return Info{}, fmt.Errorf("extracting checkpoint archive into %s: %w", dst, err)
	}
	return info, nil
}

// errReader records the first error of the reader it wraps, so that a
// failure of the transport is told apart from a malformed stream.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}

func extractArchive(r io.Reader, dst string, limit int64) (Info, error) {
	dst, err := filepath.Abs(dst)
	if err != nil {
		return Info{}, err
	}
	parent := filepath.Dir(dst)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return Info{}, err
	}
	if fi, err := os.Stat(dst); err == nil && !fi.IsDir() {
		return Info{}, fmt.Errorf("%s is not a directory", dst)
	}
	tmp, err := os.MkdirTemp(parent, tmpPrefix+"extract-")
	if err != nil {
		return Info{}, err
	}
	done := false
	defer func() {
		if !done {
			_ = removeAll(tmp)
		}
	}()

	er := &errReader{r: r}
	info, entries, dirs, err := extractTree(er, tmp, limit)
	if err != nil {
		if er.err != nil {
			return Info{}, fmt.Errorf("reading the archive: %w", er.err)
		}
		return Info{}, err
	}
	if len(entries) > 0 {
		info.ID = treeID("", entries)
	}

	// Directories below the top level get their modes in tmp; top-level ones
	// once moved (moving a directory to another parent rewrites its "..",
	// which needs write permission on it).
	var inner, top []dirMode
	for _, d := range dirs {
		if strings.ContainsRune(d.rel, filepath.Separator) {
			inner = append(inner, d)
		} else {
			top = append(top, d)
		}
	}
	if err := finishDirs(tmp, inner, false); err != nil {
		return Info{}, err
	}

	if _, err := os.Lstat(dst); errors.Is(err, fs.ErrNotExist) {
		if err := finishDirs(tmp, top, false); err != nil {
			return Info{}, err
		}
		if err := os.Chmod(tmp, 0o755); err != nil {
			return Info{}, err
		}
		if err := os.Rename(tmp, dst); err != nil {
			return Info{}, err
		}
		done = true
		return info, nil
	}
	old, err := os.ReadDir(dst)
	if err != nil {
		return Info{}, err
	}
	for _, e := range old {
		if err := removeAll(filepath.Join(dst, e.Name())); err != nil {
			return Info{}, fmt.Errorf("clearing %s: %w", dst, err)
		}
	}
	fresh, err := os.ReadDir(tmp)
	if err != nil {
		return Info{}, err
	}
	for _, e := range fresh {
		if err := os.Rename(filepath.Join(tmp, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return Info{}, err
		}
	}
	if err := finishDirs(dst, top, false); err != nil {
		return Info{}, err
	}
	return info, nil
}

// extractTree writes the archive's tree into root (an empty directory it
// alone writes to), checking each entry, and returns the totals, the
// manifest and the directories created, parents before children (still
// writable: their modes are for the caller to set).
func extractTree(r io.Reader, root string, limit int64) (Info, []entry, []dirMode, error) {
	var (
		info    Info
		entries []entry
		dirs    []dirMode
		total   int64
	)
	kinds := map[string]byte{} // every name seen, and its kind
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Info{}, nil, nil, fmt.Errorf("%w: %v", ErrBadArchive, err)
		}
		name := hdr.Name
		if hdr.Typeflag == tar.TypeDir {
			name = strings.TrimSuffix(name, "/")
		}
		if !fs.ValidPath(name) || name == "." || strings.ContainsRune(name, 0) {
			return Info{}, nil, nil, fmt.Errorf("%w: entry name %q is not a clean relative path", ErrBadArchive, hdr.Name)
		}
		if _, dup := kinds[name]; dup {
			return Info{}, nil, nil, fmt.Errorf("%w: %s appears twice", ErrBadArchive, name)
		}
		if dir := path.Dir(name); dir != "." {
			switch k, ok := kinds[dir]; {
			case !ok:
				return Info{}, nil, nil, fmt.Errorf("%w: %s comes before its directory %s", ErrBadArchive, name, dir)
			case k != 'd':
				return Info{}, nil, nil, fmt.Errorf("%w: %s passes through %s, which is not a directory", ErrBadArchive, name, dir)
			}
		}
		rel := filepath.FromSlash(name)
		to := filepath.Join(root, rel)
		perm := fs.FileMode(hdr.Mode) & fs.ModePerm
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(to, 0o700); err != nil {
				return Info{}, nil, nil, err
			}
			kinds[name] = 'd'
			dirs = append(dirs, dirMode{rel: rel, perm: perm})
			entries = append(entries, entry{kind: 'd', path: name, perm: perm})
		case tar.TypeReg:
			if limit >= 0 && hdr.Size > limit-total {
				return Info{}, nil, nil, fmt.Errorf("%w: more than %d bytes of content (at %s)", ErrBadArchive, limit, name)
			}
			total += hdr.Size
			sum, err := extractFile(tr, to, name, perm, hdr.Size)
			if err != nil {
				return Info{}, nil, nil, err
			}
			kinds[name] = 'f'
			info.Files++
			info.Size += hdr.Size
			entries = append(entries, entry{kind: 'f', path: name, perm: perm, size: hdr.Size, sum: sum})
		case tar.TypeSymlink:
			if !linkInside(rel, hdr.Linkname) || strings.ContainsRune(hdr.Linkname, 0) {
				return Info{}, nil, nil, fmt.Errorf("symbolic link %s -> %s leads outside the checkpoint directory: %w", name, hdr.Linkname, ErrUnsupported)
			}
			if err := os.Symlink(hdr.Linkname, to); err != nil {
				return Info{}, nil, nil, err
			}
			kinds[name] = 'l'
			sum := sha256.Sum256([]byte(hdr.Linkname))
			entries = append(entries, entry{kind: 'l', path: name, size: int64(len(hdr.Linkname)), sum: sum[:]})
		case tar.TypeLink:
			return Info{}, nil, nil, fmt.Errorf("%s is a hard link; a checkpoint holds only directories, regular files and symbolic links: %w", name, ErrUnsupported)
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			return Info{}, nil, nil, fmt.Errorf("%s is a device or pipe; a checkpoint holds only directories, regular files and symbolic links: %w", name, ErrUnsupported)
		default:
			return Info{}, nil, nil, fmt.Errorf("%w: %s has entry type %q", ErrBadArchive, name, hdr.Typeflag)
		}
	}
	return info, entries, dirs, nil
}

// extractFile writes size bytes of r into a new file to (the archive's
// entry name) with mode perm and returns their SHA-256.
func extractFile(r io.Reader, to, name string, perm fs.FileMode, size int64) ([]byte, error) {
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	_, err = io.CopyN(io.MultiWriter(out, h), r, size)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("%w: %s is truncated", ErrBadArchive, name)
	}
	if err == nil {
		err = out.Chmod(perm)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}
