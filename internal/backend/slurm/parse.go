package slurm

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// QueueFormat is the squeue --Format the backend asks for: each field ends
// with "|", the free-text fields last (the comment, then the name, which
// may hold anything but a newline), so that a "|" in another job's comment
// or name cannot shift the fields before them (it moves the rest of the
// comment into the name, which then matches no attempt's).
const QueueFormat = "JobID:|,State:|,Reason:|,exit_code:|,RestartCnt:|,PreemptTime:|,StartTime:|,EndTime:|,Comment:|,Name:|"

// queueFields is the number of fields of QueueFormat.
const queueFields = 10

// Job is one line of squeue's output in QueueFormat.
type Job struct {
	ID     string // e.g. "1234" ("1234_5" for an array task, which Virga never submits)
	State  string // RUNNING, PENDING, COMPLETED, FAILED, CANCELLED, TIMEOUT, PREEMPTED, NODE_FAIL, ...
	Reason string
	// ExitStatus is the batch script's wait status as Slurm keeps it: the
	// exit code in bits 8-15, the terminating signal in bits 0-6.
	ExitStatus int
	Restarts   int       // how often Slurm requeued the job
	Preempted  time.Time // when it was preempted; zero: never
	Start, End time.Time // zero when Slurm gives none (N/A, Unknown)
	Comment    string
	Name       string
}

// ExitCode returns the exit code of the batch script, or -1 if a signal
// ended it.
func (j *Job) ExitCode() int {
	if j.ExitStatus&0x7f != 0 {
		return -1
	}
	return (j.ExitStatus >> 8) & 0xff
}

// ExitSignal returns the signal that ended the batch script, 0 if none.
func (j *Job) ExitSignal() int { return j.ExitStatus & 0x7f }

// Requeued reports whether Slurm has put the job back in the queue after it
// ran (its preemption, or its node's failure, on a site that requeues).
func (j *Job) Requeued() bool {
	switch j.State {
	case "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED":
		return true
	}
	return j.Restarts > 0 && !j.Ended()
}

// Running reports whether the job's batch script runs (or has just ended
// and is being cleaned up).
func (j *Job) Running() bool {
	switch j.State {
	case "RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING":
		return true
	}
	return false
}

// Ended reports whether the job is over for good.
func (j *Job) Ended() bool {
	switch j.State {
	case "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL",
		"DEADLINE", "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED":
		return true
	}
	return false
}

// ParseQueue parses squeue's output in QueueFormat (with --noheader). Times
// are read in loc (squeue prints the controller's local time without a
// zone). A line that is not in that format (a job name with a newline in
// it, another version's output) is skipped and returned in bad, so that
// the caller does not take a job it could not read for a job that
// vanished.
func ParseQueue(out string, loc *time.Location) (jobs []Job, bad []string) {
	for line := range strings.SplitSeq(out, "\n") {
		line = strings.TrimSuffix(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		j, err := parseJobLine(line, loc)
		if err != nil {
			bad = append(bad, line)
			continue
		}
		jobs = append(jobs, j)
	}
	return jobs, bad
}

func parseJobLine(line string, loc *time.Location) (Job, error) {
	if !strings.HasSuffix(line, "|") {
		return Job{}, fmt.Errorf("no final separator")
	}
	f := strings.SplitN(strings.TrimSuffix(line, "|"), "|", queueFields)
	if len(f) != queueFields {
		return Job{}, fmt.Errorf("%d fields, want %d", len(f), queueFields)
	}
	for i := range 8 {
		f[i] = strings.TrimSpace(f[i])
	}
	j := Job{ID: f[0], State: baseState(f[1]), Reason: f[2], Comment: f[8], Name: f[9]}
	if !validJobID(j.ID) {
		return Job{}, fmt.Errorf("job id %q", j.ID)
	}
	if j.State == "" || strings.ContainsFunc(j.State, func(r rune) bool { return (r < 'A' || r > 'Z') && r != '_' }) {
		return Job{}, fmt.Errorf("state %q", f[1])
	}
	var err error
	if j.ExitStatus, err = parseCount(f[3]); err != nil {
		return Job{}, fmt.Errorf("exit code: %w", err)
	}
	if j.Restarts, err = parseCount(f[4]); err != nil {
		return Job{}, fmt.Errorf("restarts: %w", err)
	}
	if j.Preempted, err = parseTime(f[5], loc); err != nil {
		return Job{}, fmt.Errorf("preempt time: %w", err)
	}
	if j.Start, err = parseTime(f[6], loc); err != nil {
		return Job{}, fmt.Errorf("start time: %w", err)
	}
	if j.End, err = parseTime(f[7], loc); err != nil {
		return Job{}, fmt.Errorf("end time: %w", err)
	}
	return j, nil
}

// baseState drops what some versions append to a state ("CANCELLED by 0",
// "CANCELLED+").
func baseState(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, " +"); i >= 0 {
		s = s[:i]
	}
	return s
}

// validJobID accepts "123", "123_4" (array task) and "123+1" (het job).
func validJobID(s string) bool {
	if s == "" || len(s) > 40 || s[0] < '0' || s[0] > '9' {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && r != '_' && r != '+' {
			return false
		}
	}
	return true
}

// parseCount reads a non-negative integer; an empty field or N/A is 0.
func parseCount(s string) (int, error) {
	if s == "" || s == "N/A" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a count", s)
	}
	return n, nil
}

// parseTime reads Slurm's "2006-01-02T15:04:05"; a word (N/A, None, NONE,
// Unknown, (null)), 0 and an empty field are the zero time.
func parseTime(s string, loc *time.Location) (time.Time, error) {
	if s == "" || s == "0" || s[0] < '0' || s[0] > '9' {
		return time.Time{}, nil
	}
	t, err := time.ParseInLocation("2006-01-02T15:04:05", s, loc)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not a time", s)
	}
	return t, nil
}

// attemptOf returns the attempt ID in a job name "PREFIX-a<ID>", or false.
func attemptOf(prefix, name string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, prefix+"-a")
	if !ok || rest == "" || rest[0] == '0' || rest[0] == '+' || rest[0] == '-' {
		return 0, false
	}
	id, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || id <= 0 {
		return 0, false
	}
	return id, true
}

// PrefixFor returns a job prefix for a server identified by id (e.g. its
// data directory or database URL): "virga-" and 8 hex digits of id's
// SHA-256. The same server keeps its prefix across restarts (so that it
// adopts its jobs), and two servers submitting as the same user do not
// take each other's jobs for their own.
func PrefixFor(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "virga-" + hex.EncodeToString(sum[:4])
}

// JobName is the name of the Slurm job of an attempt.
func JobName(prefix string, attemptID int64) string {
	return prefix + "-a" + strconv.FormatInt(attemptID, 10)
}

// parseSubmitted reads sbatch --parsable's answer: "ID" or "ID;CLUSTER".
func parseSubmitted(out string) (string, error) {
	s := strings.TrimSpace(out)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 { // warnings may come first
		s = strings.TrimSpace(s[i+1:])
	}
	id, _, _ := strings.Cut(s, ";")
	if !validJobID(id) {
		return "", fmt.Errorf("sbatch answered %q, not a job id", strings.TrimSpace(out))
	}
	return id, nil
}
