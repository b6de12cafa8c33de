package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
)

// Adopt takes over an attempt recorded by an earlier server, from its
// directory a.Dir:
//
//   - If the shim lives (it holds shim.lock), res is reserved (even beyond
//     capacity: the process runs regardless), Started is emitted with the
//     trial's pid from shim.json (so that an attempt still recorded as
//     STARTING can be moved on; readers must accept a Started for an attempt
//     they already saw running), Stop works as for attempts started here, and
//     Exited follows when the shim ends.
//   - If not, the backend takes shim.lock, and emits Exited at once: with the
//     status in exit.json, or Lost if there is none. For a lost attempt it
//     writes exit.json (Lost) while holding the lock. It lets go of the lock
//     once exit.json exists: from then on exit.json alone keeps any later
//     shim from starting (see declareOver).
//
// The attempt's resources are reserved in its pool: a.Pool, else the one
// recorded in its directory (PoolFile), else the default pool. If the
// attempt was told of a reclaim by the earlier server (PreemptFile), its
// Exited event says Preempted, and if it still runs it is killed at the
// reclaim (at once if that is past); if its pool is being reclaimed or is
// down now, it is preempted as an attempt started here would be.
//
// It returns an error, emitting nothing, if the attempt is already running
// here, if a.Dir is not absolute, or on I/O failure.
func (b *Backend) Adopt(ctx context.Context, at *virga.Attempt, res virga.Resources) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("adopting attempt: %w", err)
	}
	if at == nil || !filepath.IsAbs(at.Dir) {
		return errors.New("adopting attempt: it needs an absolute Dir")
	}
	poolName := at.Pool
	if poolName == "" {
		poolName = readPoolFile(at.Dir)
	}
	p, err := b.poolNamed(poolName)
	if err != nil {
		p = b.pools[0] // the pools changed since: count it in the default one
	}
	a := &attempt{id: at.ID, dir: at.Dir, pool: p}
	if rec, err := readPreemptRecord(at.Dir); err == nil {
		// Warned already: never SIGTERM again, SIGKILL at the reclaim.
		a.preempted, a.termSent, a.preemptKillAt = true, true, b.fromWall(time.Unix(0, rec.KillAtNS))
	}
	b.mu.Lock()
	switch {
	case b.closed:
		b.mu.Unlock()
		return fmt.Errorf("adopting attempt %d: the local backend is closed", at.ID)
	case b.attempts[at.ID] != nil:
		b.mu.Unlock()
		return fmt.Errorf("adopting attempt %d: already running here: %w", at.ID, virga.ErrConflict)
	}
	b.attempts[at.ID] = a
	b.seen[at.ID] = true
	b.mu.Unlock()

	lock, locked, err := b.lockDir(at.Dir)
	if err != nil {
		b.mu.Lock()
		delete(b.attempts, at.ID)
		b.mu.Unlock()
		return fmt.Errorf("adopting attempt %d: %w", at.ID, err)
	}
	if locked {
		b.declareOver(a, lock)
		return nil
	}

	// The shim lives: watch it.
	b.mu.Lock()
	if b.closed {
		delete(b.attempts, at.ID)
		b.mu.Unlock()
		lock.Close()
		return fmt.Errorf("adopting attempt %d: the local backend is closed", at.ID)
	}
	a.res = res
	p.Reserve(res)
	b.joinPoolLocked(a, p)
	b.wg.Add(1)
	b.mu.Unlock()
	go b.watchAdopted(a, lock)
	return nil
}

// lockDir opens dir's lock (creating dir if the attempt never got that far)
// and tries to take it.
func (b *Backend) lockDir(dir string) (*os.File, bool, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, false, fmt.Errorf("creating the attempt directory: %w", err)
	}
	return openLock(dir)
}

// watchAdopted polls the lock of an adopted attempt whose shim lived: while
// the lock is held the shim lives; once it can be taken, the shim has ended.
func (b *Backend) watchAdopted(a *attempt, lock *os.File) {
	defer b.wg.Done()
	b.adoptStarted(a)
	t := time.NewTicker(b.poll)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			lock.Close()
			return
		case <-t.C:
		}
		locked, err := tryFlock(lock)
		if err != nil || !locked {
			b.adoptStarted(a) // shim.json may be written only now
			continue
		}
		b.declareOver(a, lock)
		return
	}
}

// adoptStarted emits Started for an adopted attempt once shim.json names its
// trial.
func (b *Backend) adoptStarted(a *attempt) {
	b.mu.Lock()
	known := a.pid != 0
	b.mu.Unlock()
	if known {
		return
	}
	if rec, err := readShimRecord(a.dir); err == nil {
		b.started(a, rec.TrialPID, b.observed(rec.StartedAt))
	}
}

// declareOver ends an attempt whose lock this backend holds: no shim runs it,
// and none ever will. It emits Exited from exit.json, or Lost (recording it in
// exit.json) if there is none, and releases the lock as soon as exit.json
// exists; only if it cannot be written is the lock kept, until Close.
//
// Why exit.json suffices once it exists: a shim takes shim.lock first, then
// checks for exit.json (and shim.json), refusing if either exists or cannot
// be ruled out, and holds the lock until it exits (the fd is close-on-exec,
// so the trial never holds it; a child between fork and exec shares the
// shim's open file, so the lock stays held). The lock is exclusive, so while
// this backend holds it no shim holds it. A shim is therefore either
//   - one that held the lock before we took it: it has exited (the lock was
//     free), having refused, or run the trial and written exit.json (then
//     we read its status), or died (then we write Lost); or
//   - one that takes the lock after we release it: by then exit.json exists
//     (renamed into place before the release, and a rename is visible at
//     once to every process), so it refuses.
//
// No shim can check between our writing exit.json and our releasing the lock
// without the lock, so no third case exists.
func (b *Backend) declareOver(a *attempt, lock *os.File) {
	now := b.now()
	var ev backend.Event
	keep := false // the lock, until Close: exit.json could not be written
	rec, err := readExitRecord(a.dir)
	switch {
	case err == nil:
		ev = b.exitEvent(a.id, rec)
	case errors.Is(err, fs.ErrNotExist):
		msg := "no shim runs the attempt and it recorded no exit status (the shim never started, or died)"
		if _, serr := os.Stat(filepath.Join(a.dir, ShimFile)); serr != nil {
			msg = "the attempt's shim never started the trial"
		} else {
			// The shim died; Pdeathsig took the trial's own process only.
			msg += killLeftovers(a.dir)
		}
		ev = lostEvent(a.id, now, msg)
		if werr := writeJSONAtomic(filepath.Join(a.dir, ExitFile), exitRecord{Lost: true, Message: msg, EndedAt: now}, true); werr != nil {
			ev.Message += fmt.Sprintf(" (recording it failed: %v; the lock is held until Close)", werr)
			keep = true
		}
	default:
		// exit.json exists (a shim refuses on any error but "does not
		// exist") but cannot be read.
		ev = lostEvent(a.id, now, fmt.Sprintf("the attempt's exit status cannot be read: %v", err))
	}
	b.mu.Lock()
	if keep && !b.closed {
		b.held = append(b.held, lock)
		lock = nil
	}
	b.mu.Unlock()
	if lock != nil {
		lock.Close()
	}
	b.finish(a, ev)
}
