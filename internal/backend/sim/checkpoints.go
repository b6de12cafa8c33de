package sim

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/virga-ml/virga/internal/checkpoint"
)

// Checkpoints is the control loop's checkpoint store for simulated trials
// (control.Checkpointer): a checkpoint's ID names the progress it holds
// (owner@step+nanoseconds into the next step), so nothing is copied.
type Checkpoints struct{}

// SaveFor returns the ID of the progress saved in src ("" when none was).
func (Checkpoints) SaveFor(owner, src string) (checkpoint.Info, error) {
	data, err := os.ReadFile(filepath.Join(src, ckptFile))
	if os.IsNotExist(err) {
		return checkpoint.Info{}, nil
	}
	if err != nil {
		return checkpoint.Info{}, err
	}
	step, kept, _ := strings.Cut(strings.TrimSpace(string(data)), " ")
	return checkpoint.Info{ID: owner + "@" + step + "+" + kept, Size: int64(len(data)), Files: 1}, nil
}

// Exists reports true: a simulated checkpoint is its ID.
func (Checkpoints) Exists(string) bool { return true }

// Restore writes the progress id names into dst.
func (Checkpoints) Restore(id, dst string) error {
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	_, rest, _ := strings.Cut(id, "@")
	step, kept, _ := strings.Cut(rest, "+")
	return os.WriteFile(filepath.Join(dst, ckptFile), []byte(step+" "+kept), 0o644)
}

// Delete does nothing.
func (Checkpoints) Delete(string) error { return nil }
