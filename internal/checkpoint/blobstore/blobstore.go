// Package blobstore keeps checkpoints in a bucket of an object store through
// gocloud.dev/blob: one tar object per checkpoint, with the IDs of the
// directory Store. It opens file:// and mem:// buckets itself (Schemes); the
// cloud buckets' drivers are in package cloud below it, which gives their
// uploads their own Uploader. It must never import a cloud SDK: what links
// this package does not link them.
//
// Layout: each checkpoint is one object, checkpoints/<id>.tar (under the
// bucket's prefix, if it has one: the URL's prefix= parameter, or
// blob.PrefixedBucket), holding the archive checkpoint.WriteArchiveFor writes
// of its tree. <id> is the ID the directory Store gives the same tree and
// owner, so IDs are interchangeable between the two.
//
// Saving first hashes the tree (reading it without writing anything) to learn
// its ID; when the object exists, nothing is uploaded. Otherwise the tree is
// archived again, straight into the upload, hashing as it goes; if that
// second hash differs (the tree changed in between), the upload is aborted
// and tried again with the new ID.
//
// Atomicity: an object is visible only once complete. S3, GCS and Azure make
// an upload (multipart, resumable or in blocks) visible only when it is
// completed, which only a successful Close of the writer does; fileblob
// writes a temporary file that Close renames into place. On any error (of
// the tree, of the upload, a changed ID, the caller's cancellation) the
// upload is aborted before it completes: the default Uploader cancels the
// writer's context before Close (gocloud's contract: "To abort a write,
// cancel ctx"), so nothing is stored under the ID, and fileblob removes its
// temporary file. S3 needs more (an aborted multipart upload must be told to
// S3): its Uploader is in package cloud. A crash during an upload leaves only
// what is not an object: an incomplete multipart upload on S3 (a bucket
// lifecycle rule, AbortIncompleteMultipartUpload, removes it), an unfinished
// GCS or Azure upload (they expire), a *.tmp file next to the object with
// fileblob.
//
// Content equal to a stored checkpoint's gives byte-equal archives (they are
// deterministic), so two concurrent saves of one ID write the same bytes and
// either may win. With fileblob the file is synced before it is renamed, and
// its directory after, so a saved checkpoint survives a crash.
package blobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"

	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/gcerrors"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/checkpoint"
)

// maxSaveTries bounds how often SaveFor restarts an upload because the tree
// changed while it was being hashed and uploaded.
const maxSaveTries = 5

// ContentType is the content type of checkpoint objects.
const ContentType = "application/x-tar"

// An Uploader writes the object key of bucket with what write writes, and
// completes it only if write returns nil. If write fails, the upload is
// aborted (nothing is stored under key, and nothing stays billed) and the
// Uploader returns write's error (or one that wraps it). A cancelled ctx
// aborts the upload too.
type Uploader func(ctx context.Context, bucket *blob.Bucket, key string, write func(io.Writer) error) error

// Store is a store of immutable checkpoints in a bucket of an object store,
// one tar object per checkpoint (see the package comment). Its methods are
// safe for concurrent use, with the same exception as checkpoint.Store's
// (Delete of an ID must not race a Save or Restore of it).
type Store struct {
	bucket   *blob.Bucket
	location string
	upload   Uploader

	uploads atomic.Int64              // objects written
	hook    func(io.Writer) io.Writer // wraps the object writer, for tests
}

var _ checkpoint.Storage = (*Store)(nil)

// New returns a store of checkpoints in bucket, which it owns from then on
// (Close closes it). location names the bucket in messages, e.g. its URL.
// upload writes the objects; nil means WriterUpload.
func New(bucket *blob.Bucket, location string, upload Uploader) *Store {
	if upload == nil {
		upload = WriterUpload
	}
	return &Store{bucket: bucket, location: location, upload: upload}
}

// Schemes returns the Openers of file:// and mem:// checkpoint storage:
//
//   - file:///absolute/path: a Store over that directory (fileblob; unless
//     the URL says otherwise, the directory is created, temporary files are
//     written next to their objects so that they are renamed within one file
//     system, and no metadata side files are written);
//   - mem://: a Store in memory (for tests).
//
// Either URL may carry prefix=dir/ to keep the checkpoints under it.
func Schemes() checkpoint.Schemes {
	return checkpoint.Schemes{
		fileblob.Scheme: func(ctx context.Context, u *url.URL, location string) (checkpoint.Storage, error) {
			if u.Host != "" && u.Host != "localhost" || !filepath.IsAbs(u.Path) {
				return nil, fmt.Errorf("opening checkpoint storage %q: a file URL needs an absolute path, file:///absolute/path (three slashes), or give the path itself", location)
			}
			q := u.Query()
			for k, v := range map[string]string{"create_dir": "true", "no_tmp_dir": "true", "metadata": "skip"} {
				if _, ok := q[k]; !ok {
					q.Set(k, v)
				}
			}
			v := *u
			v.RawQuery = q.Encode()
			return OpenBucket(ctx, &v, location, nil)
		},
		memblob.Scheme: func(ctx context.Context, u *url.URL, location string) (checkpoint.Storage, error) {
			return OpenBucket(ctx, u, location, nil)
		},
	}
}

// OpenBucket opens the bucket at u with gocloud.dev's URL opener of its
// scheme (which the caller links), checks that it can be reached, and returns
// a Store over it that uploads with upload (nil: WriterUpload). location is
// the URL as the user gave it, for messages.
func OpenBucket(ctx context.Context, u *url.URL, location string, upload Uploader) (*Store, error) {
	b, err := blob.OpenBucket(ctx, u.String())
	if err != nil {
		return nil, fmt.Errorf("opening checkpoint storage %q: %w", location, err)
	}
	ok, err := b.IsAccessible(ctx)
	if err == nil && !ok {
		err = errors.New("the bucket does not exist")
	}
	if err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("opening checkpoint storage %q: %w", location, err)
	}
	return New(b, location, upload), nil
}

// Location returns the name the store was given (its URL).
func (s *Store) Location() string { return s.location }

// Close closes the bucket.
func (s *Store) Close() error { return s.bucket.Close() }

// Uploads returns how many objects s has written.
func (s *Store) Uploads() int64 { return s.uploads.Load() }

// SetUploadHook makes s write each object through hook(w) (nil: w itself),
// for tests that fail an upload midway. Not safe to call during a Save.
func (s *Store) SetUploadHook(hook func(io.Writer) io.Writer) { s.hook = hook }

// Key returns the object name of checkpoint id.
func Key(id string) string { return "checkpoints/" + id + ".tar" }

// Exists reports whether checkpoint id is stored. It is false for invalid IDs
// and when the object store cannot be asked.
func (s *Store) Exists(id string) bool {
	return s.ExistsContext(context.Background(), id)
}

// ExistsContext is Exists with a context.
func (s *Store) ExistsContext(ctx context.Context, id string) bool {
	if !checkpoint.ValidID(id) {
		return false
	}
	ok, err := s.bucket.Exists(ctx, Key(id))
	return err == nil && ok
}

// Save stores the content of directory src as a checkpoint; see SaveFor.
func (s *Store) Save(src string) (checkpoint.Info, error) {
	return s.SaveForContext(context.Background(), "", src)
}

// SaveFor stores the content of directory src as a checkpoint whose ID is
// scoped to owner, with the rules and the ID of checkpoint.Store.SaveFor: a
// missing or empty src gives the zero Info and stores nothing; what a
// checkpoint cannot hold is an error wrapping checkpoint.ErrUnsupported; a
// checkpoint already stored is not uploaded again. When it returns, the
// checkpoint is stored completely.
func (s *Store) SaveFor(owner, src string) (checkpoint.Info, error) {
	return s.SaveForContext(context.Background(), owner, src)
}

// SaveForContext is SaveFor with a context; cancelling it aborts the upload.
func (s *Store) SaveForContext(ctx context.Context, owner, src string) (checkpoint.Info, error) {
	info, err := checkpoint.WriteArchiveFor(io.Discard, src, owner)
	if err != nil {
		return checkpoint.Info{}, fmt.Errorf("saving checkpoint %s: %w", src, err)
	}
	for try := 0; info.ID != ""; try++ {
		ok, err := s.bucket.Exists(ctx, Key(info.ID))
		if err != nil {
			return checkpoint.Info{}, fmt.Errorf("saving checkpoint %s to %s: %w", src, s.location, err)
		}
		if ok {
			return info, nil
		}
		if try == maxSaveTries {
			return checkpoint.Info{}, fmt.Errorf("saving checkpoint %s: it changed during each of %d uploads", src, maxSaveTries)
		}
		got, err := s.uploadTree(ctx, owner, src, info.ID)
		if err != nil {
			return checkpoint.Info{}, fmt.Errorf("saving checkpoint %s to %s: %w", src, s.location, err)
		}
		if got.ID == info.ID {
			return got, nil
		}
		info = got // changed since it was hashed: try again under its new ID
	}
	return checkpoint.Info{}, nil // emptied since it was hashed
}

// uploadTree archives src into the object of checkpoint id and returns the
// Info of what it archived. Unless that is id, the upload is aborted and
// nothing is stored.
func (s *Store) uploadTree(ctx context.Context, owner, src, id string) (checkpoint.Info, error) {
	var info checkpoint.Info
	err := s.upload(ctx, s.bucket, Key(id), func(w io.Writer) error {
		if s.hook != nil {
			w = s.hook(w)
		}
		var err error
		info, err = checkpoint.WriteArchiveFor(w, src, owner)
		if err == nil && info.ID != id {
			err = errChanged
		}
		return err
	})
	switch {
	case errors.Is(err, errChanged):
		return info, nil
	case err != nil:
		return checkpoint.Info{}, err
	}
	s.uploads.Add(1)
	return info, nil
}

// errChanged means the tree changed between hashing and uploading.
var errChanged = errors.New("checkpoint changed while it was uploaded")

// WriterUpload is the Uploader of file://, mem://, GCS and Azure buckets: it
// writes through the bucket's writer, and aborts by cancelling the writer's
// context before Close. A fileblob file is synced before it is renamed into
// place, and its directory after.
func WriterUpload(ctx context.Context, bucket *blob.Bucket, key string, write func(io.Writer) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var file *os.File // fileblob's temporary file
	w, err := bucket.NewWriter(ctx, key, &blob.WriterOptions{
		ContentType: ContentType,
		BeforeWrite: func(as func(any) bool) error {
			as(&file)
			return nil
		},
	})
	if err != nil {
		return err
	}
	err = write(w)
	if err == nil && file != nil {
		err = file.Sync()
	}
	if err != nil {
		cancel() // aborts the upload: Close then stores nothing
		_ = w.Close()
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	if file != nil {
		// fileblob renamed the file into the bucket's directory; make that
		// durable. The temporary file is next to the object's path when the
		// bucket has no_tmp_dir (Schemes' default for file:// URLs).
		return syncDir(filepath.Dir(file.Name()))
	}
	return nil
}

// syncDir makes a directory's entries durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Restore makes dst hold exactly checkpoint id's content, like
// checkpoint.Store.Restore: dst is created if needed and emptied, and keeps
// its own mode. An unknown ID is an error wrapping virga.ErrNotFound. On
// error, dst is left as it was.
func (s *Store) Restore(id, dst string) error {
	return s.RestoreContext(context.Background(), id, dst)
}

// RestoreContext is Restore with a context.
func (s *Store) RestoreContext(ctx context.Context, id, dst string) error {
	if !checkpoint.ValidID(id) {
		return fmt.Errorf("restoring checkpoint %q: %w", id, checkpoint.ErrInvalidID)
	}
	r, err := s.bucket.NewReader(ctx, Key(id), nil)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return fmt.Errorf("restoring checkpoint %s from %s: %w", id, s.location, virga.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("restoring checkpoint %s from %s: %w", id, s.location, err)
	}
	defer r.Close()
	if _, err := checkpoint.ExtractArchive(r, dst, -1); err != nil {
		return fmt.Errorf("restoring checkpoint %s from %s: %w", id, s.location, err)
	}
	return nil
}

// Delete removes checkpoint id. Deleting a checkpoint that does not exist is
// not an error.
func (s *Store) Delete(id string) error {
	return s.DeleteContext(context.Background(), id)
}

// DeleteContext is Delete with a context.
func (s *Store) DeleteContext(ctx context.Context, id string) error {
	if !checkpoint.ValidID(id) {
		return fmt.Errorf("deleting checkpoint %q: %w", id, checkpoint.ErrInvalidID)
	}
	err := s.bucket.Delete(ctx, Key(id))
	if err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return fmt.Errorf("deleting checkpoint %s from %s: %w", id, s.location, err)
	}
	return nil
}
