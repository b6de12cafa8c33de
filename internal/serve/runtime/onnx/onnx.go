// Package onnx runs "onnx" model directories with ONNX Runtime through
// github.com/yalue/onnxruntime_go (cgo). The shared library is found at run
// time (Library); a build without cgo compiles, and its Load says that ONNX
// models need a cgo build. It owns the process's one ONNX Runtime
// environment and never changes the library's global settings otherwise.
package onnx

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Format is the manifest format this package loads.
const Format = "onnx"

// Version is the ONNX Runtime release scripts/onnxruntime.sh installs.
const Version = "1.30.0"

// EnvLibrary names the environment variable holding the library's path.
const EnvLibrary = "VIRGA_ONNXRUNTIME"

// InstallCommand is the command that installs the library where Library
// looks for it.
const InstallCommand = "scripts/onnxruntime.sh"

// DefaultMaxBatch is the most rows one call takes when the manifest sets no
// max_batch but every input's first dimension is variable.
const DefaultMaxBatch = 64

// ErrNoLibrary is the library missing.
var ErrNoLibrary = errors.New("ONNX Runtime library not found")

// CachedLibrary is where scripts/onnxruntime.sh installs the library:
// $XDG_CACHE_HOME/virga/onnxruntime-<Version>/libonnxruntime.so.1, or under
// ~/.cache when XDG_CACHE_HOME is not set.
func CachedLibrary() string {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = "/"
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "virga", "onnxruntime-"+Version, "libonnxruntime.so.1")
}

// Library finds ONNX Runtime's shared library: the path in
// $VIRGA_ONNXRUNTIME if set, else CachedLibrary. The error, wrapping
// ErrNoLibrary, says how to install it.
func Library() (string, error) {
	if p := os.Getenv(EnvLibrary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%w: %s=%s: %v (unset it to use %s, installed by %s)", ErrNoLibrary, EnvLibrary, p, err, CachedLibrary(), InstallCommand)
		}
		return p, nil
	}
	p := CachedLibrary()
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%w at %s: install it with %s (from a Virga checkout), or set %s to a libonnxruntime.so of version %s or later",
			ErrNoLibrary, p, InstallCommand, EnvLibrary, Version)
	}
	return p, nil
}

// Settings tune the sessions a Loader makes.
type Settings struct {
	// IntraOpThreads is the threads one call may use; 0 means 1 (the
	// engine runs calls of several models and instances side by side).
	IntraOpThreads int
	// Library overrides Library's choice of the shared library.
	Library string
}
