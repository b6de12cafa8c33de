package checkpoint_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/checkpoint"
	"github.com/virga-ml/virga/internal/checkpoint/checkpointtest"
)

// The trees of the tests (see checkpointtest).
type tree = checkpointtest.Tree

var (
	file    = checkpointtest.File
	dir     = checkpointtest.Dir
	link    = checkpointtest.Link
	write   = checkpointtest.Write
	read    = checkpointtest.Read
	tempDir = checkpointtest.TempDir
	sample  = checkpointtest.Sample
)

func open(t testing.TB) *checkpoint.Store {
	t.Helper()
	s, err := checkpoint.Open(filepath.Join(tempDir(t), "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func save(t testing.TB, s *checkpoint.Store, src string) checkpoint.Info {
	t.Helper()
	info, err := s.Save(src)
	if err != nil {
		t.Fatalf("Save(%s): %v", src, err)
	}
	return info
}

func TestSaveRestoreRoundTrip(t *testing.T) {
	s := open(t)
	src := filepath.Join(tempDir(t), "src")
	write(t, src, sample)

	info := save(t, s, src)
	if !checkpoint.ValidID(info.ID) {
		t.Fatalf("Save returned ID %q", info.ID)
	}
	wantSize := int64(0)
	wantFiles := 0
	for _, n := range sample {
		if n.Mode.IsRegular() {
			wantFiles++
			wantSize += int64(len(n.Content))
		}
	}
	if info.Files != wantFiles || info.Size != wantSize {
		t.Errorf("Info = %+v, want %d files of %d bytes", info, wantFiles, wantSize)
	}
	if diff := cmp.Diff(sample, read(t, s.Path(info.ID))); diff != "" {
		t.Errorf("stored tree (-want,+got):\n%s", diff)
	}

	dst := filepath.Join(tempDir(t), "trial", "checkpoint")
	if err := s.Restore(info.ID, dst); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if diff := cmp.Diff(sample, read(t, dst)); diff != "" {
		t.Errorf("restored tree (-want,+got):\n%s", diff)
	}
	// Restored files are copies: writing one leaves the stored one alone.
	if err := os.WriteFile(filepath.Join(dst, "secret"), []byte("changed"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(s.Path(info.ID), "secret")); string(b) != "key" {
		t.Errorf("writing a restored file changed the stored one to %q", b)
	}
	// The restored copy saves to the same ID once changed back.
	if err := os.WriteFile(filepath.Join(dst, "secret"), []byte("key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := save(t, s, dst); got != info {
		t.Errorf("saving the restored copy gave %+v, want %+v", got, info)
	}
}

func TestIDIsContent(t *testing.T) {
	s := open(t)
	base := tree{"a": file(0o644, "hello"), "d": dir(0o755), "d/b": file(0o600, "world")}
	variants := map[string]tree{
		"content": {"a": file(0o644, "hellp"), "d": dir(0o755), "d/b": file(0o600, "world")},
		"mode":    {"a": file(0o755, "hello"), "d": dir(0o755), "d/b": file(0o600, "world")},
		"dirmode": {"a": file(0o644, "hello"), "d": dir(0o700), "d/b": file(0o600, "world")},
		"name":    {"a": file(0o644, "hello"), "d": dir(0o755), "d/c": file(0o600, "world")},
		"move":    {"a": file(0o644, "hello"), "d": dir(0o755), "b": file(0o600, "world")},
		"extra":   {"a": file(0o644, "hello"), "d": dir(0o755), "d/b": file(0o600, "world"), "e": dir(0o755)},
		"link":    {"a": file(0o644, "hello"), "d": dir(0o755), "d/b": link("../a")},
	}
	first := filepath.Join(tempDir(t), "one")
	write(t, first, base)
	id := save(t, s, first).ID

	// The same content elsewhere, with other times, has the same ID.
	second := filepath.Join(tempDir(t), "two")
	write(t, second, base)
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(second, "a"), old, old); err != nil {
		t.Fatal(err)
	}
	if got := save(t, s, second).ID; got != id {
		t.Errorf("same content: ID %s, want %s", got, id)
	}
	seen := map[string]string{id: "base"}
	for name, tr := range variants {
		src := filepath.Join(tempDir(t), name)
		write(t, src, tr)
		got := save(t, s, src).ID
		if other, dup := seen[got]; dup {
			t.Errorf("variant %q has the same ID as %q", name, other)
		}
		seen[got] = name
	}
}

func TestDedup(t *testing.T) {
	s := open(t)
	a, b := filepath.Join(tempDir(t), "a"), filepath.Join(tempDir(t), "b")
	write(t, a, sample)
	write(t, b, sample)
	first := save(t, s, a)
	stored := read(t, s.Root())
	if second := save(t, s, b); second != first {
		t.Errorf("second Save = %+v, want %+v", second, first)
	}
	if diff := cmp.Diff(stored, read(t, s.Root())); diff != "" {
		t.Errorf("a duplicate Save changed the store (-before,+after):\n%s", diff)
	}
	entries, err := os.ReadDir(s.Root())
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != first.ID {
		t.Errorf("store holds %v, want only %s", entries, first.ID)
	}
}

func TestSaveNothing(t *testing.T) {
	s := open(t)
	empty := tempDir(t)
	for _, src := range []string{empty, filepath.Join(empty, "missing")} {
		info, err := s.Save(src)
		if err != nil || info != (checkpoint.Info{}) {
			t.Errorf("Save(%s) = %+v, %v; want the zero Info and no error", src, info, err)
		}
	}
	if entries, _ := os.ReadDir(s.Root()); len(entries) != 0 {
		t.Errorf("store holds %v after saving nothing", entries)
	}
	f := filepath.Join(empty, "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(f); err == nil {
		t.Error("Save of a regular file succeeded")
	}
}

func TestRestoreReplacesEverything(t *testing.T) {
	s := open(t)
	src := filepath.Join(tempDir(t), "src")
	write(t, src, sample)
	id := save(t, s, src).ID

	dst := filepath.Join(tempDir(t), "dst")
	write(t, dst, tree{
		"stale.bin":       file(0o644, "old"),
		"model.bin":       file(0o600, "old weights"),
		"opt":             dir(0o500), // read-only, in the way
		"opt/old":         file(0o444, "x"),
		"empty":           file(0o644, "a file where a directory goes"),
		"latest":          link("stale.bin"),
		"gone":            dir(0o000),
		"dangling":        link("nowhere"),
		"opt/deep":        dir(0o755),
		"opt/deep/x":      dir(0o755),
		"opt/deep/x/y.tx": file(0o644, ""),
	})
	if err := s.Restore(id, dst); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if diff := cmp.Diff(sample, read(t, dst)); diff != "" {
		t.Errorf("restored tree (-want,+got):\n%s", diff)
	}
	// Restoring again over a restored (partly read-only) tree works too.
	if err := s.Restore(id, dst); err != nil {
		t.Fatalf("second Restore: %v", err)
	}
	if diff := cmp.Diff(sample, read(t, dst)); diff != "" {
		t.Errorf("tree after a second restore (-want,+got):\n%s", diff)
	}
}

func TestRestoreUnknown(t *testing.T) {
	s := open(t)
	id := strings.Repeat("ab", 32)
	if err := s.Restore(id, tempDir(t)); !errors.Is(err, virga.ErrNotFound) {
		t.Errorf("Restore of an unknown ID: %v, want ErrNotFound", err)
	}
}

func TestInvalidIDs(t *testing.T) {
	s := open(t)
	outside := filepath.Join(filepath.Dir(s.Root()), "victim")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	valid := strings.Repeat("0f", 32)
	for _, id := range []string{
		"", "..", "../victim", "/etc", valid[:63], valid + "0",
		strings.ToUpper(valid), strings.Repeat("g", 64), "../" + valid[3:],
		valid[:62] + "/.", ".tmp-save-1",
	} {
		if err := s.Restore(id, tempDir(t)); !errors.Is(err, checkpoint.ErrInvalidID) {
			t.Errorf("Restore(%q): %v, want ErrInvalidID", id, err)
		}
		if err := s.Delete(id); !errors.Is(err, checkpoint.ErrInvalidID) {
			t.Errorf("Delete(%q): %v, want ErrInvalidID", id, err)
		}
		if p := s.Path(id); p != "" {
			t.Errorf("Path(%q) = %q, want empty", id, p)
		}
		if s.Exists(id) {
			t.Errorf("Exists(%q) is true", id)
		}
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("the directory next to the store was touched: %v", err)
	}
	if s.Path(valid) != filepath.Join(s.Root(), valid) {
		t.Errorf("Path(%s) = %q", valid, s.Path(valid))
	}
}

func TestDelete(t *testing.T) {
	s := open(t)
	src := filepath.Join(tempDir(t), "src")
	write(t, src, sample) // holds a read-only directory
	id := save(t, s, src).ID
	if !s.Exists(id) {
		t.Fatalf("Exists(%s) is false after Save", id)
	}
	for i := range 2 {
		if err := s.Delete(id); err != nil {
			t.Fatalf("Delete #%d: %v", i+1, err)
		}
		if s.Exists(id) {
			t.Fatalf("Exists after Delete #%d", i+1)
		}
	}
	if entries, _ := os.ReadDir(s.Root()); len(entries) != 0 {
		t.Errorf("store holds %v after Delete", entries)
	}
	// It can be saved again.
	if got := save(t, s, src).ID; got != id || !s.Exists(id) {
		t.Errorf("saving again gave %s (exists %v), want %s", got, s.Exists(id), id)
	}
}

func TestCrashLeftovers(t *testing.T) {
	root := filepath.Join(tempDir(t), "checkpoints")
	s, err := checkpoint.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(tempDir(t), "src")
	write(t, src, tree{"a": file(0o644, "a")})
	id := save(t, s, src).ID

	// What a save and a delete killed midway leave behind.
	write(t, filepath.Join(root, ".tmp-save-123"), tree{"half": file(0o644, "partial"), "ro": dir(0o500), "ro/x": file(0o644, "")})
	write(t, filepath.Join(root, ".tmp-delete-"+strings.Repeat("1", 64)), tree{"x": file(0o644, "")})
	if s.Exists(".tmp-save-123") {
		t.Error("a leftover counts as a checkpoint")
	}
	s2, err := checkpoint.Open(root)
	if err != nil {
		t.Fatalf("Open over leftovers: %v", err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != id {
		t.Errorf("after Open the store holds %v, want only %s", entries, id)
	}
	if !s2.Exists(id) {
		t.Errorf("Open removed checkpoint %s", id)
	}
}

func TestFailedSaveLeavesNothing(t *testing.T) {
	s := open(t)
	src := filepath.Join(tempDir(t), "src")
	write(t, src, tree{"a": file(0o644, "a")})
	if err := syscall.Mkfifo(filepath.Join(src, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(src); err == nil || !strings.Contains(err.Error(), "pipe") {
		t.Fatalf("Save of a tree with a pipe: %v, want an error naming it", err)
	}
	if entries, _ := os.ReadDir(s.Root()); len(entries) != 0 {
		t.Errorf("a failed Save left %v", entries)
	}
}

func TestSymlinks(t *testing.T) {
	tests := []struct {
		at, target string
		ok         bool
	}{
		{"l", "a", true},
		{"l", "./a", true},
		{"l", "sub", true},
		{"l", ".", true},
		{"sub/l", "../a", true},
		{"sub/deeper/l", "../../a", true},
		{"sub/deeper/l", "../x/../../a", false},
		{"l", "/etc/passwd", false},
		{"l", "..", false},
		{"l", "../outside", false},
		{"sub/l", "../../outside", false},
		{"l", "sub/../a", false}, // sub could be a link itself
		{"l", "sub/../../x", false},
	}
	for _, tt := range tests {
		t.Run(tt.at+"->"+tt.target, func(t *testing.T) {
			s := open(t)
			src := filepath.Join(tempDir(t), "src")
			write(t, src, tree{"a": file(0o644, "a"), "sub": dir(0o755), "sub/deeper": dir(0o755), tt.at: link(tt.target)})
			info, err := s.Save(src)
			if tt.ok {
				if err != nil {
					t.Fatalf("Save: %v", err)
				}
				dst := tempDir(t)
				if err := s.Restore(info.ID, dst); err != nil {
					t.Fatal(err)
				}
				if got, err := os.Readlink(filepath.Join(dst, tt.at)); err != nil || got != tt.target {
					t.Errorf("restored link: %q, %v; want %q", got, err, tt.target)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "outside") {
				t.Errorf("Save: %v, want a link-outside error", err)
			}
		})
	}
}

func TestFingerprint(t *testing.T) {
	d := filepath.Join(tempDir(t), "ckpt")
	if fp, err := checkpoint.Fingerprint(d); err != nil || fp != "" {
		t.Errorf("missing dir: %q, %v; want empty", fp, err)
	}
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if fp, err := checkpoint.Fingerprint(d); err != nil || fp != "" {
		t.Errorf("empty dir: %q, %v; want empty", fp, err)
	}
	write(t, d, tree{"a": file(0o644, "one"), "sub": dir(0o755), "sub/b": file(0o644, "two")})
	past := time.Now().Add(-time.Minute)
	age := func(rel string, tm time.Time) {
		t.Helper()
		if err := os.Chtimes(filepath.Join(d, rel), tm, tm); err != nil {
			t.Fatal(err)
		}
	}
	for _, rel := range []string{"a", "sub", "sub/b"} {
		age(rel, past)
	}
	fp := func() string {
		t.Helper()
		s, err := checkpoint.Fingerprint(d)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	base := fp()
	if again := fp(); again != base || base == "" {
		t.Fatalf("unchanged dir: %q then %q, want equal and non-empty", base, again)
	}

	// A fresh write is distrusted: every fingerprint differs until it ages.
	if err := os.WriteFile(filepath.Join(d, "a"), []byte("ONE"), 0o644); err != nil {
		t.Fatal(err)
	}
	r1, r2 := fp(), fp()
	if r1 == base || r1 == r2 {
		t.Errorf("racy fingerprints %q, %q (base %q): want all different", r1, r2, base)
	}

	// Once aged, the change shows in a stable fingerprint.
	age("a", past.Add(time.Second))
	changed := fp()
	if changed == base || changed != fp() {
		t.Errorf("after a same-size rewrite: %q (base %q), want a new stable value", changed, base)
	}
	steps := []struct {
		name string
		do   func() error
	}{
		{"mode", func() error { return os.Chmod(filepath.Join(d, "a"), 0o600) }},
		{"size", func() error {
			if err := os.WriteFile(filepath.Join(d, "sub/b"), []byte("three"), 0o644); err != nil {
				return err
			}
			return os.Chtimes(filepath.Join(d, "sub/b"), past, past)
		}},
		{"rename", func() error { return os.Rename(filepath.Join(d, "sub/b"), filepath.Join(d, "sub/c")) }},
		{"new file", func() error { return os.WriteFile(filepath.Join(d, "new"), nil, 0o644) }},
		{"mtime", func() error { return os.Chtimes(filepath.Join(d, "new"), past, past) }},
	}
	prev := changed
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		age("sub", past) // a directory's own time moves when entries come and go
		got := fp()
		if got == prev {
			t.Errorf("%s: fingerprint unchanged", st.name)
		}
		prev = got
	}
}

func BenchmarkSave10MB(b *testing.B) {
	s := open(b)
	src := filepath.Join(tempDir(b), "src")
	tr := tree{"step": file(0o644, "0")}
	chunk := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	for i := range 10 {
		tr[fmt.Sprintf("shard-%02d", i)] = file(0o644, chunk)
	}
	write(b, src, tr)
	b.SetBytes(10 << 20)
	for i := 0; b.Loop(); i++ {
		// A new step each time, so every Save stores a new checkpoint.
		if err := os.WriteFile(filepath.Join(src, "step"), []byte(fmt.Sprint(i)), 0o644); err != nil {
			b.Fatal(err)
		}
		info, err := s.Save(src)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := s.Delete(info.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

func BenchmarkFingerprint100Files(b *testing.B) {
	d := tempDir(b)
	tr := tree{}
	for i := range 100 {
		tr[fmt.Sprintf("d%d/f%03d", i%10, i)] = file(0o644, "x")
	}
	write(b, d, tr)
	for b.Loop() {
		if _, err := checkpoint.Fingerprint(d); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSaveForScopesIDs: the same content saved for two owners gets two IDs
// and two copies, so deleting one owner's checkpoint leaves the other's.
func TestSaveForScopesIDs(t *testing.T) {
	s := open(t)
	src := filepath.Join(tempDir(t), "src")
	write(t, src, tree{"w": file(0o644, "weights")})
	a, err := s.SaveFor("trial-1", src)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.SaveFor("trial-2", src)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := s.Save(src)
	if err != nil {
		t.Fatal(err)
	}
	if a.ID == b.ID || a.ID == plain.ID || b.ID == plain.ID {
		t.Fatalf("IDs %s, %s, %s; want three different", a.ID[:8], b.ID[:8], plain.ID[:8])
	}
	again, err := s.SaveFor("trial-1", src)
	if err != nil || again.ID != a.ID {
		t.Fatalf("saving again for the same owner: %v, %v; want ID %s", again.ID, err, a.ID[:8])
	}
	if err := s.Delete(a.ID); err != nil {
		t.Fatal(err)
	}
	if !s.Exists(b.ID) {
		t.Error("deleting trial-1's checkpoint removed trial-2's")
	}
}

// TestUnsupportedIsTheTrials: a link leading outside the directory is an
// error wrapping ErrUnsupported.
func TestUnsupportedIsTheTrials(t *testing.T) {
	s := open(t)
	src := filepath.Join(tempDir(t), "src")
	write(t, src, tree{"w": file(0o644, "weights")})
	if err := os.Symlink("/etc", filepath.Join(src, "etc")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(src); !errors.Is(err, checkpoint.ErrUnsupported) {
		t.Fatalf("Save with a link to /etc: %v, want ErrUnsupported", err)
	}
}

// TestStorageConformance: the directory Store passes the suite every
// checkpoint Storage passes (the object stores' run it in their packages).
func TestStorageConformance(t *testing.T) {
	checkpointtest.RunStorage(t, func(t *testing.T) checkpointtest.Backend {
		s := open(t)
		return checkpointtest.Backend{Storage: s, Objects: func() []string {
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
	})
}
