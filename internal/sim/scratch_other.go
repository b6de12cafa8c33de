//go:build !linux

package sim

// scratchRoot is where a simulated run keeps its files: the system's
// temporary directory (see scratch_linux.go).
func scratchRoot() string { return "" }
