package checkpoint

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
)

// Storage is where checkpoints are kept: a directory (Store) or a bucket of
// an object store (package blobstore). Both give a tree the same ID.
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

var _ Storage = (*Store)(nil)

// Location returns the store's directory (an absolute path).
func (s *Store) Location() string { return s.root }

// Close does nothing: a Store holds no resources.
func (s *Store) Close() error { return nil }

// An Opener opens the checkpoint storage at a URL of its scheme. location is
// the URL as the user gave it, for messages and Storage.Location; u is it
// parsed. An Opener checks that the storage can be reached.
type Opener func(ctx context.Context, u *url.URL, location string) (Storage, error)

// Schemes maps a URL scheme ("s3") to the Opener of its storage. This package
// knows none: the object-store drivers (package blobstore for file:// and
// mem://, blobstore/cloud for s3://, gs:// and azblob://) are linked and
// registered by the binary that wants them, so that what imports checkpoint
// does not link their SDKs.
type Schemes map[string]Opener

// OpenURL opens the checkpoint storage at location: a path (no "scheme://")
// is the directory Store there (see Open); a URL is opened by the Opener of
// its scheme in schemes.
func OpenURL(ctx context.Context, location string, schemes Schemes) (Storage, error) {
	if location == "" {
		return nil, fmt.Errorf("opening checkpoint storage: no location given; want %s", schemes.forms())
	}
	if !strings.Contains(location, "://") {
		return Open(location)
	}
	u, err := url.Parse(location)
	if err != nil {
		return nil, fmt.Errorf("opening checkpoint storage %q: %v; want %s", location, err, schemes.forms())
	}
	open := schemes[u.Scheme]
	if open == nil {
		return nil, fmt.Errorf("opening checkpoint storage %q: unknown scheme %q; want %s", location, u.Scheme, schemes.forms())
	}
	return open(ctx, u, location)
}

// forms says what OpenURL accepts with schemes, for its errors.
func (s Schemes) forms() string {
	forms := []string{"a directory path"}
	for _, name := range slices.Sorted(maps.Keys(s)) {
		forms = append(forms, name+"://")
	}
	return strings.Join(forms, ", ")
}
