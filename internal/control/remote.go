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
		return nil, c.notLive(ctx, attemptID)
	}
	if !Allowed(ctx, la.trialID) {
		return nil, ErrForbidden
	}
	if !c.remote {
		return nil, fmt.Errorf("%w: attempt %d runs on the server's machine, which saves its checkpoints itself", ErrNotRemote, attemptID)
	}
	return la, nil
}

// maxPendingUploads bounds the checkpoints an attempt may upload without
// naming them in a report (the agent names each one at once).
const maxPendingUploads = 4

// ErrTooManyUploads means an attempt uploaded checkpoints it never reported.
var ErrTooManyUploads = errors.New("too many unreported uploads")

// ErrNotRemote means a checkpoint transfer was asked for an attempt that
// does not run through the agent.
var ErrNotRemote = errors.New("not a remote attempt")

// UploadCheckpoint stores the checkpoint directory a remote attempt's agent
// sends as an archive (checkpoint.WriteArchive) and returns what it saved;
// a later Report of the attempt may name it. An upload waits to be named
// (at most maxPendingUploads do) unless its content is the attempt's latest
// checkpoint's, so uploading the same content again is harmless. The
// archive is unpacked into a private directory and saved like a local
// trial's directory, so the ID is the same content address either way, and
// nothing is visible before the whole archive arrived intact.
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
	if info.ID == la.lastID {
		// The content of the attempt's latest checkpoint, already recorded
		// (an agent that cannot tell an unchanged directory uploads it
		// again): a report may name it, and nothing waits to be reported.
		return info, nil
	}
	if la.uploaded == nil {
		la.uploaded = map[string]checkpoint.Info{}
	}
	if _, again := la.uploaded[info.ID]; !again && len(la.uploaded) >= maxPendingUploads {
		return checkpoint.Info{}, fmt.Errorf("%w: attempt %d has %d uploaded checkpoints that no report named yet; report one first", ErrTooManyUploads, attemptID, len(la.uploaded))
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

// dropUploads asks the loop to delete checkpoints a remote attempt uploaded
// and never named in an acknowledged report (a preemption cut it short, the
// report failed): unless a checkpoint of the trial has the same content.
type dropUploads struct {
	trialID int64
	ids     []string
}

// forgetUploads hands an ended attempt's unreported uploads to the loop,
// once no report of it is in flight (it holds la.mu while it waits for the
// loop, so this runs off the loop).
func (c *Controller) forgetUploads(la *liveAttempt) {
	la.mu.Lock()
	ids := make([]string, 0, len(la.uploaded))
	for id := range la.uploaded {
		ids = append(ids, id)
	}
	la.uploaded = nil
	la.mu.Unlock()
	if len(ids) > 0 {
		_ = c.send(context.Background(), dropUploads{trialID: la.trialID, ids: ids})
	}
}

// dropUploads deletes, after the pass commits, the uploads no checkpoint
// record refers to. Deletions run on the loop, as retention's do.
func (c *Controller) dropUploads(it *iteration, in dropUploads) {
	recorded := map[string]bool{}
	if ts := c.trials[in.trialID]; ts != nil {
		recorded[ts.t.Checkpoint] = true
		recorded[ts.t.ParentCheckpoint] = true
		for _, ck := range ts.ckpts {
			recorded[ck.ID] = true
		}
	} else {
		cks, err := c.cfg.Store.Checkpoints(context.Background(), in.trialID)
		if err != nil {
			c.log.Warn("keeping unreported uploads: cannot list the trial's checkpoints", "trial", in.trialID, "err", err)
			return
		}
		for _, ck := range cks {
			recorded[ck.ID] = true
		}
	}
	for _, id := range in.ids {
		if recorded[id] {
			continue
		}
		it.after = append(it.after, func() {
			if err := c.cfg.Checkpoints.Delete(id); err != nil {
				c.log.Warn("deleting an unreported upload", "id", id, "err", err)
			}
		})
	}
}
