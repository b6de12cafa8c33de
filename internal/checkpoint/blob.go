package checkpoint

// BlobStore keeps checkpoints in a bucket of an object store (S3, GCS, Azure
// Blob Storage, a local directory through fileblob, memory), through
// gocloud.dev/blob.
//
// Layout: each checkpoint is one object, checkpoints/<id>.tar (under the
// bucket's prefix, if it has one: the URL's prefix= parameter, or
// blob.PrefixedBucket), holding the archive WriteArchive writes of its tree.
// <id> is the ID the directory Store gives the same tree and owner, so IDs
// are interchangeable between the two.
//
// Saving first hashes the tree (reading it without writing anything) to learn
// its ID; when the object exists, nothing is uploaded. Otherwise the tree is
// archived again, straight into the object's writer, hashing as it goes; if
// that second hash differs (the tree changed in between), the upload is
// aborted and tried again with the new ID.
//
// Atomicity: an object is visible only once complete. S3, GCS and Azure make
// an upload (multipart, resumable or in blocks) visible only when it is
// completed, which only a successful Close of the writer does; fileblob
// writes a temporary file that Close renames into place. On any error (of
// the tree, of the upload, a changed ID, the caller's cancellation) the
// upload is aborted before it completes: the writer's context is cancelled
// before Close (gocloud's contract: "To abort a write, cancel ctx"), so
// nothing is stored under the ID, and fileblob removes its temporary file.
// On S3 the archive reaches the upload through a pipe instead, and a failure
// is a read error of the pipe, so that the upload manager aborts the
// multipart upload while its context is still live (AbortMultipartUpload;
// parts not aborted stay stored, and billed): see uploadS3. A crash during an
// upload leaves only what is not an object: an incomplete multipart upload on
// S3 (a bucket lifecycle rule, AbortIncompleteMultipartUpload, removes it),
// an unfinished GCS or Azure upload (they expire), a *.tmp file next to the
// object with fileblob.
//
// Content equal to a stored checkpoint's gives byte-equal archives (they are
// deterministic), so two concurrent saves of one ID write the same bytes and
// either may win. With fileblob the file is synced before it is renamed, and
// its directory after, so a saved checkpoint survives a crash.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/virga-ml/virga"
)

// maxSaveTries bounds how often SaveFor restarts an upload because the tree
// changed while it was being hashed and uploaded.
const maxSaveTries = 5

// BlobStore is a store of immutable checkpoints in a bucket of an object
// store, one tar object per checkpoint (see the top of blob.go). Its methods
// are safe for concurrent use, with the same exception as Store's (Delete of
// an ID must not race a Save or Restore of it).
type BlobStore struct {
	bucket   *blob.Bucket
	location string

	s3 bool // the bucket is S3's (see uploadS3)

	uploads atomic.Int64              // objects written, for tests
	hook    func(io.Writer) io.Writer // wraps the object writer, for tests
}

// NewBlobStore returns a store of checkpoints in bucket, which it owns from
// then on (Close closes it). location names the bucket in messages, e.g. its
// URL.
func NewBlobStore(bucket *blob.Bucket, location string) *BlobStore {
	var client *s3.Client
	return &BlobStore{bucket: bucket, location: location, s3: bucket.As(&client)}
}

// Location returns the name the store was given (its URL).
func (s *BlobStore) Location() string { return s.location }

// Close closes the bucket.
func (s *BlobStore) Close() error { return s.bucket.Close() }

// key returns the object name of checkpoint id.
func key(id string) string { return "checkpoints/" + id + ".tar" }

// Exists reports whether checkpoint id is stored. It is false for invalid IDs
// and when the object store cannot be asked.
func (s *BlobStore) Exists(id string) bool {
	return s.ExistsContext(context.Background(), id)
}

// ExistsContext is Exists with a context.
func (s *BlobStore) ExistsContext(ctx context.Context, id string) bool {
	if !ValidID(id) {
		return false
	}
	ok, err := s.bucket.Exists(ctx, key(id))
	return err == nil && ok
}

// Save stores the content of directory src as a checkpoint; see SaveFor.
func (s *BlobStore) Save(src string) (Info, error) {
	return s.SaveForContext(context.Background(), "", src)
}

// SaveFor stores the content of directory src as a checkpoint whose ID is
// scoped to owner, with the rules and the ID of Store.SaveFor: a missing or
// empty src gives the zero Info and stores nothing; what a checkpoint cannot
// hold is an error wrapping ErrUnsupported; a checkpoint already stored is
// not uploaded again. When it returns, the checkpoint is stored completely.
func (s *BlobStore) SaveFor(owner, src string) (Info, error) {
	return s.SaveForContext(context.Background(), owner, src)
}

// SaveForContext is SaveFor with a context; cancelling it aborts the upload.
func (s *BlobStore) SaveForContext(ctx context.Context, owner, src string) (Info, error) {
	info, err := writeArchive(io.Discard, src, owner)
	if err != nil {
		return Info{}, fmt.Errorf("saving checkpoint %s: %w", src, err)
	}
	for try := 0; info.ID != ""; try++ {
		ok, err := s.bucket.Exists(ctx, key(info.ID))
		if err != nil {
			return Info{}, fmt.Errorf("saving checkpoint %s to %s: %w", src, s.location, err)
		}
		if ok {
			return info, nil
		}
		if try == maxSaveTries {
			return Info{}, fmt.Errorf("saving checkpoint %s: it changed during each of %d uploads", src, maxSaveTries)
		}
		got, err := s.upload(ctx, owner, src, info.ID)
		if err != nil {
			return Info{}, fmt.Errorf("saving checkpoint %s to %s: %w", src, s.location, err)
		}
		if got.ID == info.ID {
			return got, nil
		}
		info = got // changed since it was hashed: try again under its new ID
	}
	return Info{}, nil // emptied since it was hashed
}

// upload archives src into the object of checkpoint id and returns the Info
// of what it archived. Unless that is id, the upload is aborted and nothing
// is stored.
func (s *BlobStore) upload(ctx context.Context, owner, src, id string) (Info, error) {
	if s.s3 {
		return s.uploadS3(ctx, owner, src, id)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var file *os.File // fileblob's temporary file
	w, err := s.bucket.NewWriter(ctx, key(id), &blob.WriterOptions{
		ContentType: tarType,
		BeforeWrite: func(as func(any) bool) error {
			as(&file)
			return nil
		},
	})
	if err != nil {
		return Info{}, err
	}
	var out io.Writer = w
	if s.hook != nil {
		out = s.hook(w)
	}
	info, err := writeArchive(out, src, owner)
	if err == nil && info.ID != id {
		err = errChanged
	}
	if err == nil && file != nil {
		err = file.Sync()
	}
	if err != nil {
		cancel() // aborts the upload: Close then stores nothing
		_ = w.Close()
		if err == errChanged {
			return info, nil
		}
		return Info{}, err
	}
	if err := w.Close(); err != nil {
		return Info{}, err
	}
	s.uploads.Add(1)
	if file != nil {
		// fileblob renamed the file into the bucket's directory; make that
		// durable. The temporary file is next to the object's path when the
		// bucket has no_tmp_dir (OpenURL's default for file:// URLs).
		if err := syncDir(filepath.Dir(file.Name())); err != nil {
			return Info{}, err
		}
	}
	return info, nil
}

// uploadS3 is upload to S3. There an aborted multipart upload must be told
// to S3 (AbortMultipartUpload), or its parts stay stored, unseen and billed;
// the upload manager does it when its input fails, but with the upload's
// context, which therefore must still be live. So the archive is fed to the
// upload through a pipe, and any failure, the caller's cancellation included,
// is a read error of the pipe; the upload's own context is cancelled only if
// the upload has not ended abortGrace after the caller's was.
func (s *BlobStore) uploadS3(ctx context.Context, owner, src, id string) (Info, error) {
	uctx, ucancel := context.WithCancel(context.WithoutCancel(ctx))
	defer ucancel()
	pr, pw := io.Pipe()
	stop := context.AfterFunc(ctx, func() {
		pr.CloseWithError(ctx.Err())
		time.AfterFunc(abortGrace, ucancel)
	})
	defer stop()

	type result struct {
		info Info
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var out io.Writer = pw
		if s.hook != nil {
			out = s.hook(pw)
		}
		info, err := writeArchive(out, src, owner)
		if err == nil && info.ID != id {
			err = errChanged
		}
		pw.CloseWithError(err) // nil: EOF, the upload completes
		done <- result{info, err}
	}()
	err := s.bucket.Upload(uctx, key(id), pr, &blob.WriterOptions{ContentType: tarType})
	pr.CloseWithError(errUploadEnded) // unblocks the archive if the upload failed first
	res := <-done
	switch {
	case res.err == errChanged:
		return res.info, nil
	case res.err != nil && !errors.Is(res.err, errUploadEnded):
		return Info{}, res.err
	case err != nil:
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return Info{}, err
	}
	s.uploads.Add(1)
	return res.info, nil
}

// abortGrace is how long an S3 upload whose caller gave up may take to abort
// before its requests are cancelled too.
const abortGrace = 30 * time.Second

// tarType is the content type of checkpoint objects.
const tarType = "application/x-tar"

// errUploadEnded stops an archive whose upload ended early (it failed).
var errUploadEnded = errors.New("upload ended")

// errChanged means the tree changed between hashing and uploading.
var errChanged = errors.New("checkpoint changed while it was uploaded")

// Restore makes dst hold exactly checkpoint id's content, like Store.Restore:
// dst is created if needed and emptied, and keeps its own mode. An unknown ID
// is an error wrapping virga.ErrNotFound. On error, dst is left as it was.
func (s *BlobStore) Restore(id, dst string) error {
	return s.RestoreContext(context.Background(), id, dst)
}

// RestoreContext is Restore with a context.
func (s *BlobStore) RestoreContext(ctx context.Context, id, dst string) error {
	if !ValidID(id) {
		return fmt.Errorf("restoring checkpoint %q: %w", id, ErrInvalidID)
	}
	r, err := s.bucket.NewReader(ctx, key(id), nil)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return fmt.Errorf("restoring checkpoint %s from %s: %w", id, s.location, virga.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("restoring checkpoint %s from %s: %w", id, s.location, err)
	}
	defer r.Close()
	if _, err := extractArchive(r, dst, -1); err != nil {
		return fmt.Errorf("restoring checkpoint %s from %s into %s: %w", id, s.location, dst, err)
	}
	return nil
}

// Delete removes checkpoint id. Deleting a checkpoint that does not exist is
// not an error.
func (s *BlobStore) Delete(id string) error {
	return s.DeleteContext(context.Background(), id)
}

// DeleteContext is Delete with a context.
func (s *BlobStore) DeleteContext(ctx context.Context, id string) error {
	if !ValidID(id) {
		return fmt.Errorf("deleting checkpoint %q: %w", id, ErrInvalidID)
	}
	err := s.bucket.Delete(ctx, key(id))
	if err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return fmt.Errorf("deleting checkpoint %s from %s: %w", id, s.location, err)
	}
	return nil
}
