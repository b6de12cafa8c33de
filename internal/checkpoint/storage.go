package checkpoint

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/azureblob" // azblob://
	_ "gocloud.dev/blob/fileblob"  // file://
	_ "gocloud.dev/blob/gcsblob"   // gs://
	_ "gocloud.dev/blob/memblob"   // mem://
	_ "gocloud.dev/blob/s3blob"    // s3://
)

// Storage is where checkpoints are kept: a directory (Store) or a bucket of
// an object store (BlobStore). Both give a tree the same ID.
type Storage interface {
	// Save stores the content of directory src as a checkpoint (SaveFor with
	// no owner).
	Save(src string) (Info, error)
	// SaveFor stores the content of directory src as an immutable checkpoint
	// whose ID is scoped to owner; a missing or empty src gives the zero Info.
	SaveFor(owner, src string) (Info, error)
	// Exists reports whether checkpoint id is stored.
	Exists(id string) bool
	// Restore makes dst hold exactly checkpoint id's content.
	Restore(id, dst string) error
	// Delete removes checkpoint id (idempotent).
	Delete(id string) error
	// Location names where the checkpoints are: a directory or a URL.
	Location() string
	// Close releases the storage's resources.
	Close() error
}

var (
	_ Storage = (*Store)(nil)
	_ Storage = (*BlobStore)(nil)
)

// Location returns the store's directory (an absolute path).
func (s *Store) Location() string { return s.root }

// Close does nothing: a Store holds no resources.
func (s *Store) Close() error { return nil }

// storageForms lists what OpenURL accepts, for its errors.
const storageForms = "a directory path, file:///absolute/path, s3://bucket, gs://bucket, azblob://container or mem://"

// OpenURL opens the checkpoint storage at location:
//
//   - a path (no "scheme://"): the directory Store there (see Open);
//   - file:///absolute/path: a BlobStore over that directory (fileblob; unless
//     the URL says otherwise, the directory is created, temporary files are
//     written next to their objects so that they are renamed within one file
//     system, and no metadata side files are written);
//   - s3://bucket, gs://bucket, azblob://container: a BlobStore over that
//     bucket, with gocloud.dev's URL parameters (for S3 e.g. region=,
//     endpoint=, use_path_style=true; credentials from the environment);
//   - mem://: a BlobStore in memory (for tests).
//
// Any of the URLs may carry prefix=dir/ to keep the checkpoints under it.
// OpenURL checks that a bucket can be reached.
func OpenURL(ctx context.Context, location string) (Storage, error) {
	if location == "" {
		return nil, fmt.Errorf("opening checkpoint storage: no location given; want %s", storageForms)
	}
	if !strings.Contains(location, "://") {
		return Open(location)
	}
	u, err := url.Parse(location)
	if err != nil {
		return nil, fmt.Errorf("opening checkpoint storage %q: %v; want %s", location, err, storageForms)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" || !filepath.IsAbs(u.Path) {
			return nil, fmt.Errorf("opening checkpoint storage %q: a file URL needs an absolute path, file:///absolute/path (three slashes), or give the path itself", location)
		}
		q := u.Query()
		for k, v := range map[string]string{"create_dir": "true", "no_tmp_dir": "true", "metadata": "skip"} {
			if _, ok := q[k]; !ok {
				q.Set(k, v)
			}
		}
		u.RawQuery = q.Encode()
	case "s3", "gs", "azblob":
		if u.Host == "" {
			return nil, fmt.Errorf("opening checkpoint storage %q: no bucket named; want %s://bucket-name", location, u.Scheme)
		}
	case "mem":
	default:
		return nil, fmt.Errorf("opening checkpoint storage %q: unknown scheme %q; want %s", location, u.Scheme, storageForms)
	}
	b, err := blob.OpenBucket(ctx, u.String())
	if err != nil {
		return nil, fmt.Errorf("opening checkpoint storage %q: %w", location, err)
	}
	ok, err := b.IsAccessible(ctx)
	if err == nil && !ok {
		err = fmt.Errorf("the bucket does not exist")
	}
	if err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("opening checkpoint storage %q: %w", location, err)
	}
	return NewBlobStore(b, location), nil
}
