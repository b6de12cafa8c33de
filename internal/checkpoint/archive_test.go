package checkpoint_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"

	"github.com/virga-ml/virga/internal/checkpoint"
)

// archive returns the archive of dir, failing the test on error.
func archive(t testing.TB, dir string) ([]byte, checkpoint.Info) {
	t.Helper()
	var buf bytes.Buffer
	info, err := checkpoint.WriteArchive(&buf, dir)
	if err != nil {
		t.Fatalf("WriteArchive(%s): %v", dir, err)
	}
	return buf.Bytes(), info
}

func TestArchiveRoundTrip(t *testing.T) {
	s := open(t)
	src := filepath.Join(tempDir(t), "src")
	write(t, src, sample)
	want := save(t, s, src)
	data, info := archive(t, src)
	if info != want {
		t.Fatalf("WriteArchive: %+v, Save: %+v", info, want)
	}

	for _, name := range []string{"new", "existing"} {
		t.Run(name, func(t *testing.T) {
			dst := filepath.Join(tempDir(t), "a", "b", "dst")
			if name == "existing" {
				write(t, dst, tree{"stale": file(0o644, "old"), "old": dir(0o555), "old/x": file(0o644, "x")})
				if err := os.Chmod(dst, 0o750); err != nil {
					t.Fatal(err)
				}
			}
			got, err := checkpoint.ExtractArchive(bytes.NewReader(data), dst, -1)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("ExtractArchive: %+v, want %+v", got, want)
			}
			if diff := cmp.Diff(sample, read(t, dst)); diff != "" {
				t.Errorf("extracted tree (-want +got):\n%s", diff)
			}
			if again := save(t, open(t), dst); again.ID != want.ID {
				t.Errorf("Save of the extracted tree: %s, want %s", again.ID, want.ID)
			}
			fi, err := os.Stat(dst)
			if err != nil {
				t.Fatal(err)
			}
			wantMode := fs.FileMode(0o755)
			if name == "existing" {
				wantMode = 0o750
			}
			if fi.Mode().Perm() != wantMode {
				t.Errorf("dst mode %v, want %v", fi.Mode().Perm(), wantMode)
			}
			entries, _ := os.ReadDir(filepath.Dir(dst))
			if len(entries) != 1 {
				t.Errorf("dst's parent holds %v, want only dst", entries)
			}
		})
	}
}

func TestArchiveDeterministic(t *testing.T) {
	a := filepath.Join(tempDir(t), "a")
	b := filepath.Join(tempDir(t), "elsewhere", "b")
	write(t, a, sample)
	write(t, b, sample)
	da, _ := archive(t, a)
	db, _ := archive(t, b)
	da2, _ := archive(t, a)
	if !bytes.Equal(da, db) || !bytes.Equal(da, da2) {
		t.Error("equal trees gave different archives")
	}
}

func TestArchiveEmpty(t *testing.T) {
	for _, src := range []string{filepath.Join(tempDir(t), "missing"), tempDir(t)} {
		data, info := archive(t, src)
		if info != (checkpoint.Info{}) {
			t.Errorf("WriteArchive(%s): %+v, want the zero Info", src, info)
		}
		dst := filepath.Join(tempDir(t), "dst")
		write(t, dst, tree{"old": file(0o644, "old")})
		got, err := checkpoint.ExtractArchive(bytes.NewReader(data), dst, 0)
		if err != nil || got != (checkpoint.Info{}) {
			t.Errorf("ExtractArchive of an empty archive: %+v, %v", got, err)
		}
		if tr := read(t, dst); len(tr) != 0 {
			t.Errorf("after extracting an empty archive dst holds %v", tr)
		}
	}
}

func TestWriteArchiveUnsupported(t *testing.T) {
	src := filepath.Join(tempDir(t), "src")
	write(t, src, tree{"a": file(0o644, "a"), "out": link("../elsewhere")})
	if _, err := checkpoint.WriteArchive(io.Discard, src); !errors.Is(err, checkpoint.ErrUnsupported) {
		t.Errorf("WriteArchive with a link outside: %v, want ErrUnsupported", err)
	}
	src = filepath.Join(tempDir(t), "src")
	write(t, src, tree{"a": file(0o644, "a")})
	if err := syscall.Mkfifo(filepath.Join(src, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := checkpoint.WriteArchive(io.Discard, src); !errors.Is(err, checkpoint.ErrUnsupported) || !strings.Contains(err.Error(), "pipe") {
		t.Errorf("WriteArchive with a pipe: %v, want ErrUnsupported naming it", err)
	}
	f := filepath.Join(tempDir(t), "f")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := checkpoint.WriteArchive(io.Discard, f); err == nil {
		t.Error("WriteArchive of a regular file: no error")
	}
}

// tarEntry is one entry of a hand-made archive.
type tarEntry struct {
	name, link string
	typ        byte
	mode       int64
	body       string
}

func reg(name, body string) tarEntry {
	return tarEntry{name: name, typ: tar.TypeReg, mode: 0o644, body: body}
}
func tdir(name string) tarEntry { return tarEntry{name: name, typ: tar.TypeDir, mode: 0o755} }
func tlink(name, target string) tarEntry {
	return tarEntry{name: name, typ: tar.TypeSymlink, link: target, mode: 0o777}
}

// makeTar builds an archive, whatever its entries say.
func makeTar(t testing.TB, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body)), Format: tar.FormatPAX}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("writing %q: %v", e.name, err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil && e.typ == tar.TypeReg {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// hostile are archives ExtractArchive must refuse, and the error each wraps.
var hostile = []struct {
	name    string
	entries []tarEntry
	want    error
}{
	{"absolute", []tarEntry{reg("/etc/evil", "x")}, checkpoint.ErrBadArchive},
	{"dotdot", []tarEntry{reg("../evil", "x")}, checkpoint.ErrBadArchive},
	{"inner dotdot", []tarEntry{tdir("a/"), reg("a/../../evil", "x")}, checkpoint.ErrBadArchive},
	{"dot", []tarEntry{reg("./a", "x")}, checkpoint.ErrBadArchive},
	{"double slash", []tarEntry{tdir("a/"), reg("a//b", "x")}, checkpoint.ErrBadArchive},
	{"empty name", []tarEntry{reg("", "x")}, checkpoint.ErrBadArchive},
	{"duplicate file", []tarEntry{reg("a", "x"), reg("a", "y")}, checkpoint.ErrBadArchive},
	{"duplicate dir", []tarEntry{tdir("a/"), tdir("a")}, checkpoint.ErrBadArchive},
	{"file over link", []tarEntry{reg("a", "x"), tlink("a", "b")}, checkpoint.ErrBadArchive},
	{"through link", []tarEntry{tdir("d/"), tlink("l", "d"), reg("l/x", "x")}, checkpoint.ErrBadArchive},
	{"through dot link", []tarEntry{tlink("l", "."), reg("l/x", "x")}, checkpoint.ErrBadArchive},
	{"through file", []tarEntry{reg("f", "x"), reg("f/x", "x")}, checkpoint.ErrBadArchive},
	{"child first", []tarEntry{reg("a/x", "x"), tdir("a/")}, checkpoint.ErrBadArchive},
	{"link absolute", []tarEntry{tlink("l", "/etc/passwd")}, checkpoint.ErrUnsupported},
	{"link up", []tarEntry{tlink("l", "../outside")}, checkpoint.ErrUnsupported},
	{"link up deep", []tarEntry{tdir("a/"), tlink("a/l", "../../outside")}, checkpoint.ErrUnsupported},
	{"link inner dotdot", []tarEntry{tdir("a/"), tlink("l", "a/../../x")}, checkpoint.ErrUnsupported},
	{"link empty", []tarEntry{tlink("l", "")}, checkpoint.ErrUnsupported},
	{"hard link", []tarEntry{reg("a", "x"), {name: "b", typ: tar.TypeLink, link: "a"}}, checkpoint.ErrUnsupported},
	{"char device", []tarEntry{{name: "null", typ: tar.TypeChar, mode: 0o666}}, checkpoint.ErrUnsupported},
	{"block device", []tarEntry{{name: "sda", typ: tar.TypeBlock, mode: 0o666}}, checkpoint.ErrUnsupported},
	{"fifo", []tarEntry{{name: "pipe", typ: tar.TypeFifo, mode: 0o666}}, checkpoint.ErrUnsupported},
	{"too big", []tarEntry{reg("a", strings.Repeat("x", 600)), reg("b", strings.Repeat("x", 500))}, checkpoint.ErrBadArchive},
}

// extractLimit is the limit of the hostile-input tests.
const extractLimit = 1000

// checkUntouched fails unless dst still holds exactly old and its parent
// holds only dst and outside, unchanged.
func checkUntouched(t testing.TB, dst string, old tree, outside string, outsideTree tree) {
	t.Helper()
	if diff := cmp.Diff(old, read(t, dst)); diff != "" {
		t.Errorf("a failed extraction changed dst (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(outsideTree, read(t, outside)); diff != "" {
		t.Errorf("a failed extraction changed a directory outside dst (-want +got):\n%s", diff)
	}
	entries, err := os.ReadDir(filepath.Dir(dst))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{"dst", "outside"}, names); diff != "" {
		t.Errorf("dst's parent holds %v after a failed extraction", names)
	}
}

// extractSetup makes parent/dst holding old and parent/outside holding a
// sentinel, and returns dst, old, outside and its tree.
func extractSetup(t testing.TB) (string, tree, string, tree) {
	t.Helper()
	parent := tempDir(t)
	dst := filepath.Join(parent, "dst")
	old := tree{"old": file(0o644, "old"), "keep": dir(0o755), "keep/k": file(0o600, "k")}
	write(t, dst, old)
	outside := filepath.Join(parent, "outside")
	outsideTree := tree{"sentinel": file(0o644, "s")}
	write(t, outside, outsideTree)
	return dst, old, outside, outsideTree
}

func TestExtractHostile(t *testing.T) {
	for _, tt := range hostile {
		t.Run(tt.name, func(t *testing.T) {
			dst, old, outside, outsideTree := extractSetup(t)
			data := makeTar(t, tt.entries...)
			_, err := checkpoint.ExtractArchive(bytes.NewReader(data), dst, extractLimit)
			if !errors.Is(err, tt.want) {
				t.Errorf("ExtractArchive: %v, want an error wrapping %v", err, tt.want)
			}
			checkUntouched(t, dst, old, outside, outsideTree)
		})
	}
}

func TestExtractBrokenStream(t *testing.T) {
	src := filepath.Join(tempDir(t), "src")
	write(t, src, sample)
	data, _ := archive(t, src)
	cases := map[string][]byte{
		"truncated header": data[:700],
		"truncated body":   data[:len(data)/2],
		"garbage":          bytes.Repeat([]byte("garbage!"), 200),
	}
	for name, bad := range cases {
		t.Run(name, func(t *testing.T) {
			dst, old, outside, outsideTree := extractSetup(t)
			_, err := checkpoint.ExtractArchive(bytes.NewReader(bad), dst, -1)
			if !errors.Is(err, checkpoint.ErrBadArchive) {
				t.Errorf("ExtractArchive: %v, want ErrBadArchive", err)
			}
			checkUntouched(t, dst, old, outside, outsideTree)
		})
	}

	// A failure of the reader is not the sender's: it is returned as it is.
	t.Run("reader error", func(t *testing.T) {
		dst, old, outside, outsideTree := extractSetup(t)
		boom := errors.New("connection reset")
		r := io.MultiReader(bytes.NewReader(data[:len(data)/2]), iotest.ErrReader(boom))
		_, err := checkpoint.ExtractArchive(r, dst, -1)
		if !errors.Is(err, boom) || errors.Is(err, checkpoint.ErrBadArchive) {
			t.Errorf("ExtractArchive: %v, want the reader's error and not ErrBadArchive", err)
		}
		checkUntouched(t, dst, old, outside, outsideTree)
	})
}

func TestExtractLimit(t *testing.T) {
	src := filepath.Join(tempDir(t), "src")
	write(t, src, sample)
	data, info := archive(t, src)
	if _, err := checkpoint.ExtractArchive(bytes.NewReader(data), filepath.Join(tempDir(t), "dst"), info.Size); err != nil {
		t.Errorf("ExtractArchive with limit = Size: %v", err)
	}
	if _, err := checkpoint.ExtractArchive(bytes.NewReader(data), filepath.Join(tempDir(t), "dst"), info.Size-1); !errors.Is(err, checkpoint.ErrBadArchive) {
		t.Errorf("ExtractArchive with limit = Size-1: %v, want ErrBadArchive", err)
	}
}

// TestExtractLenient: what other tar writers do and is harmless is accepted.
func TestExtractLenient(t *testing.T) {
	data := makeTar(t, tdir("a"), reg("a/x", "x"), tarEntry{name: "s", typ: tar.TypeReg, mode: 0o104755, body: "s"})
	dst := filepath.Join(tempDir(t), "dst")
	if _, err := checkpoint.ExtractArchive(bytes.NewReader(data), dst, -1); err != nil {
		t.Fatal(err)
	}
	want := tree{"a": dir(0o755), "a/x": file(0o644, "x"), "s": file(0o755, "s")}
	if diff := cmp.Diff(want, read(t, dst)); diff != "" {
		t.Errorf("extracted tree (-want +got):\n%s", diff)
	}
}

func FuzzExtractArchive(f *testing.F) {
	for _, tr := range []tree{
		sample,
		{"a": file(0o644, "a")},
		{"d": dir(0o755), "d/l": link("../f"), "f": file(0o600, "f")},
		{"ro": dir(0o500), "ro/x": file(0o400, "x")},
	} {
		src := filepath.Join(tempDir(f), "src")
		write(f, src, tr)
		data, _ := archive(f, src)
		f.Add(data)
	}
	for _, tt := range hostile {
		f.Add(makeTar(f, tt.entries...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dst, old, outside, outsideTree := extractSetup(t)
		info, err := checkpoint.ExtractArchive(bytes.NewReader(data), dst, 1<<20)
		if err != nil {
			if !errors.Is(err, checkpoint.ErrBadArchive) && !errors.Is(err, checkpoint.ErrUnsupported) {
				t.Errorf("ExtractArchive: %v, want ErrBadArchive or ErrUnsupported", err)
			}
			checkUntouched(t, dst, old, outside, outsideTree)
			return
		}
		// Nothing outside dst changed, and what dst holds is a checkpoint
		// whose archive has the same ID.
		if diff := cmp.Diff(outsideTree, read(t, outside)); diff != "" {
			t.Errorf("extraction changed a directory outside dst (-want +got):\n%s", diff)
		}
		if entries, _ := os.ReadDir(filepath.Dir(dst)); len(entries) != 2 {
			t.Errorf("dst's parent holds %v, want dst and outside", entries)
		}
		again, err := checkpoint.WriteArchive(io.Discard, dst)
		if err != nil {
			t.Fatalf("WriteArchive of an extracted tree: %v", err)
		}
		if again != info {
			t.Errorf("WriteArchive of the extracted tree: %+v, ExtractArchive: %+v", again, info)
		}
	})
}
