package blobstore_test

import (
	"context"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"

	"github.com/virga-ml/virga/internal/checkpoint"
	"github.com/virga-ml/virga/internal/checkpoint/blobstore"
	"github.com/virga-ml/virga/internal/checkpoint/checkpointtest"
)

// listBucket returns every key in b.
func listBucket(t testing.TB, b *blob.Bucket) []string {
	t.Helper()
	var keys []string
	it := b.List(nil)
	for {
		o, err := it.Next(context.Background())
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("listing: %v", err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// storeBackend is s under test, its objects listed through listing.
func storeBackend(t testing.TB, s checkpoint.Storage, listing *blob.Bucket) checkpointtest.Backend {
	t.Helper()
	bs, ok := s.(*blobstore.Store)
	if !ok {
		t.Fatalf("storage is a %T, want a *blobstore.Store", s)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return checkpointtest.Backend{
		Storage:        s,
		Objects:        func() []string { return listBucket(t, listing) },
		Uploads:        bs.Uploads,
		SaveForContext: bs.SaveForContext,
		SetUploadHook:  bs.SetUploadHook,
	}
}

// backends returns a fresh store of each kind this package opens.
var backends = []struct {
	name string
	open func(t *testing.T) checkpointtest.Backend
}{
	{"file", func(t *testing.T) checkpointtest.Backend {
		root := filepath.Join(checkpointtest.TempDir(t), "bucket")
		s, err := checkpoint.OpenURL(context.Background(), "file://"+root, blobstore.Schemes())
		if err != nil {
			t.Fatal(err)
		}
		listing, err := blob.OpenBucket(context.Background(), "file://"+root)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { listing.Close() })
		b := storeBackend(t, s, listing)
		b.Files = func() []string {
			var files []string
			err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					rel, _ := filepath.Rel(root, p)
					files = append(files, filepath.ToSlash(rel))
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			return files
		}
		return b
	}},
	{"mem", func(t *testing.T) checkpointtest.Backend {
		bucket := memblob.OpenBucket(nil)
		return storeBackend(t, blobstore.New(bucket, "mem://", nil), bucket)
	}},
}

func TestStorageConformance(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) { checkpointtest.RunStorage(t, bk.open) })
	}
}

// TestAbortedUploadLeavesNothing: an upload that fails midway, by an error or
// a cancelled context, stores nothing under any name.
func TestAbortedUploadLeavesNothing(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) { checkpointtest.RunAbortedUpload(t, bk.open) })
	}
}

func TestOpenURL(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(checkpointtest.TempDir(t), "ckpt")
	s, err := checkpoint.OpenURL(ctx, dir, blobstore.Schemes())
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := s.(*checkpoint.Store); !ok || st.Root() != dir || s.Location() != dir {
		t.Errorf("OpenURL(a path): %T at %s, want the directory Store at %s", s, s.Location(), dir)
	}
	tmp := checkpointtest.TempDir(t)
	for _, u := range []string{"mem://", "file://" + filepath.Join(tmp, "b"), "file://localhost" + filepath.Join(tmp, "c")} {
		s, err := checkpoint.OpenURL(ctx, u, blobstore.Schemes())
		if err != nil {
			t.Errorf("OpenURL(%s): %v", u, err)
			continue
		}
		if _, ok := s.(*blobstore.Store); !ok || s.Location() != u {
			t.Errorf("OpenURL(%s): %T at %s, want a blobstore.Store", u, s, s.Location())
		}
		s.Close()
	}
	bad := []struct{ url, want string }{
		{"", "no location"},
		{"ftp://host/x", `unknown scheme "ftp"; want a directory path, file://, mem://`},
		{"s3://bucket", `unknown scheme "s3"`},
		{"file://relative/path", "file:///absolute/path"},
		{"mem://?bogus=1", "bogus"},
	}
	for _, tt := range bad {
		_, err := checkpoint.OpenURL(ctx, tt.url, blobstore.Schemes())
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.url) {
			t.Errorf("OpenURL(%q): %v, want an error naming the URL and saying %q", tt.url, err, tt.want)
		}
	}
}
