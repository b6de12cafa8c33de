package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/agent"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/clock"
)

// Pool is one capacity pool: a Slurm partition (with an optional QoS and
// account) and the share of its nodes Virga may use.
type Pool struct {
	// Name identifies the pool in StartSpec.Pool and in attempts. It may be
	// empty only when it is the one pool (Pools then returns nil).
	Name string
	// Partition, QoS and Account are handed to sbatch when set.
	Partition string
	QoS       string
	Account   string
	// Node is one node's shape as Virga may use it, and Nodes how many such
	// nodes Virga may hold at once: the pool's capacity is Nodes x Node.
	Node  virga.Resources
	Nodes int
	// Preemptible means that Slurm may take the pool's jobs back (a
	// partition that a higher PriorityTier partition preempts, a spot
	// partition), and Warning how long they have between SIGTERM and
	// SIGKILL then (the partition's GraceTime).
	Preemptible bool
	Warning     time.Duration
	// TimeLimit is the most a job may run on the partition (its MaxTime);
	// zero means none. An attempt that reaches it is told StopGrace before
	// (SIGTERM) and reported preempted, to resume from its checkpoint in a
	// new job.
	TimeLimit time.Duration
	// Args are more sbatch options (--constraint, --reservation, ...); they
	// come after Virga's own and so may override them.
	Args []string
}

// Config configures the backend.
type Config struct {
	// Pools, in order: the first is the default (StartSpec.Pool empty).
	// At least one.
	Pools []Pool
	// AgentPath is the `virga` binary as the nodes see it: each node of an
	// attempt runs `AgentPath agent` with agent.EnvSpec in its environment.
	// Required.
	AgentPath string
	// JobPrefix starts the name of every job ("PREFIX-a<attempt ID>"), by
	// which a restarted server finds its jobs: it must be the same across
	// restarts and differ between servers submitting as the same user
	// (PrefixFor makes one of the server's data directory). Default "virga".
	// Once AdoptedAll is called, a job with the prefix whose attempt is not
	// watched is cancelled: a prefix shared with another server would
	// cancel that server's jobs.
	JobPrefix string
	// PollInterval is how often the state of all attempts is asked for (one
	// squeue). Default 5s.
	PollInterval time.Duration
	// OrphanWatch is how long the poll goes on without attempts to watch
	// after a job may have been left to reach Slurm unwatched (an attempt
	// lost before its job was ever seen, an sbatch that failed, the
	// recovery's AdoptedAll), so that such a job is cancelled even when
	// nothing else runs. Default 5m.
	OrphanWatch time.Duration
	// OutputDir, if set, is where the nodes write each job's output
	// (PREFIX-a<ID>.log), for clusters whose nodes cannot write the server's
	// attempt directories; empty means StartSpec.Dir/output.log.
	OutputDir string
	// Prologue is shell text run by the batch script before srun (module
	// loads, a virtualenv's activation).
	Prologue string
	// Export is sbatch's --export; default "ALL" (the server's environment
	// reaches the job, as for a user's sbatch).
	Export string
	// The commands; defaults "sbatch", "squeue", "scancel", "scontrol" from
	// PATH. The batch script calls scancel and scontrol by these names too.
	Sbatch, Squeue, Scancel, Scontrol string
	// CommandTimeout bounds each command. Default 60s.
	CommandTimeout time.Duration
	// Location is the time zone of the times squeue prints (the
	// controller's local time); nil means time.Local.
	Location *time.Location
	// Clock is the backend's time: event times, orphan watching and the
	// grace a Stop gives before its SIGKILL; nil means the real clock.
	Clock clock.Clock
	// Logger receives what goes wrong with commands; nil discards.
	Logger *slog.Logger
}

// Stats counts the backend's commands since New.
type Stats struct {
	Queries   int64         // squeue calls (one per poll cycle with attempts to watch)
	QueryTime time.Duration // their total wall time
	Submits   int64         // sbatch calls
	Cancels   int64         // scancel calls
	Releases  int64         // scontrol release calls (one per submitted job)
	Orphans   int64         // scancel calls for jobs that no attempt watched (orphans)
	Failures  int64         // commands that failed
}

// warnComment is written in the job's Comment by the batch script when Slurm
// warns it of its time limit.
const warnComment = "virga:time-limit"

// pool is one configured pool and its bookkeeping (acct, one of
// Backend.acct's, guarded by Backend.mu).
type pool struct {
	Pool
	acct *backend.Pool
}

// attempt is one attempt the backend watches, from Start or Adopt until its
// Exited event.
type attempt struct {
	id      int64
	name    string
	jobID   string // "" until known (adopted: from the first poll that finds it)
	pool    *pool
	res     virga.Resources
	seq     uint64 // the registration's sequence number: polls begun before it cannot miss it
	adopted bool

	submitting bool          // sbatch has not answered yet
	released   bool          // its held job was released (or is being)
	polled     bool          // a poll has seen its job (and set started)
	lastSeen   time.Time     // the last poll that saw its job run
	stopGrace  time.Duration // the grace of a Stop not carried out yet
	started    bool          // Started was sent
	stopping   bool          // Stop was called
	termSent   bool          // SIGTERM sent (or the pending job cancelled)
	killed     bool          // the grace ended: SIGKILL sent
	killAt     time.Time
	timer      clock.Timer
}

// Backend runs attempts as Slurm jobs. It implements backend.Backend,
// backend.Pooled, backend.Reaper (and so backend.Adopter), backend.Sizer
// and backend.Remote.
type Backend struct {
	cfg   Config
	pools []*pool        // in the order of acct's
	acct  *backend.Pools // guarded by mu
	loc   *time.Location
	clock clock.Clock
	now   func() time.Time // clock.Now
	log   *slog.Logger
	q     *backend.EventQueue

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	kick   chan struct{}

	queries, queryNS, submits, cancels, releases, orphans, failures atomic.Int64

	mu       sync.Mutex
	closed   bool
	seq      uint64
	attempts map[int64]*attempt
	seen     map[int64]bool // every attempt ever started or adopted here
	reaping  bool           // AdoptedAll was called: every unwatched job is an orphan
	reapNow  bool           // the next poll runs even without attempts to watch
	watchTo  time.Time      // polls go on without attempts until then (OrphanWatch)
}

var (
	_ backend.Backend = (*Backend)(nil)
	_ backend.Reaper  = (*Backend)(nil)
	_ backend.Pooled  = (*Backend)(nil)
	_ backend.Sizer   = (*Backend)(nil)
	_ backend.Remote  = (*Backend)(nil)
)

// New validates cfg and starts the backend's poller.
func New(cfg Config) (*Backend, error) {
	if len(cfg.Pools) == 0 {
		return nil, errors.New("slurm backend: no pools configured")
	}
	if cfg.AgentPath == "" {
		return nil, errors.New("slurm backend: AgentPath (the virga binary on the nodes) is required")
	}
	if cfg.JobPrefix == "" {
		cfg.JobPrefix = "virga"
	}
	if strings.ContainsAny(cfg.JobPrefix, " \t\n|,'\"\\$`") {
		return nil, fmt.Errorf("slurm backend: job prefix %q: no spaces, quotes or separators", cfg.JobPrefix)
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 5 * time.Second
	}
	if cfg.CommandTimeout <= 0 {
		cfg.CommandTimeout = time.Minute
	}
	if cfg.OrphanWatch <= 0 {
		cfg.OrphanWatch = 5 * time.Minute
	}
	if cfg.Export == "" {
		cfg.Export = "ALL"
	}
	cfg.Sbatch = orDefault(cfg.Sbatch, "sbatch")
	cfg.Squeue = orDefault(cfg.Squeue, "squeue")
	cfg.Scancel = orDefault(cfg.Scancel, "scancel")
	cfg.Scontrol = orDefault(cfg.Scontrol, "scontrol")
	b := &Backend{cfg: cfg, loc: cfg.Location, clock: clock.Or(cfg.Clock), log: cfg.Logger,
		kick: make(chan struct{}, 1), attempts: map[int64]*attempt{}, seen: map[int64]bool{}}
	if b.loc == nil {
		b.loc = time.Local
	}
	b.now = b.clock.Now
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	seen := map[string]bool{}
	var accts []backend.Pool
	named := false
	for i, pc := range cfg.Pools {
		switch {
		case pc.Name == "" && len(cfg.Pools) > 1:
			return nil, fmt.Errorf("slurm backend: pool %d has no name (only a single pool may go without)", i+1)
		case seen[pc.Name]:
			return nil, fmt.Errorf("slurm backend: pool %q is configured twice", pc.Name)
		case pc.Nodes < 1:
			return nil, fmt.Errorf("slurm backend: pool %q: nodes %d; at least 1", pc.Name, pc.Nodes)
		case pc.Node.CPU <= 0 || pc.Node.MemoryMB < 0 || pc.Node.GPU < 0:
			return nil, fmt.Errorf("slurm backend: pool %q: a node needs some cpu, and no negative memory or gpu", pc.Name)
		case pc.Warning < 0 || pc.TimeLimit < 0:
			return nil, fmt.Errorf("slurm backend: pool %q: negative warning or time limit", pc.Name)
		}
		seen[pc.Name] = true
		accts = append(accts, backend.Pool{Name: pc.Name, Preemptible: pc.Preemptible, Warning: pc.Warning,
			Capacity: virga.Resources{CPU: pc.Node.CPU * float64(pc.Nodes), MemoryMB: pc.Node.MemoryMB * int64(pc.Nodes), GPU: pc.Node.GPU * pc.Nodes}})
		named = named || pc.Name != ""
	}
	b.acct = backend.NewPools(named, accts)
	for i, acct := range b.acct.All() {
		b.pools = append(b.pools, &pool{Pool: cfg.Pools[i], acct: acct})
	}
	b.q = backend.NewEventQueue()
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.wg.Add(1)
	go b.pollLoop()
	return b, nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// Name returns "slurm".
func (b *Backend) Name() string { return "slurm" }

// Remote returns true: attempts run on Slurm's nodes, through `virga agent`.
func (b *Backend) Remote() bool { return true }

// Events returns the channel of Started and Exited events (queued without
// bound; closed by Close, dropping what was not delivered).
func (b *Backend) Events() <-chan backend.Event { return b.q.Out() }

// Stats returns the commands run so far.
func (b *Backend) Stats() Stats {
	return Stats{Queries: b.queries.Load(), QueryTime: time.Duration(b.queryNS.Load()), Submits: b.submits.Load(),
		Cancels: b.cancels.Load(), Releases: b.releases.Load(), Orphans: b.orphans.Load(), Failures: b.failures.Load()}
}

// Capacity returns the sum of the pools' capacities.
func (b *Backend) Capacity() virga.Resources {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.acct.Capacity()
}

// Free returns what Virga's pending and running attempts leave of the pools.
// It knows nothing of other users' jobs: a job that fits may still wait in
// Slurm's queue.
func (b *Backend) Free() virga.Resources {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.acct.Free()
}

// Pools returns each pool's status, or nil for a single unnamed pool.
// Slurm pools are always up: a preemption comes without notice beyond the
// partition's GraceTime.
func (b *Backend) Pools() []backend.PoolStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.acct.Status()
}

// poolNamed returns the pool called name ("": the default).
func (b *Backend) poolNamed(name string) (*pool, error) {
	acct, err := b.acct.Get(name) // fixed after New: no lock needed
	if err != nil {
		return nil, err
	}
	for _, p := range b.pools {
		if p.acct == acct {
			return p, nil
		}
	}
	panic("slurm backend: a pool without its bookkeeping")
}

// Start submits the attempt's job, held, and releases it once sbatch has
// told its ID (so that a job whose server died before it learnt the ID
// never runs unless a restarted server adopts it); it returns once the job
// is released, or once sbatch has accepted it if the release failed (the
// poll tries again). Started follows when the job runs. It returns an error wrapping
// ErrNoCapacity if Virga's attempts leave too little of the pool, and a
// plain error if the gang can never fit it (more nodes than the pool's, or
// more per node than a node has) or sbatch refuses the job.
func (b *Backend) Start(ctx context.Context, s *backend.StartSpec) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("starting attempt: %w", err)
	}
	if s == nil || len(s.Argv) == 0 || s.AttemptID <= 0 {
		return errors.New("starting attempt: the spec needs an attempt ID and an argv")
	}
	if b.cfg.OutputDir == "" && !filepath.IsAbs(s.Dir) {
		return errors.New("starting attempt: the spec needs an absolute Dir")
	}
	p, err := b.poolNamed(s.Pool)
	if err != nil {
		return fmt.Errorf("starting attempt %d: %w", s.AttemptID, err)
	}
	nodes := max(s.Nodes, 1)
	per := s.PerNode()
	if nodes > p.Nodes || !per.Fits(p.Node) {
		return fmt.Errorf("starting attempt %d: %d node(s) of %s never fit pool %q (%d node(s) of %s)",
			s.AttemptID, nodes, fmtRes(per), p.Name, p.Nodes, fmtRes(p.Node))
	}
	script, args := b.job(s, p)

	a := &attempt{id: s.AttemptID, name: JobName(b.cfg.JobPrefix, s.AttemptID), pool: p, res: s.Resources}
	b.mu.Lock()
	switch {
	case b.closed:
		b.mu.Unlock()
		return fmt.Errorf("starting attempt %d: the slurm backend is closed", s.AttemptID)
	case b.seen[s.AttemptID]:
		b.mu.Unlock()
		return fmt.Errorf("starting attempt %d: already started here: %w", s.AttemptID, virga.ErrConflict)
	case !p.acct.Fits(s.Resources):
		b.mu.Unlock()
		return fmt.Errorf("starting attempt %d on pool %q: %w", s.AttemptID, p.Name, virga.ErrNoCapacity)
	}
	b.seen[s.AttemptID] = true
	p.acct.Reserve(a.res)
	// Watched from now on (a Stop while sbatch runs is carried out once
	// the job exists); the poll leaves it alone until it is submitted.
	a.submitting = true
	b.attempts[a.id] = a
	b.mu.Unlock()

	b.submits.Add(1)
	out, err := b.run(ctx, []byte(script), b.cfg.Sbatch, args...)
	var id string
	if err == nil {
		id, err = parseSubmitted(string(out))
	}
	if err != nil {
		// sbatch may have submitted the job and then failed (a timeout):
		// make sure that no job of this attempt runs unwatched.
		b.cancelByName(a.name)
		b.mu.Lock()
		b.watchOrphansLocked() // or may yet submit it
		delete(b.attempts, a.id)
		p.acct.Release(a.res)
		b.mu.Unlock()
		return fmt.Errorf("starting attempt %d: %w", s.AttemptID, err)
	}
	b.mu.Lock()
	a.jobID, a.submitting = id, false
	b.seq++
	a.seq = b.seq
	release := !a.stopping // a stopped attempt's job is cancelled while held
	a.released = release
	b.mu.Unlock()
	b.log.Debug("slurm: submitted", "attempt", a.id, "job", id, "pool", p.Name)
	if release {
		b.release(a, id)
	}
	return nil
}

// release lets an attempt's held job run (scontrol release). A failure
// is logged and left to the next poll that finds the job held.
func (b *Backend) release(a *attempt, jobID string) {
	b.releases.Add(1)
	if _, err := b.run(b.ctx, nil, b.cfg.Scontrol, "release", jobID); err != nil {
		b.log.Warn("slurm: releasing a held job failed; trying again at the next poll", "attempt", a.id, "job", jobID, "err", err)
		b.mu.Lock()
		a.released = false
		b.mu.Unlock()
	}
}

// job returns the batch script and sbatch's arguments for s on p.
func (b *Backend) job(s *backend.StartSpec, p *pool) (string, []string) {
	nodes := max(s.Nodes, 1)
	per := s.PerNode()
	cpus := max(int(math.Ceil(per.CPU-1e-9)), 1)
	output := filepath.Join(s.Dir, "output.log")
	if b.cfg.OutputDir != "" {
		output = filepath.Join(b.cfg.OutputDir, JobName(b.cfg.JobPrefix, s.AttemptID)+".log")
	}
	args := []string{"--parsable", "--hold", "--job-name=" + JobName(b.cfg.JobPrefix, s.AttemptID),
		"--output=" + output, "--open-mode=append", "--chdir=" + filepath.Dir(output),
		"--export=" + b.cfg.Export, "--no-requeue",
		"--nodes=" + strconv.Itoa(nodes), "--ntasks-per-node=1", "--cpus-per-task=" + strconv.Itoa(cpus)}
	if per.MemoryMB > 0 {
		args = append(args, "--mem="+strconv.FormatInt(per.MemoryMB, 10))
	}
	if per.GPU > 0 {
		args = append(args, "--gres=gpu:"+strconv.Itoa(per.GPU))
	}
	if p.Partition != "" {
		args = append(args, "--partition="+p.Partition)
	}
	if p.QoS != "" {
		args = append(args, "--qos="+p.QoS)
	}
	if p.Account != "" {
		args = append(args, "--account="+p.Account)
	}
	if limit := timeLimit(s.Timeout, s.StopGrace, p.TimeLimit); limit > 0 {
		args = append(args, "--time="+strconv.Itoa(int(limit/time.Minute)))
		if w := warnSeconds(s.StopGrace, limit); w > 0 {
			args = append(args, fmt.Sprintf("--signal=B:USR1@%d", w))
		}
	}
	args = append(args, p.Args...)

	var srun []string
	srun = append(srun, "srun", "--kill-on-bad-exit=1", "--nodes="+strconv.Itoa(nodes), "--ntasks-per-node=1",
		"--cpus-per-task="+strconv.Itoa(cpus))
	if per.GPU > 0 {
		srun = append(srun, "--gres=gpu:"+strconv.Itoa(per.GPU))
	}
	srun = append(srun, b.cfg.AgentPath, "agent")
	var sb strings.Builder
	fmt.Fprintf(&sb, "#!/bin/bash\n# Virga attempt %d of trial %d (experiment %d)\n", s.AttemptID, s.TrialID, s.ExperimentID)
	if b.cfg.Prologue != "" {
		sb.WriteString(b.cfg.Prologue)
		sb.WriteString("\n")
	}
	fmt.Fprintf(&sb, "export %s=%s\n", agent.EnvSpec, shellQuote(agent.FromStart(s).Encode()))
	// Slurm's time-limit warning reaches this shell alone (B:USR1): mark the
	// job, so that its end reads as a preemption, and pass SIGTERM to the
	// agents (never to srun: it would kill the steps at once).
	fmt.Fprintf(&sb, `virga_warned() {
  %s update JobId="$SLURM_JOB_ID" Comment=%s >/dev/null 2>&1
  %s --signal=TERM "$SLURM_JOB_ID" >/dev/null 2>&1
}
trap 'trapped=1; virga_warned' USR1
%s &
pid=$!
while :; do
  trapped=0
  wait "$pid"; rc=$?
  [ "$trapped" = 1 ] || break
  if ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid"; r=$?; [ "$r" = 127 ] || rc=$r
    break
  fi
done
exit "$rc"
`, shellQuote(b.cfg.Scontrol), warnComment, shellQuote(b.cfg.Scancel), shellJoin(srun))
	return sb.String(), args
}

// timeLimit is the job's --time: the attempt's timeout plus its grace and a
// minute (the control loop stops it at its timeout; Slurm's limit is the
// backstop), rounded up to whole minutes, capped by the pool's limit
// (rounded down, at least a minute); 0 for none.
func timeLimit(timeout, grace, pool time.Duration) time.Duration {
	var d time.Duration
	if timeout > 0 {
		d = time.Duration(math.Ceil((timeout + max(grace, 0) + time.Minute).Minutes())) * time.Minute
	}
	if pool > 0 {
		p := max(pool.Truncate(time.Minute), time.Minute)
		if d == 0 || p < d {
			d = p
		}
	}
	return d
}

// warnSeconds is how long before a limit the batch shell is warned: the
// stop grace, at most half of the limit and Slurm's maximum (65535 s).
func warnSeconds(grace, limit time.Duration) int {
	if grace <= 0 {
		grace = 30 * time.Second
	}
	grace = min(grace, limit/2)
	return min(int(math.Ceil(grace.Seconds())), 65535)
}

// Stop sends SIGTERM to the attempt's steps, and SIGKILL to the whole job
// after grace; a job not yet seen running is cancelled at once. It returns
// at once; Exited follows from the poll.
func (b *Backend) Stop(attemptID int64, grace time.Duration) error {
	b.mu.Lock()
	a := b.attempts[attemptID]
	if a == nil || b.closed {
		b.mu.Unlock()
		return nil
	}
	if !a.stopping || grace < a.stopGrace {
		a.stopGrace = grace
	}
	a.stopping = true
	if a.submitting || !a.polled {
		// Carried out once the job's state is known: cancelled if it
		// waits, signalled if it runs.
		b.mu.Unlock()
		b.wake()
		return nil
	}
	b.mu.Unlock()
	b.stopNow(a, grace)
	return nil
}

// stopNow carries out a Stop of a submitted attempt.
func (b *Backend) stopNow(a *attempt, grace time.Duration) {
	b.mu.Lock()
	if b.closed || b.attempts[a.id] != a {
		b.mu.Unlock()
		return
	}
	first := !a.termSent
	a.termSent = true
	killAt := b.now().Add(max(grace, 0))
	pending := !a.started
	switch {
	case a.killed:
	case pending || grace <= 0:
		a.killed = true
		if a.timer != nil {
			a.timer.Stop()
		}
	case a.killAt.IsZero() || killAt.Before(a.killAt):
		a.killAt = killAt
		if a.timer != nil {
			a.timer.Stop()
		}
		a.timer = b.clock.AfterFunc(grace, func() { b.killNow(a) })
	}
	kill, term := a.killed, first && !a.killed
	target := a.jobID
	if target == "" {
		target = a.name
	}
	b.wg.Add(1)
	b.mu.Unlock()

	go func() {
		defer b.wg.Done()
		switch {
		case kill && pending:
			b.cancel1(target) // pending: no process to signal
		case kill:
			b.cancel1(target, "--signal=KILL", "--full")
			b.cancel1(target)
		case term:
			b.cancel1(target, "--signal=TERM")
		}
	}()
}

// killNow ends a stopped attempt's grace: SIGKILL to everything of the
// job, then its cancellation.
func (b *Backend) killNow(a *attempt) {
	b.mu.Lock()
	if b.closed || b.attempts[a.id] != a || a.killed {
		b.mu.Unlock()
		return
	}
	a.killed = true
	target := a.jobID
	if target == "" {
		target = a.name
	}
	b.wg.Add(1)
	b.mu.Unlock()
	defer b.wg.Done()
	b.cancel1(target, "--signal=KILL", "--full")
	b.cancel1(target)
}

// cancel1 runs scancel on a job ID or, for a job whose ID is not known yet,
// on its name.
func (b *Backend) cancel1(target string, flags ...string) {
	args := append([]string{}, flags...)
	if validJobID(target) {
		args = append(args, target)
	} else {
		args = append(args, "--name="+target)
		if u, err := user.Current(); err == nil {
			args = append(args, "--user="+u.Username)
		}
	}
	b.cancels.Add(1)
	if _, err := b.run(b.ctx, nil, b.cfg.Scancel, args...); err != nil {
		b.log.Warn("slurm: scancel failed", "args", args, "err", err)
	}
}

func (b *Backend) cancelByName(name string) { b.cancel1(name) }

// Adopt takes over the attempt of an earlier server: its job is looked for
// by name in the next poll. A job that runs or waits is watched (res
// reserved in the attempt's pool; Started is sent when it runs, also for
// an attempt already known to run; a job still held, whose server died
// before it released it, is released), one that has ended gets Exited with
// its status, and one that Slurm no longer knows gets Exited Lost.
func (b *Backend) Adopt(ctx context.Context, at *virga.Attempt, res virga.Resources) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("adopting attempt: %w", err)
	}
	if at == nil || at.ID <= 0 {
		return errors.New("adopting attempt: no attempt")
	}
	p, err := b.poolNamed(at.Pool)
	if err != nil {
		p = b.pools[0] // the pools changed since: count it in the default one
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return fmt.Errorf("adopting attempt %d: the slurm backend is closed", at.ID)
	case b.attempts[at.ID] != nil:
		return fmt.Errorf("adopting attempt %d: already watched here: %w", at.ID, virga.ErrConflict)
	}
	b.seq++
	a := &attempt{id: at.ID, name: JobName(b.cfg.JobPrefix, at.ID), pool: p, res: res, seq: b.seq, adopted: true}
	b.seen[at.ID] = true
	b.attempts[at.ID] = a
	p.acct.Reserve(res)
	b.wake()
	return nil
}

// AdoptedAll implements backend.Reaper: from now on, a job with the
// backend's prefix whose attempt is neither started nor adopted here is an
// orphan, cancelled by the poll that finds it (the next one comes at once,
// even with no attempt to watch). Before it, only the jobs of attempts that
// ended here (a job that reached Slurm after its attempt was found lost)
// are.
func (b *Backend) AdoptedAll() {
	b.mu.Lock()
	b.reaping, b.reapNow = true, true
	b.watchOrphansLocked()
	b.mu.Unlock()
	b.wake()
}

// watchOrphansLocked keeps the poll going for OrphanWatch, attempts or not.
func (b *Backend) watchOrphansLocked() { b.watchTo = b.now().Add(b.cfg.OrphanWatch) }

func (b *Backend) wake() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// Close stops watching; the jobs run on (the next server adopts them).
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	for _, a := range b.attempts {
		if a.timer != nil {
			a.timer.Stop()
		}
	}
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
	b.q.Close()
	return nil
}

// pollLoop asks for the state of every watched attempt each PollInterval
// (and at once after an Adopt), with one squeue.
func (b *Backend) pollLoop() {
	defer b.wg.Done()
	t := time.NewTicker(b.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		case <-b.kick:
		}
		b.poll()
	}
}

// poll runs one squeue and applies what it says to every attempt.
func (b *Backend) poll() {
	b.mu.Lock()
	n, seq, reap := len(b.attempts), b.seq, b.reapNow || b.now().Before(b.watchTo)
	b.reapNow = false
	b.mu.Unlock()
	if n == 0 && !reap {
		return
	}
	b.queries.Add(1)
	began := time.Now()
	out, err := b.run(b.ctx, nil, b.cfg.Squeue, "--me", "--noheader", "--states=all", "--Format="+QueueFormat)
	b.queryNS.Add(int64(time.Since(began)))
	if err != nil {
		if b.ctx.Err() == nil {
			b.log.Warn("slurm: squeue failed; trying again at the next poll", "err", err)
		}
		return
	}
	jobs, bad := ParseQueue(string(out), b.loc)
	b.log.Debug("slurm: poll", "jobs", len(jobs), "bad", len(bad), "watched", n)
	// Lost needs a complete answer: no unreadable line that may be ours.
	complete := true
	for _, l := range bad {
		if strings.Contains(l, b.cfg.JobPrefix+"-a") {
			complete = false
			b.log.Warn("slurm: unreadable squeue line", "line", l)
		}
	}
	byAttempt := map[int64][]*Job{}
	for i := range jobs {
		if id, ok := attemptOf(b.cfg.JobPrefix, jobs[i].Name); ok {
			byAttempt[id] = append(byAttempt[id], &jobs[i])
		}
	}
	now := b.now()
	var cancels, releases []string
	var stops []pendingStop
	var released []*attempt
	b.mu.Lock()
	orphans := b.orphansLocked(byAttempt)
	for id, a := range b.attempts {
		if a.submitting {
			continue
		}
		j := pick(a, byAttempt[id])
		if j == nil {
			if a.seq > seq || !complete {
				continue // registered after the query began
			}
			if a.jobID == "" {
				b.watchOrphansLocked() // its sbatch may still be under way
			}
			b.exitLocked(a, backend.Event{AttemptID: a.id, Kind: backend.Exited, Time: now, Lost: true,
				LastSeen: a.lastSeen, Message: lostMessage(a)})
			continue
		}
		if a.jobID == "" {
			a.jobID = j.ID
		}
		for _, o := range byAttempt[id] {
			if o != j && !o.Ended() {
				orphans = append(orphans, o.ID) // a second job of the attempt
			}
		}
		if held(j) && !a.released && !a.stopping {
			// Submitted held by a server that died before it released it.
			a.released = true
			releases = append(releases, j.ID)
			released = append(released, a)
		}
		if !a.polled {
			a.polled = true
			if a.stopping && !j.Ended() && !j.Requeued() {
				stops = append(stops, pendingStop{a, a.stopGrace}) // a Stop that waited for this poll
			}
		}
		switch {
		case j.Requeued():
			// Slurm took it back and queued it again: Virga places its
			// next attempt itself.
			cancels = append(cancels, j.ID)
			if !a.started && !a.adopted {
				b.startedLocked(a, j, now)
			}
			ev := backend.Event{AttemptID: a.id, Kind: backend.Exited, Time: now, Preempted: !a.stopping,
				Signal: "killed", Message: fmt.Sprintf("slurm job %s was requeued (%s, %d restart(s)); cancelled it", j.ID, j.State, j.Restarts)}
			b.exitLocked(a, ev)
		case j.Running():
			a.lastSeen = now
			if !a.started {
				b.startedLocked(a, j, now)
			}
		case j.Ended():
			if !a.started && !a.adopted && ran(j) {
				b.startedLocked(a, j, now)
			}
			b.exitLocked(a, exitEvent(a, j, now))
		}
	}
	b.mu.Unlock()
	for _, st := range stops {
		b.stopNow(st.a, st.grace)
	}
	for _, id := range cancels {
		b.cancel1(id)
	}
	for i, id := range releases {
		b.release(released[i], id)
	}
	for _, id := range orphans {
		b.log.Info("slurm: cancelling an orphan job (no attempt of this server watches it)", "job", id)
		b.orphans.Add(1)
		b.cancel1(id)
	}
}

// orphansLocked returns the IDs of the jobs in the poll's answer that are
// left over: not ended, of an attempt not watched that ended here, or, once
// AdoptedAll was called, of any attempt not watched.
func (b *Backend) orphansLocked(byAttempt map[int64][]*Job) []string {
	var out []string
	for id, js := range byAttempt {
		if b.attempts[id] != nil || !(b.reaping || b.seen[id]) {
			continue
		}
		for _, j := range js {
			if !j.Ended() {
				out = append(out, j.ID)
			}
		}
	}
	return out
}

// held reports whether a job waits on a user's hold: Virga's own, between
// sbatch and scontrol release.
func held(j *Job) bool { return j.State == "PENDING" && j.Reason == "JobHeldUser" }

type pendingStop struct {
	a     *attempt
	grace time.Duration
}

// pick returns the job of attempt a among those with its name: the one with
// its job ID, else the newest.
func pick(a *attempt, js []*Job) *Job {
	var best *Job
	for _, j := range js {
		if a.jobID != "" && j.ID == a.jobID {
			return j
		}
		if best == nil || jobNumber(j.ID) > jobNumber(best.ID) {
			best = j
		}
	}
	if a.jobID != "" && best != nil {
		return nil // not the job that was submitted for it
	}
	return best
}

func jobNumber(id string) int64 {
	n, _ := strconv.ParseInt(strings.FieldsFunc(id, func(r rune) bool { return r == '_' || r == '+' })[0], 10, 64)
	return n
}

// ran reports whether an ended job's batch script had begun.
func ran(j *Job) bool {
	switch j.State {
	case "CANCELLED", "BOOT_FAIL", "DEADLINE", "REVOKED":
		return false
	}
	return true
}

func lostMessage(a *attempt) string {
	if a.jobID == "" {
		return fmt.Sprintf("no slurm job named %s (it ended longer ago than slurmctld keeps jobs, MinJobAge, or never ran)", a.name)
	}
	return fmt.Sprintf("slurm job %s (%s) is no longer known to slurmctld (it ended longer ago than MinJobAge, or the controller lost it)", a.jobID, a.name)
}

// exitEvent maps an ended job to the attempt's Exited event.
func exitEvent(a *attempt, j *Job, now time.Time) backend.Event {
	ev := backend.Event{AttemptID: a.id, Kind: backend.Exited, Time: eventTime(j.End, now)}
	cancelled := j.State == "CANCELLED"
	switch {
	case a.killed && (j.ExitSignal() != 0 || cancelled):
		ev.Signal = "killed" // Virga's SIGKILL (or the cancellation after it) ended it
	case j.ExitSignal() != 0:
		ev.Signal = signalName(j.ExitSignal())
	case j.State == "CANCELLED" || j.State == "TIMEOUT" || j.State == "PREEMPTED" || j.State == "NODE_FAIL" || j.State == "BOOT_FAIL" || j.State == "DEADLINE" || j.State == "REVOKED":
		// The job was ended by Slurm: the script's status says nothing.
		ev.Signal = "killed"
		if a.stopping && !a.killed {
			ev.Signal = "terminated"
		}
	case backend.StatusSignal(j.ExitCode()) != "":
		// The agent (or the batch shell) ended with 128+N: the trial
		// died of signal N.
		ev.Signal = backend.StatusSignal(j.ExitCode())
	default:
		code := j.ExitCode()
		ev.ExitCode = &code
	}
	switch j.State {
	case "PREEMPTED", "NODE_FAIL", "BOOT_FAIL", "TIMEOUT", "DEADLINE":
		ev.Preempted = true
	}
	if !j.Preempted.IsZero() || strings.Contains(j.Comment, warnComment) {
		ev.Preempted = true
	}
	if a.stopping {
		ev.Preempted = false // Virga's own stop: the control loop knows why
	}
	ev.Message = fmt.Sprintf("slurm job %s %s", j.ID, j.State)
	switch {
	case !j.Preempted.IsZero():
		ev.Message += ", preempted at " + j.Preempted.Format(time.DateTime)
	case strings.Contains(j.Comment, warnComment):
		ev.Message += ", after the warning of its time limit"
	}
	if j.Reason != "" && j.Reason != "None" {
		ev.Message += " (" + j.Reason + ")"
	}
	return ev
}

func eventTime(t, now time.Time) time.Time {
	if t.IsZero() || t.After(now) {
		return now
	}
	return t
}

func (b *Backend) startedLocked(a *attempt, j *Job, now time.Time) {
	a.started = true
	b.q.Push(backend.Event{AttemptID: a.id, Kind: backend.Started, Time: eventTime(j.Start, now), Pool: a.pool.Name,
		Message: "slurm job " + j.ID})
}

func (b *Backend) exitLocked(a *attempt, ev backend.Event) {
	if a.timer != nil {
		a.timer.Stop()
	}
	delete(b.attempts, a.id)
	a.pool.acct.Release(a.res)
	ev.Pool = a.pool.Name
	b.q.Push(ev)
}

// run runs a command with the backend's timeout and returns its stdout.
func (b *Backend) run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.CommandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		b.failures.Add(1)
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 500 {
			msg = msg[:500] + "..."
		}
		if msg != "" {
			return nil, fmt.Errorf("%s: %w: %s", name, err, msg)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return stdout.Bytes(), nil
}

// signalName names a signal as the local backend does ("terminated").
func signalName(n int) string { return syscall.Signal(n).String() }

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

func fmtRes(r virga.Resources) string {
	return fmt.Sprintf("cpu %g, memory %d MB, gpu %d", r.CPU, r.MemoryMB, r.GPU)
}
