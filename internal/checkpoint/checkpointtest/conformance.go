package checkpointtest

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/checkpoint"
)

// Backend is one checkpoint Storage under test, with what the suite reads
// of it besides its methods.
type Backend struct {
	Storage checkpoint.Storage
	// Objects lists what the storage holds: object keys, or the directory
	// Store's entries.
	Objects func() []string
	// Uploads counts objects written (nil for the directory Store).
	Uploads func() int64
	// Writes counts the write requests the storage's server received (nil
	// when they are not counted).
	Writes func() int64
	// Multipart counts the multipart uploads the server created and those
	// completed or aborted (S3; nil for the others).
	Multipart func() (created, ended int64)
	// Files lists the regular files under a fileblob bucket's directory (nil
	// for the others).
	Files func() []string
	// SaveForContext and SetUploadHook are the object store's (for
	// RunAbortedUpload; nil for the directory Store).
	SaveForContext func(ctx context.Context, owner, src string) (checkpoint.Info, error)
	SetUploadHook  func(hook func(io.Writer) io.Writer)
}

// Reference returns the directory Store's Info for src saved for owner: the
// ID every Storage must give it.
func Reference(t *testing.T, owner, src string) checkpoint.Info {
	t.Helper()
	s, err := checkpoint.Open(filepath.Join(TempDir(t), "reference"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.SaveFor(owner, src)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// RunStorage runs the conformance suite of a Storage: open returns a fresh,
// empty one for each subtest. Each of its checks holds for the directory
// Store and every object store alike, with the same IDs.
func RunStorage(t *testing.T, open func(t *testing.T) Backend) {
	t.Run("RoundTrip", func(t *testing.T) {
		b := open(t)
		src := filepath.Join(TempDir(t), "src")
		Write(t, src, Sample)
		want := Reference(t, "", src)
		info, err := b.Storage.Save(src)
		if err != nil {
			t.Fatal(err)
		}
		if info != want {
			t.Errorf("Save: %+v, the directory Store: %+v", info, want)
		}
		if !b.Storage.Exists(info.ID) {
			t.Error("Exists after Save: false")
		}
		dst := filepath.Join(TempDir(t), "dst")
		Write(t, dst, Tree{"stale": File(0o644, "x"), "d": Dir(0o755), "d/f": File(0o644, "f"), "model.bin": File(0o600, "old")})
		if err := b.Storage.Restore(info.ID, dst); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(Sample, Read(t, dst)); diff != "" {
			t.Errorf("restored tree (-want +got):\n%s", diff)
		}
		if again := Reference(t, "", dst); again.ID != info.ID {
			t.Errorf("the restored tree has ID %s, want %s", again.ID, info.ID)
		}
	})

	t.Run("Owners", func(t *testing.T) {
		b := open(t)
		src := filepath.Join(TempDir(t), "src")
		Write(t, src, Tree{"w": File(0o644, "weights")})
		ids := map[string]bool{}
		for _, owner := range []string{"", "trial-1", "trial-2"} {
			info, err := b.Storage.SaveFor(owner, src)
			if err != nil {
				t.Fatal(err)
			}
			if want := Reference(t, owner, src); info != want {
				t.Errorf("SaveFor(%q): %+v, the directory Store: %+v", owner, info, want)
			}
			ids[info.ID] = true
		}
		if len(ids) != 3 {
			t.Errorf("three owners gave %d IDs", len(ids))
		}
		if n := len(b.Objects()); n != 3 {
			t.Errorf("the storage holds %d objects, want 3", n)
		}
	})

	t.Run("Dedup", func(t *testing.T) {
		b := open(t)
		src := filepath.Join(TempDir(t), "src")
		Write(t, src, Sample)
		first, err := b.Storage.Save(src)
		if err != nil {
			t.Fatal(err)
		}
		var uploads, writes int64
		if b.Uploads != nil {
			uploads = b.Uploads()
		}
		if b.Writes != nil {
			writes = b.Writes()
		}
		copyOf := filepath.Join(TempDir(t), "copy")
		Write(t, copyOf, Sample)
		for _, dir := range []string{src, copyOf} {
			again, err := b.Storage.Save(dir)
			if err != nil {
				t.Fatal(err)
			}
			if again != first {
				t.Errorf("second Save: %+v, first: %+v", again, first)
			}
		}
		if b.Uploads != nil && b.Uploads() != uploads {
			t.Errorf("saving equal content again uploaded %d objects", b.Uploads()-uploads)
		}
		if b.Writes != nil && b.Writes() != writes {
			t.Errorf("saving equal content again sent %d write requests", b.Writes()-writes)
		}
		if got := b.Objects(); len(got) != 1 {
			t.Errorf("the storage holds %v, want one checkpoint", got)
		}
	})

	t.Run("Delete", func(t *testing.T) {
		b := open(t)
		src := filepath.Join(TempDir(t), "src")
		Write(t, src, Tree{"a": File(0o644, "a")})
		info, err := b.Storage.Save(src)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := b.Storage.Delete(info.ID); err != nil {
				t.Fatalf("Delete: %v", err)
			}
		}
		if b.Storage.Exists(info.ID) {
			t.Error("Exists after Delete: true")
		}
		if got := b.Objects(); len(got) != 0 {
			t.Errorf("after Delete the storage holds %v", got)
		}
		if err := b.Storage.Restore(info.ID, TempDir(t)); !errors.Is(err, virga.ErrNotFound) {
			t.Errorf("Restore of a deleted checkpoint: %v, want ErrNotFound", err)
		}
		// Saved again after a Delete, it is stored again.
		if again, err := b.Storage.Save(src); err != nil || !b.Storage.Exists(again.ID) {
			t.Errorf("Save after Delete: %+v, %v; Exists %v", again, err, b.Storage.Exists(again.ID))
		}
	})

	t.Run("Invalid", func(t *testing.T) {
		b := open(t)
		for _, id := range []string{"", "../x", strings.Repeat("A", 64), strings.Repeat("a", 63)} {
			if b.Storage.Exists(id) {
				t.Errorf("Exists(%q): true", id)
			}
			if err := b.Storage.Restore(id, TempDir(t)); !errors.Is(err, checkpoint.ErrInvalidID) {
				t.Errorf("Restore(%q): %v, want ErrInvalidID", id, err)
			}
			if err := b.Storage.Delete(id); !errors.Is(err, checkpoint.ErrInvalidID) {
				t.Errorf("Delete(%q): %v, want ErrInvalidID", id, err)
			}
		}
		if b.Storage.Exists(strings.Repeat("a", 64)) {
			t.Error("Exists of an unknown ID: true")
		}
	})

	t.Run("Nothing", func(t *testing.T) {
		b := open(t)
		for _, src := range []string{filepath.Join(TempDir(t), "missing"), TempDir(t)} {
			if info, err := b.Storage.Save(src); err != nil || info != (checkpoint.Info{}) {
				t.Errorf("Save(%s): %+v, %v; want the zero Info", src, info, err)
			}
		}
		if got := b.Objects(); len(got) != 0 {
			t.Errorf("saving nothing stored %v", got)
		}
	})

	t.Run("Unsupported", func(t *testing.T) {
		b := open(t)
		src := filepath.Join(TempDir(t), "src")
		Write(t, src, Tree{"w": File(0o644, "w"), "etc": Link("/etc")})
		if _, err := b.Storage.Save(src); !errors.Is(err, checkpoint.ErrUnsupported) {
			t.Errorf("Save with a link to /etc: %v, want ErrUnsupported", err)
		}
		if got := b.Objects(); len(got) != 0 {
			t.Errorf("a refused Save stored %v", got)
		}
	})

	t.Run("Large", func(t *testing.T) {
		b := open(t)
		src := filepath.Join(TempDir(t), "src")
		big := make([]byte, 20<<20)
		rand.NewChaCha8([32]byte{1}).Read(big)
		Write(t, src, Tree{"small": File(0o644, "s"), "d": Dir(0o755)})
		if err := os.WriteFile(filepath.Join(src, "d", "big.bin"), big, 0o644); err != nil {
			t.Fatal(err)
		}
		want := Reference(t, "trial-9", src)
		info, err := b.Storage.SaveFor("trial-9", src)
		if err != nil {
			t.Fatal(err)
		}
		if info != want {
			t.Errorf("SaveFor: %+v, the directory Store: %+v", info, want)
		}
		dst := filepath.Join(TempDir(t), "dst")
		if err := b.Storage.Restore(info.ID, dst); err != nil {
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

// RunAbortedUpload checks that an upload of an object store that fails
// midway, by an error or a cancelled context, stores nothing under any name
// (open's Backend must have SaveForContext and SetUploadHook), and that the
// next Save stores it.
func RunAbortedUpload(t *testing.T, open func(t *testing.T) Backend) {
	for _, how := range []string{"error", "cancel"} {
		t.Run(how, func(t *testing.T) {
			b := open(t)
			src := filepath.Join(TempDir(t), "src")
			big := make([]byte, 24<<20)
			rand.NewChaCha8([32]byte{2}).Read(big)
			Write(t, src, Tree{"a": File(0o644, "a")})
			if err := os.WriteFile(filepath.Join(src, "big"), big, 0o644); err != nil {
				t.Fatal(err)
			}
			want := Reference(t, "", src)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			b.SetUploadHook(func(w io.Writer) io.Writer {
				f := &failingWriter{w: w, n: 17 << 20}
				if how == "cancel" {
					f.cancel = cancel
				}
				return f
			})
			_, err := b.SaveForContext(ctx, "", src)
			if err == nil {
				t.Fatal("an aborted upload returned no error")
			}
			if how == "error" && !errors.Is(err, errInjected) {
				t.Errorf("SaveFor: %v, want the writer's error", err)
			}
			if how == "cancel" && !errors.Is(err, context.Canceled) {
				t.Errorf("SaveFor: %v, want context.Canceled", err)
			}
			if b.Storage.Exists(want.ID) {
				t.Error("Exists after an aborted upload: true")
			}
			if got := b.Objects(); len(got) != 0 {
				t.Errorf("an aborted upload left objects %v", got)
			}
			if b.Files != nil {
				if got := b.Files(); len(got) != 0 {
					t.Errorf("an aborted upload left files %v", got)
				}
			}
			if b.Multipart != nil {
				// The upload was aborted midway, and the server was told.
				created, ended := b.Multipart()
				if created == 0 || created != ended {
					t.Errorf("multipart uploads: %d created, %d completed or aborted; want some, all ended", created, ended)
				}
			}
			// The next Save, not aborted, stores it.
			b.SetUploadHook(nil)
			info, err := b.Storage.Save(src)
			if err != nil || info != want || !b.Storage.Exists(want.ID) {
				t.Errorf("Save after an aborted one: %+v, %v; want %+v stored", info, err, want)
			}
		})
	}
}
