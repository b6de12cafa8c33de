package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/virga-ml/virga/internal/checkpoint"
)

// MaxUploadBytes bounds the content of one uploaded checkpoint.
const MaxUploadBytes int64 = 1 << 40

// remoteAttempt returns the live remote attempt that ctx may act for.
func (c *Controller) remoteAttempt(ctx context.Context, attemptID int64) (*liveAttempt, error) {
	la := c.liveAttempt(attemptID)
	if la == nil {
		return nil, ErrSuperseded
	}
	if !Allowed(ctx, la.trialID) {
		return nil, ErrForbidden
	}
	if !c.remote {
		return nil, fmt.Errorf("%w: attempt %d runs on the server's machine, which saves its checkpoints itself", ErrNotRemote, attemptID)
	}
	return la, nil
}

// ErrNotRemote means a checkpoint transfer was asked for an attempt that
// does not run through the agent.
var ErrNotRemote = errors.New("not a remote attempt")

// UploadCheckpoint stores the checkpoint directory a remote attempt's agent
// sends as an archive (checkpoint.WriteArchive) and returns what it saved;
// a later Report of the attempt may name it. The archive is unpacked into a
// private directory and saved like a local trial's directory, so the ID is
// the same content address either way, and nothing is visible before the
// whole archive arrived intact.
func (c *Controller) UploadCheckpoint(ctx context.Context, attemptID int64, r io.Reader) (checkpoint.Info, error) {
	la, err := c.remoteAttempt(ctx, attemptID)
	if err != nil {
		return checkpoint.Info{}, err
	}
	tmp, err := c.transferDir(attemptID)
	if err != nil {
		return checkpoint.Info{}, err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "c")
	if _, err := checkpoint.ExtractArchive(r, dir, MaxUploadBytes); err != nil {
		return checkpoint.Info{}, err
	}
	info, err := c.cfg.Checkpoints.SaveFor("trial-"+strconv.FormatInt(la.trialID, 10), dir)
	if err != nil {
		return checkpoint.Info{}, err
	}
	if info.ID == "" {
		return info, nil
	}
	la.mu.Lock()
	defer la.mu.Unlock()
	if la.uploaded == nil {
		la.uploaded = map[string]checkpoint.Info{}
	}
	la.uploaded[info.ID] = info
	return info, nil
}

// CheckpointArchive writes the checkpoint id as an archive to w, for the
// agent of a remote attempt that restores it: only the checkpoint the
// attempt started from or its own latest.
func (c *Controller) CheckpointArchive(ctx context.Context, attemptID int64, id string, w io.Writer) error {
	la, err := c.remoteAttempt(ctx, attemptID)
	if err != nil {
		return err
	}
	la.mu.Lock()
	allowed := id != "" && (id == la.restore || id == la.lastID)
	la.mu.Unlock()
	if !allowed {
		return fmt.Errorf("%w: checkpoint %s is not one attempt %d may read", ErrForbidden, id, attemptID)
	}
	tmp, err := c.transferDir(attemptID)
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "c")
	if err := c.cfg.Checkpoints.Restore(id, dir); err != nil {
		return err
	}
	_, err = checkpoint.WriteArchive(w, dir)
	return err
}

// transferDir makes a private directory for one transfer under the data
// directory (removed by the caller; leftovers of a crash by the next start).
func (c *Controller) transferDir(attemptID int64) (string, error) {
	root := filepath.Join(c.cfg.DataDir, "transfers")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", fmtErr("creating transfer directory", err)
	}
	d, err := os.MkdirTemp(root, strconv.FormatInt(attemptID, 10)+"-")
	if err != nil {
		return "", fmtErr("creating transfer directory", err)
	}
	return d, nil
}
