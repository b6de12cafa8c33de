// Package checkpointtest holds what the tests of checkpoint storage share:
// directory trees written and read back, and one conformance suite that every
// Storage (the directory Store, each object store) passes.
package checkpointtest

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Node is one entry of a directory tree as the tests see it.
type Node struct {
	Mode    fs.FileMode // type and permission bits
	Content string      // file content or link target
}

// Tree describes a directory: relative slash path -> node. Directories have
// Mode with fs.ModeDir, links fs.ModeSymlink.
type Tree map[string]Node

func File(perm fs.FileMode, content string) Node { return Node{Mode: perm, Content: content} }
func Dir(perm fs.FileMode) Node                  { return Node{Mode: fs.ModeDir | perm} }
func Link(target string) Node                    { return Node{Mode: fs.ModeSymlink, Content: target} }

// Write creates the tree under root, setting directory modes last.
func Write(t testing.TB, root string, tr Tree) {
	t.Helper()
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for rel, n := range tr {
		if n.Mode.IsDir() {
			dirs = append(dirs, rel)
			if err := os.MkdirAll(filepath.Join(root, rel), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	for rel, n := range tr {
		p := filepath.Join(root, rel)
		switch {
		case n.Mode.IsDir():
		case n.Mode&fs.ModeSymlink != 0:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(n.Content, p); err != nil {
				t.Fatal(err)
			}
		default:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(n.Content), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, n.Mode.Perm()); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, rel := range dirs {
		if err := os.Chmod(filepath.Join(root, rel), tr[rel].Mode.Perm()); err != nil {
			t.Fatal(err)
		}
	}
}

// Read returns the tree under root.
func Read(t testing.TB, root string) Tree {
	t.Helper()
	tr := Tree{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		n := Node{Mode: fi.Mode().Type() | fi.Mode().Perm()}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			n.Mode = fs.ModeSymlink // link permissions mean nothing on Linux
			n.Content, err = os.Readlink(p)
		case fi.Mode().IsRegular():
			var b []byte
			b, err = os.ReadFile(p)
			n.Content = string(b)
		}
		tr[filepath.ToSlash(rel)] = n
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TempDir is t.TempDir made removable even when the test leaves read-only
// directories in it (checkpoints keep their modes).
func TempDir(t testing.TB) string {
	t.Helper()
	d := t.TempDir()
	t.Cleanup(func() { // runs before TempDir's own cleanup
		_ = filepath.WalkDir(d, func(p string, de fs.DirEntry, err error) error {
			if err == nil && de.IsDir() {
				_ = os.Chmod(p, 0o755)
			}
			return nil
		})
	})
	return d
}

// Sample is a nested checkpoint with varied modes, an empty directory, a
// read-only directory and links that stay inside.
var Sample = Tree{
	"model.bin":         File(0o644, strings.Repeat("weights", 1000)),
	"run.sh":            File(0o755, "#!/bin/sh\n"),
	"secret":            File(0o600, "key"),
	"opt":               Dir(0o700),
	"opt/state.json":    File(0o444, `{"step":3}`),
	"opt/deep/x/y.txt":  File(0o640, "y"),
	"opt/deep":          Dir(0o755),
	"opt/deep/x":        Dir(0o750),
	"empty":             Dir(0o755),
	"frozen":            Dir(0o555),
	"frozen/a":          File(0o644, "a"),
	"latest":            Link("opt/state.json"),
	"opt/deep/x/parent": Link("../../state.json"),
	"zero":              File(0o644, ""),
}
