package checkpoint_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/checkpoint"
)

// backend is one kind of checkpoint storage under test.
type backend struct {
	storage checkpoint.Storage
	// objects lists what the storage holds: object keys, or the directory
	// Store's entries.
	objects func() []string
	// uploads counts objects written (nil for the directory Store).
	uploads func() int64
	// s3 counts the S3 server's requests (nil for the others).
	s3 *s3Counts
	// files lists the regular files under fileblob's directory (nil for the
	// others).
	files func() []string
}

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

func blobBackend(t testing.TB, s checkpoint.Storage, listing *blob.Bucket) backend {
	t.Helper()
	bs, ok := s.(*checkpoint.BlobStore)
	if !ok {
		t.Fatalf("storage is a %T, want a *checkpoint.BlobStore", s)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return backend{
		storage: s,
		objects: func() []string { return listBucket(t, listing) },
		uploads: func() int64 { return checkpoint.Uploads(bs) },
	}
}

// s3Counts counts requests to the fake S3 server.
type s3Counts struct {
	writes    atomic.Int64 // PUT and POST requests
	multipart atomic.Int64 // multipart uploads created
	ended     atomic.Int64 // multipart uploads completed or aborted
}

// fakeS3 starts an S3-compatible server holding bucket "ckpt" and returns
// its URL and counts of its requests.
func fakeS3(t testing.TB) (string, *s3Counts) {
	t.Helper()
	mem := s3mem.New()
	if err := mem.CreateBucket("ckpt"); err != nil {
		t.Fatal(err)
	}
	faker := gofakes3.New(mem)
	counts := new(s3Counts)
	h := faker.Server()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.Method == http.MethodPut || r.Method == http.MethodPost {
			counts.writes.Add(1)
		}
		switch {
		case r.Method == http.MethodPost && q.Has("uploads"):
			counts.multipart.Add(1)
		case (r.Method == http.MethodPost || r.Method == http.MethodDelete) && q.Has("uploadId"):
			counts.ended.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	// Credentials for the signature (the fake accepts any), and nothing from
	// this machine's AWS configuration.
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":           "test",
		"AWS_SECRET_ACCESS_KEY":       "test",
		"AWS_SESSION_TOKEN":           "",
		"AWS_PROFILE":                 "",
		"AWS_CONFIG_FILE":             filepath.Join(t.TempDir(), "none"),
		"AWS_SHARED_CREDENTIALS_FILE": filepath.Join(t.TempDir(), "none"),
		"AWS_EC2_METADATA_DISABLED":   "true",
	} {
		if tt, ok := t.(*testing.T); ok {
			tt.Setenv(k, v)
		}
	}
	u := "s3://ckpt?endpoint=" + url.QueryEscape(ts.URL) + "&use_path_style=true&region=us-east-1&disable_https=true"
	return u, counts
}

// backends returns one of each kind of storage, fresh.
var backends = []struct {
	name string
	open func(t *testing.T) backend
}{
	{"dir", func(t *testing.T) backend {
		s := open(t)
		return backend{storage: s, objects: func() []string {
			entries, err := os.ReadDir(s.Root())
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			return names
		}}
	}},
	{"file", func(t *testing.T) backend {
		root := filepath.Join(tempDir(t), "bucket")
		s, err := checkpoint.OpenURL(context.Background(), "file://"+root)
		if err != nil {
			t.Fatal(err)
		}
		listing, err := blob.OpenBucket(context.Background(), "file://"+root)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { listing.Close() })
		b := blobBackend(t, s, listing)
		b.files = func() []string {
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
	{"mem", func(t *testing.T) backend {
		bucket := memblob.OpenBucket(nil)
		return blobBackend(t, checkpoint.NewBlobStore(bucket, "mem://"), bucket)
	}},
	{"s3", func(t *testing.T) backend {
		u, counts := fakeS3(t)
		s, err := checkpoint.OpenURL(context.Background(), u)
		if err != nil {
			t.Fatal(err)
		}
		listing, err := blob.OpenBucket(context.Background(), u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { listing.Close() })
		b := blobBackend(t, s, listing)
		b.s3 = counts
		return b
	}},
}

// reference returns the directory Store's Info for src saved for owner.
func reference(t *testing.T, owner, src string) checkpoint.Info {
	t.Helper()
	info, err := open(t).SaveFor(owner, src)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func TestStorageConformance(t *testing.T) {
	for _, bk := range backends {
		t.Run(bk.name, func(t *testing.T) {
			t.Run("RoundTrip", func(t *testing.T) {
				b := bk.open(t)
				src := filepath.Join(tempDir(t), "src")
				write(t, src, sample)
				want := reference(t, "", src)
				info, err := b.storage.Save(src)
				if err != nil {
					t.Fatal(err)
				}
				if info != want {
					t.Errorf("Save: %+v, the directory Store: %+v", info, want)
				}
				if !b.storage.Exists(info.ID) {
					t.Error("Exists after Save: false")
				}
				dst := filepath.Join(tempDir(t), "dst")
				write(t, dst, tree{"stale": file(0o644, "x"), "d": dir(0o755), "d/f": file(0o644, "f"), "model.bin": file(0o600, "old")})
				if err := b.storage.Restore(info.ID, dst); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(sample, read(t, dst)); diff != "" {
					t.Errorf("restored tree (-want +got):\n%s", diff)
				}
				if again := reference(t, "", dst); again.ID != info.ID {
					t.Errorf("the restored tree has ID %s, want %s", again.ID, info.ID)
				}
			})

			t.Run("Owners", func(t *testing.T) {
				b := bk.open(t)
				src := filepath.Join(tempDir(t), "src")
				write(t, src, tree{"w": file(0o644, "weights")})
				ids := map[string]bool{}
				for _, owner := range []string{"", "trial-1", "trial-2"} {
					info, err := b.storage.SaveFor(owner, src)
					if err != nil {
						t.Fatal(err)
					}
					if want := reference(t, owner, src); info != want {
						t.Errorf("SaveFor(%q): %+v, the directory Store: %+v", owner, info, want)
					}
					ids[info.ID] = true
				}
				if len(ids) != 3 {
					t.Errorf("three owners gave %d IDs", len(ids))
				}
				if n := len(b.objects()); n != 3 {
					t.Errorf("the storage holds %d objects, want 3", n)
				}
			})

			t.Run("Dedup", func(t *testing.T) {
				b := bk.open(t)
				src := filepath.Join(tempDir(t), "src")
				write(t, src, sample)
				first, err := b.storage.Save(src)
				if err != nil {
					t.Fatal(err)
				}
				var uploads, writes int64
				if b.uploads != nil {
					uploads = b.uploads()
				}
				if b.s3 != nil {
					writes = b.s3.writes.Load()
				}
				copyOf := filepath.Join(tempDir(t), "copy")
				write(t, copyOf, sample)
				for _, dir := range []string{src, copyOf} {
					again, err := b.storage.Save(dir)
					if err != nil {
						t.Fatal(err)
					}
					if again != first {
						t.Errorf("second Save: %+v, first: %+v", again, first)
					}
				}
				if b.uploads != nil && b.uploads() != uploads {
					t.Errorf("saving equal content again uploaded %d objects", b.uploads()-uploads)
				}
				if b.s3 != nil && b.s3.writes.Load() != writes {
					t.Errorf("saving equal content again sent %d write requests", b.s3.writes.Load()-writes)
				}
				if got := b.objects(); len(got) != 1 {
					t.Errorf("the storage holds %v, want one checkpoint", got)
				}
			})

			t.Run("Delete", func(t *testing.T) {
				b := bk.open(t)
				src := filepath.Join(tempDir(t), "src")
				write(t, src, tree{"a": file(0o644, "a")})
				info, err := b.storage.Save(src)
				if err != nil {
					t.Fatal(err)
				}
				for range 2 {
					if err := b.storage.Delete(info.ID); err != nil {
						t.Fatalf("Delete: %v", err)
					}
				}
				if b.storage.Exists(info.ID) {
					t.Error("Exists after Delete: true")
				}
				if got := b.objects(); len(got) != 0 {
					t.Errorf("after Delete the storage holds %v", got)
				}
				if err := b.storage.Restore(info.ID, tempDir(t)); !errors.Is(err, virga.ErrNotFound) {
					t.Errorf("Restore of a deleted checkpoint: %v, want ErrNotFound", err)
				}
				// Saved again after a Delete, it is stored again.
				if again, err := b.storage.Save(src); err != nil || !b.storage.Exists(again.ID) {
					t.Errorf("Save after Delete: %+v, %v; Exists %v", again, err, b.storage.Exists(again.ID))
				}
			})

			t.Run("Invalid", func(t *testing.T) {
				b := bk.open(t)
				for _, id := range []string{"", "../x", strings.Repeat("A", 64), strings.Repeat("a", 63)} {
					if b.storage.Exists(id) {
						t.Errorf("Exists(%q): true", id)
					}
					if err := b.storage.Restore(id, tempDir(t)); !errors.Is(err, checkpoint.ErrInvalidID) {
						t.Errorf("Restore(%q): %v, want ErrInvalidID", id, err)
					}
					if err := b.storage.Delete(id); !errors.Is(err, checkpoint.ErrInvalidID) {
						t.Errorf("Delete(%q): %v, want ErrInvalidID", id, err)
					}
				}
				if b.storage.Exists(strings.Repeat("a", 64)) {
					t.Error("Exists of an unknown ID: true")
				}
			})

			t.Run("Nothing", func(t *testing.T) {
				b := bk.open(t)
				for _, src := range []string{filepath.Join(tempDir(t), "missing"), tempDir(t)} {
					if info, err := b.storage.Save(src); err != nil || info != (checkpoint.Info{}) {
						t.Errorf("Save(%s): %+v, %v; want the zero Info", src, info, err)
					}
				}
				if got := b.objects(); len(got) != 0 {
					t.Errorf("saving nothing stored %v", got)
				}
			})

			t.Run("Unsupported", func(t *testing.T) {
				b := bk.open(t)
				src := filepath.Join(tempDir(t), "src")
				write(t, src, tree{"w": file(0o644, "w"), "etc": link("/etc")})
				if _, err := b.storage.Save(src); !errors.Is(err, checkpoint.ErrUnsupported) {
					t.Errorf("Save with a link to /etc: %v, want ErrUnsupported", err)
				}
				if got := b.objects(); len(got) != 0 {
					t.Errorf("a refused Save stored %v", got)
				}
			})

			t.Run("Large", func(t *testing.T) {
				b := bk.open(t)
				src := filepath.Join(tempDir(t), "src")
				big := make([]byte, 20<<20)
				rand.NewChaCha8([32]byte{1}).Read(big)
				write(t, src, tree{"small": file(0o644, "s"), "d": dir(0o755)})
				if err := os.WriteFile(filepath.Join(src, "d", "big.bin"), big, 0o644); err != nil {
					t.Fatal(err)
				}
				want := reference(t, "trial-9", src)
				info, err := b.storage.SaveFor("trial-9", src)
				if err != nil {
					t.Fatal(err)
				}
				if info != want {
					t.Errorf("SaveFor: %+v, the directory Store: %+v", info, want)
				}
				dst := filepath.Join(tempDir(t), "dst")
				if err := b.storage.Restore(info.ID, dst); err != nil {
					t.Fatal(err)
				}
				got, err := os.ReadFile(filepath.Join(dst, "d", "big.bin"))
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, big) {
					t.Error("the restored 20 MB file differs")
				}
			})
		})
	}
}

// failingWriter passes n bytes, then fails (or calls cancel and goes on).
type failingWriter struct {
	w      io.Writer
	n      int
	cancel func()
}

var errInjected = errors.New("injected write failure")

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.n <= 0 {
		if f.cancel == nil {
			return 0, errInjected
		}
		f.cancel()
	}
	f.n -= len(p)
	return f.w.Write(p)
}

// TestAbortedUploadLeavesNothing: an upload that fails midway, by an error or
// a cancelled context, stores nothing under any name.
func TestAbortedUploadLeavesNothing(t *testing.T) {
	for _, bk := range backends {
		if bk.name == "dir" {
			continue
		}
		for _, how := range []string{"error", "cancel"} {
			t.Run(bk.name+"/"+how, func(t *testing.T) {
				b := bk.open(t)
				bs := b.storage.(*checkpoint.BlobStore)
				src := filepath.Join(tempDir(t), "src")
				big := make([]byte, 24<<20)
				rand.NewChaCha8([32]byte{2}).Read(big)
				write(t, src, tree{"a": file(0o644, "a")})
				if err := os.WriteFile(filepath.Join(src, "big"), big, 0o644); err != nil {
					t.Fatal(err)
				}
				want := reference(t, "", src)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				checkpoint.SetUploadHook(bs, func(w io.Writer) io.Writer {
					f := &failingWriter{w: w, n: 17 << 20}
					if how == "cancel" {
						f.cancel = cancel
					}
					return f
				})
				_, err := bs.SaveForContext(ctx, "", src)
				if err == nil {
					t.Fatal("an aborted upload returned no error")
				}
				if how == "error" && !errors.Is(err, errInjected) {
					t.Errorf("SaveFor: %v, want the writer's error", err)
				}
				if how == "cancel" && !errors.Is(err, context.Canceled) {
					t.Errorf("SaveFor: %v, want context.Canceled", err)
				}
				if b.storage.Exists(want.ID) {
					t.Error("Exists after an aborted upload: true")
				}
				if got := b.objects(); len(got) != 0 {
					t.Errorf("an aborted upload left objects %v", got)
				}
				if b.files != nil {
					if got := b.files(); len(got) != 0 {
						t.Errorf("an aborted upload left files %v", got)
					}
				}
				if b.s3 != nil {
					// The upload was aborted midway, and S3 was told.
					created, ended := b.s3.multipart.Load(), b.s3.ended.Load()
					if created == 0 || created != ended {
						t.Errorf("multipart uploads: %d created, %d completed or aborted; want some, all ended", created, ended)
					}
				}
				// The next Save, not aborted, stores it.
				checkpoint.SetUploadHook(bs, nil)
				info, err := b.storage.Save(src)
				if err != nil || info != want || !b.storage.Exists(want.ID) {
					t.Errorf("Save after an aborted one: %+v, %v; want %+v stored", info, err, want)
				}
			})
		}
	}
}

func TestOpenURL(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(tempDir(t), "ckpt")
	s, err := checkpoint.OpenURL(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := s.(*checkpoint.Store); !ok || st.Root() != dir || s.Location() != dir {
		t.Errorf("OpenURL(a path): %T at %s, want the directory Store at %s", s, s.Location(), dir)
	}
	for _, u := range []string{"mem://", "file://" + filepath.Join(tempDir(t), "b"), "file://localhost" + filepath.Join(tempDir(t), "b")} {
		s, err := checkpoint.OpenURL(ctx, u)
		if err != nil {
			t.Errorf("OpenURL(%s): %v", u, err)
			continue
		}
		if _, ok := s.(*checkpoint.BlobStore); !ok || s.Location() != u {
			t.Errorf("OpenURL(%s): %T at %s, want a BlobStore", u, s, s.Location())
		}
		s.Close()
	}
	bad := []struct{ url, want string }{
		{"", "no location"},
		{"ftp://host/x", `unknown scheme "ftp"`},
		{"file://relative/path", "file:///absolute/path"},
		{"s3://", "s3://bucket-name"},
		{"mem://?bogus=1", "bogus"},
	}
	for _, tt := range bad {
		_, err := checkpoint.OpenURL(ctx, tt.url)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.url) {
			t.Errorf("OpenURL(%q): %v, want an error naming the URL and saying %q", tt.url, err, tt.want)
		}
	}
	// A bucket that does not exist is refused at once.
	u, _ := fakeS3(t)
	missing := strings.Replace(u, "s3://ckpt", "s3://nosuchbucket", 1)
	if _, err := checkpoint.OpenURL(ctx, missing); err == nil || !strings.Contains(err.Error(), "nosuchbucket") {
		t.Errorf("OpenURL of a missing bucket: %v, want an error naming it", err)
	}
	// prefix= keeps the checkpoints under it.
	s, err = checkpoint.OpenURL(ctx, u+"&prefix=team/a/")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	src := filepath.Join(tempDir(t), "src")
	write(t, src, tree{"a": file(0o644, "a")})
	info, err := s.Save(src)
	if err != nil {
		t.Fatal(err)
	}
	listing, err := blob.OpenBucket(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer listing.Close()
	if got, want := listBucket(t, listing), []string{"team/a/checkpoints/" + info.ID + ".tar"}; !slices.Equal(got, want) {
		t.Errorf("the bucket holds %v, want %v", got, want)
	}
}
