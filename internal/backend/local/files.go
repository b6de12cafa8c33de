package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virga-ml/virga/internal/backend"
)

// Names of the files the backend and the shim keep in an attempt's directory.
const (
	// OutputFile holds the trial's stdout and stderr, and the shim's own messages.
	OutputFile = "output.log"
	// LockFile is flocked by the shim for as long as it lives, and by a server
	// that declared the attempt over.
	LockFile = "shim.lock"
	// ShimFile records the shim's and the trial's pids once the trial started.
	ShimFile = "shim.json"
	// ExitFile records how the trial ended; written atomically, once.
	ExitFile = "exit.json"
	// StopFile is written by the backend when it starts stopping the trial:
	// the time (Unix nanoseconds) of its SIGKILL, until when the shim lets the
	// trial's group drain.
	StopFile = "stop"
)

// shimRecord is the content of ShimFile.
type shimRecord struct {
	ShimPID   int       `json:"shim_pid"`
	TrialPID  int       `json:"trial_pid"` // also the trial's process group id
	StartedAt time.Time `json:"started_at"`
	// TrialStart is the trial process's start time (/proc/PID/stat field
	// 22, clock ticks after boot) and TrialSession its session: together
	// they tell the trial's process group from a later one reusing its id.
	TrialStart   uint64 `json:"trial_start,omitempty"`
	TrialSession int    `json:"trial_session,omitempty"`
}

// exitRecord is the content of ExitFile. Exactly one of ExitCode, Signal and
// Lost is set.
type exitRecord struct {
	ExitCode *int      `json:"exit_code,omitempty"`
	Signal   string    `json:"signal,omitempty"`
	Lost     bool      `json:"lost,omitempty"` // written by a server that found no shim and no status
	Message  string    `json:"message,omitempty"`
	EndedAt  time.Time `json:"ended_at,omitzero"`
}

// writeJSONAtomic writes v as JSON to path through a temporary file and a
// rename, so that readers see the whole file or none. With sync, the content
// is flushed to disk before the rename.
func writeJSONAtomic(path string, v any, sync bool) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", filepath.Base(path), err)
	}
	data = append(data, '\n')
	tmp := path + ".tmp." + strconv.Itoa(os.Getpid())
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("writing %s: %w", filepath.Base(path), err)
	}
	_, err = f.Write(data)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", filepath.Base(path), err)
	}
	return nil
}

// readJSON decodes the JSON file at path into v. A missing file yields an
// error wrapping fs.ErrNotExist.
func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", filepath.Base(path), err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decoding %s: %w", path, err)
	}
	return nil
}

func readExitRecord(dir string) (*exitRecord, error) {
	var r exitRecord
	if err := readJSON(filepath.Join(dir, ExitFile), &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func readShimRecord(dir string) (*shimRecord, error) {
	var r shimRecord
	if err := readJSON(filepath.Join(dir, ShimFile), &r); err != nil {
		return nil, err
	}
	if r.TrialPID <= 0 {
		return nil, fmt.Errorf("%s: no trial pid", filepath.Join(dir, ShimFile))
	}
	return &r, nil
}

// openLock opens (creating if needed) the lock file in dir and tries to take
// its exclusive flock without blocking. The file is returned in both cases so
// that the caller can poll it; it is close-on-exec, so no child inherits it.
func openLock(dir string) (f *os.File, locked bool, err error) {
	f, err = os.OpenFile(filepath.Join(dir, LockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false, fmt.Errorf("opening lock: %w", err)
	}
	locked, err = tryFlock(f)
	if err != nil {
		f.Close()
		return nil, false, err
	}
	return f, locked, nil
}

// tryFlock takes f's exclusive flock without blocking; false means another
// open file holds it.
func tryFlock(f *os.File) (bool, error) {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EWOULDBLOCK):
			return false, nil
		default:
			return false, fmt.Errorf("locking %s: %w", f.Name(), err)
		}
	}
}

// parsePIDLine reads the shim's pid line, "PID STARTED_UNIX_NS" (the start
// time may be missing: at is then zero).
func parsePIDLine(line string) (pid int, at time.Time, ok bool) {
	f := strings.Fields(line)
	if len(f) == 0 || len(f) > 2 {
		return 0, time.Time{}, false
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid <= 0 {
		return 0, time.Time{}, false
	}
	if len(f) == 2 {
		if ns, err := strconv.ParseInt(f[1], 10, 64); err == nil && ns > 0 {
			at = time.Unix(0, ns)
		}
	}
	return pid, at, true
}

// exitEvent turns an exit record into the Exited event of attempt id, at
// the record's end (see observed), or now if it has none.
func (b *Backend) exitEvent(id int64, r *exitRecord) backend.Event {
	ev := backend.Event{AttemptID: id, Kind: backend.Exited, Time: b.now(), Message: r.Message}
	if !r.EndedAt.IsZero() {
		ev.Time = b.observed(r.EndedAt)
	}
	switch {
	case r.Lost:
		ev.Lost = true
	case r.ExitCode != nil:
		code := *r.ExitCode
		ev.ExitCode = &code
	case r.Signal != "":
		ev.Signal = r.Signal
	default:
		ev.Lost = true
		if ev.Message == "" {
			ev.Message = "exit.json records no status"
		}
	}
	return ev
}

// killLeftovers SIGKILLs what remains of the process group of the trial
// recorded in dir's shim.json, for a shim that died without recording the
// trial's end: Pdeathsig killed the trial's own process, but not the rest
// of its group. It kills nothing it cannot tell is the trial's:
//   - if /proc/PGID (the trial's own process, live or a zombie) exists, only
//     if its start time is the recorded one (else the pid was reused, which
//     means the trial's group is gone);
//   - if it is gone (reaped), the group can live on without its leader: only
//     if some live member of the group is in the trial's session and started
//     no earlier than the trial (members of a later group reusing the id
//     would have to be in a reused session too).
//
// It returns what it did, for the Exited message ("" if nothing).
func killLeftovers(dir string) string {
	rec, err := readShimRecord(dir)
	if err != nil || rec.TrialStart == 0 {
		return ""
	}
	pg := rec.TrialPID
	if st, err := readProcStat(pg); err == nil {
		if st.start != rec.TrialStart {
			return ""
		}
	} else {
		ours := false
		_ = eachProc(func(p procStat) {
			if p.pgrp == pg && p.session == rec.TrialSession && p.start >= rec.TrialStart && p.state != 'Z' && p.state != 'X' {
				ours = true
			}
		})
		if !ours {
			return ""
		}
	}
	if err := unix.Kill(-pg, unix.SIGKILL); err != nil {
		return ""
	}
	return fmt.Sprintf("; killed what remained of the trial's process group %d", pg)
}

// lostEvent is the Exited event of an attempt without an exit status.
func lostEvent(id int64, now time.Time, msg string) backend.Event {
	return backend.Event{AttemptID: id, Kind: backend.Exited, Time: now, Lost: true, Message: msg}
}
