// Package backend defines how Virga runs trial processes: one small required
// interface, implemented by local/ (processes on this machine) and, later, by
// slurm/, kube/ and sim/. A backend starts and stops what it is told to and
// reports what happened; it never decides what should run.
package backend

import (
	"context"
	"time"

	"github.com/virga-ml/virga"
)

// StartSpec is everything a backend needs to start one attempt.
type StartSpec struct {
	AttemptID    int64
	TrialID      int64
	ExperimentID int64
	Argv         []string          // the command, placeholders already filled
	Env          map[string]string // added to the backend's own environment
	Workdir      string            // absolute
	// Resources is what the whole attempt needs: per node times Nodes.
	Resources virga.Resources
	// Nodes is the size of the attempt's gang (at least 1): a backend starts
	// all of its nodes or none, and ends the whole attempt when one is lost.
	// ProcessesPerNode trial processes run on each node (at least 1).
	Nodes            int
	ProcessesPerNode int
	// Checkpoint is the checkpoint to restore before the trial starts (empty:
	// none). A local backend finds it restored already; a Remote one has the
	// agent on the node fetch it from the server.
	Checkpoint string
	// Timeout is the attempt's time limit (0: none) and StopGrace the time
	// between SIGTERM and SIGKILL when it is stopped; a batch system is told
	// both so that it warns the trial before it kills it.
	Timeout   time.Duration
	StopGrace time.Duration
	// Dir is the attempt's own absolute directory, created by the caller: the
	// backend keeps its logs ("output.log") and bookkeeping files there.
	Dir string
	// ReportURL is where the stdout fallback (VIRGA_METRIC lines) is posted.
	ReportURL string
	// Token authorises reports for this trial (sent as a Bearer token).
	Token string
	// Pool is the capacity pool to run on (see Pooled); empty means the
	// backend's default pool.
	Pool string
}

// EventKind says what happened to an attempt.
type EventKind string

// Event kinds.
const (
	Started EventKind = "started" // the trial process is running (PID set)
	Exited  EventKind = "exited"  // the process ended (ExitCode or Signal set) or vanished (Lost)
)

// Event is one thing a backend observed about an attempt.
type Event struct {
	AttemptID int64
	Kind      EventKind
	Time      time.Time
	PID       int    // Started
	ExitCode  *int   // Exited normally
	Signal    string // Exited by a signal, e.g. "killed", "terminated"
	Lost      bool   // Exited: no exit status could be had
	// LastSeen (Exited Lost) is the last time the backend saw the attempt
	// alive, zero if it never did: a lost attempt is billed up to the
	// latest of this and its last report, not up to Time (when its loss
	// was noticed).
	LastSeen time.Time
	// Preempted (Exited) means the attempt ended because its pool's
	// capacity was reclaimed (a spot node taken back): the backend sent it
	// the reclaim's warning (SIGTERM) before it ended, and SIGKILL at the
	// reclaim if it still ran. ExitCode or Signal say how it ended.
	Preempted bool
	// Pool is the pool the attempt ran on (Started, Exited); empty for a
	// backend without pools.
	Pool    string
	Message string
}

// Backend runs attempts. Methods are safe for concurrent use.
type Backend interface {
	// Name identifies the backend in attempts ("local", "slurm", ...).
	Name() string
	// Start launches an attempt and returns once it is launched (a Started
	// event follows). It returns an error wrapping virga.ErrNoCapacity if the
	// resources do not fit now. Starting the same AttemptID twice is an error.
	Start(ctx context.Context, s *StartSpec) error
	// Stop asks an attempt to end: SIGTERM (or the backend's equivalent) now,
	// SIGKILL after grace. It returns at once; an Exited event follows.
	// Stopping an attempt that has already ended is not an error.
	Stop(attemptID int64, grace time.Duration) error
	// Events delivers every Started and Exited event exactly once per attempt
	// this backend runs or adopts. The channel is closed by Close.
	Events() <-chan Event
	// Free returns the resources not reserved by running attempts.
	Free() virga.Resources
	// Close stops watching attempts. It does not stop them: processes go on and
	// can be adopted by the next server.
	Close() error
}

// PerNode returns what one node of the attempt's gang needs.
func (s *StartSpec) PerNode() virga.Resources {
	n := max(s.Nodes, 1)
	return virga.Resources{CPU: s.Resources.CPU / float64(n), MemoryMB: s.Resources.MemoryMB / int64(n), GPU: s.Resources.GPU / n}
}

// Remote is a backend whose attempts run on other machines, through `virga
// agent` (package agent): the server cannot read their checkpoint
// directories, so the control loop leaves restoring a checkpoint to the
// agent (StartSpec.Checkpoint), which fetches it from the server, and
// records the checkpoints the agent uploads with the trial's reports.
type Remote interface {
	Backend
	// Remote reports whether attempts run away from the server's files.
	Remote() bool
}

// IsRemote reports whether b runs its attempts through the agent.
func IsRemote(b Backend) bool {
	r, ok := b.(Remote)
	return ok && r.Remote()
}

// Adopter is a backend that can take over attempts started by an earlier
// server (after a crash or restart).
type Adopter interface {
	// Adopt takes over the attempt recorded with the given directory. If its
	// process still runs, the backend watches it (reserving its resources)
	// and sends Exited when it ends; if it has ended, Exited follows at once
	// with its recorded status; if it never started, Exited follows with Lost.
	// In every case the attempt can never start later.
	Adopt(ctx context.Context, a *virga.Attempt, res virga.Resources) error
}

// Reaper is an Adopter that ends what an earlier server left behind
// unrecorded: a job whose submission outlived the server that made it (the
// server died while the batch system was taking it), for an attempt that
// was settled since (found lost, and run again as a new attempt).
type Reaper interface {
	Adopter
	// AdoptedAll tells the backend that every attempt the store holds live
	// has been handed to Adopt. From then on, whatever the backend finds of
	// an attempt that it neither started nor adopted is an orphan, which it
	// ends (cancelled before it runs, where it can be). It returns at once;
	// calling it again does nothing more.
	AdoptedAll()
}

// Sizer is a backend that knows the total resources it can ever offer, so
// that the control loop can refuse work whose trials can never fit (rather
// than wait for capacity that will never come free).
type Sizer interface {
	// Capacity returns the total resources the backend can ever offer: what
	// Free returns with nothing running or adopted. It does not change.
	Capacity() virga.Resources
}

// PoolStatus is one capacity pool of a backend as it is now.
type PoolStatus struct {
	Name string
	// Capacity is the most the pool can ever hand out; Free is what running
	// and adopted attempts leave of it (negative in a dimension when adopted
	// attempts overcommit it).
	Capacity virga.Resources
	Free     virga.Resources
	// Preemptible means the pool's capacity can be reclaimed (spot); Up
	// then says whether it can be had now, Next when Up next changes (zero:
	// never), and Warning how long before a reclaim its attempts are told
	// (SIGTERM). A pool that is not preemptible is always up.
	Preemptible bool
	Up          bool
	Next        time.Time
	Warning     time.Duration
}

// Reclaiming reports whether the pool's next reclaim has been announced at
// now: it is up, and goes down within its warning. An attempt started on it
// now is told at once to stop.
func (p PoolStatus) Reclaiming(now time.Time) bool {
	return p.Up && !p.Next.IsZero() && !now.Before(p.Next.Add(-p.Warning))
}

// Pooled is a backend whose capacity comes in named pools (for example
// on-demand and spot nodes), so that the control loop can place each attempt
// on one (StartSpec.Pool).
type Pooled interface {
	// Pools returns the status of every pool, in the backend's configured
	// order (the first is the default pool). It returns nil if the backend
	// has a single pool without a name (all of its capacity): attempts then
	// leave StartSpec.Pool empty. The slice is the caller's.
	Pools() []PoolStatus
}

// Availability says when a preemptible pool's capacity can be had, for
// example a spot availability trace replayed against the clock.
type Availability interface {
	// Up reports whether capacity is available at t, and when that next
	// changes after t (zero: never). It is a pure function of t.
	Up(t time.Time) (up bool, next time.Time)
}
