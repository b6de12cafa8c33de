package local

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
)

// Pool configures one capacity pool of the local backend: a share of this
// machine handed out under a name, optionally emulating spot capacity that
// is reclaimed and given back on a schedule, so that a user can rehearse on
// one machine how their trainer behaves when preempted.
type Pool struct {
	// Name identifies the pool in StartSpec.Pool and in attempts. Required,
	// unique.
	Name string
	// Capacity is what the pool can hand out (for example 4 slots of a node
	// shape). Pools are not checked against the machine: an emulated pool
	// may offer GPUs the machine lacks.
	Capacity virga.Resources
	// Availability, if set, makes the pool preemptible: while it is down,
	// Start on the pool fails with ErrNoCapacity; when it goes down at T,
	// each attempt running on it gets SIGTERM at T - Warning (at once if that
	// is past when it starts) and its process group SIGKILL at T, and its
	// Exited event says Preempted. Nil means always up (on-demand).
	Availability backend.Availability
	// Warning is how long before a reclaim the attempts are sent SIGTERM
	// (AWS gives 120 s, GCP 30 s). Zero means SIGKILL at the reclaim
	// without a warning.
	Warning time.Duration
}

// PreemptFile is written in an attempt's directory when the backend tells
// the attempt that its pool is being reclaimed: a server adopting the
// attempt later still reports it preempted, and still kills it at the
// reclaim.
const PreemptFile = "preempt"

// PoolFile records, in an attempt's directory, the pool it was started on
// (only for a backend with named pools), so that an adopting server
// reserves its resources in the right pool.
const PoolFile = "pool"

// preemptRecord is the content of PreemptFile.
type preemptRecord struct {
	Pool      string    `json:"pool"`
	ReclaimAt time.Time `json:"reclaim_at"` // the backend's clock (Config.Now)
	KillAtNS  int64     `json:"kill_at_ns"` // wall clock, Unix nanoseconds
}

// capPool is the backend's state of one pool: its bookkeeping (one of
// Backend.acct's), and the emulation of its availability. avail is fixed;
// the rest is guarded by Backend.mu.
type capPool struct {
	*backend.Pool
	avail backend.Availability // nil: always up
	// reclaimAt is the time of the next reclaim once its warning has begun
	// (attempts on the pool are being stopped); zero otherwise.
	reclaimAt time.Time
}

// newPools validates cfg's pools and sets b's; with none, one unnamed pool
// of capacity.
func (b *Backend) newPools(cfg []Pool, capacity virga.Resources) error {
	if len(cfg) == 0 {
		b.acct = backend.NewPools(false, []backend.Pool{{Capacity: capacity}})
		b.pools = []*capPool{{Pool: b.acct.Default()}}
		return nil
	}
	seen := map[string]bool{}
	var accts []backend.Pool
	for i, pc := range cfg {
		switch {
		case pc.Name == "":
			return fmt.Errorf("local backend: pool %d has no name", i+1)
		case seen[pc.Name]:
			return fmt.Errorf("local backend: pool %q is configured twice", pc.Name)
		case pc.Capacity.CPU < 0 || pc.Capacity.MemoryMB < 0 || pc.Capacity.GPU < 0 || pc.Capacity == (virga.Resources{}):
			return fmt.Errorf("local backend: pool %q: capacity %s; give it some cpu, memory or gpu, none negative", pc.Name, fmtRes(pc.Capacity))
		case pc.Warning < 0:
			return fmt.Errorf("local backend: pool %q: negative warning %s", pc.Name, pc.Warning)
		}
		seen[pc.Name] = true
		accts = append(accts, backend.Pool{Name: pc.Name, Capacity: pc.Capacity, Preemptible: pc.Availability != nil, Warning: pc.Warning})
	}
	b.acct, b.named = backend.NewPools(true, accts), true
	for i, acct := range b.acct.All() {
		b.pools = append(b.pools, &capPool{Pool: acct, avail: cfg[i].Availability})
	}
	return nil
}

// poolNamed returns the pool called name ("" is the default, the first).
func (b *Backend) poolNamed(name string) (*capPool, error) {
	acct, err := b.acct.Get(name) // fixed after New: no lock needed
	if err != nil {
		return nil, err
	}
	for _, p := range b.pools {
		if p.Pool == acct {
			return p, nil
		}
	}
	panic("local backend: a pool without its bookkeeping")
}

// Pools returns the status of each configured pool, in configured order, or
// nil if none is configured (one unnamed pool of all the capacity).
func (b *Backend) Pools() []backend.PoolStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.acct.Status()
}

// startEmulation sets each preemptible pool's state at the backend's start
// and runs a goroutine per pool that follows its availability until Close.
func (b *Backend) startEmulation() {
	for _, p := range b.pools {
		if p.avail == nil {
			continue
		}
		b.mu.Lock()
		b.refreshLocked(p)
		b.mu.Unlock()
		b.wg.Add(1)
		go b.emulate(p)
	}
}

// emulate follows one preemptible pool's availability: it announces each
// reclaim at its warning and marks the pool down at the reclaim and up when
// it comes back, until Close.
func (b *Backend) emulate(p *capPool) {
	defer b.wg.Done()
	for {
		b.mu.Lock()
		up, next, reclaimAt := p.Up(), p.Next(), p.reclaimAt
		b.mu.Unlock()
		var wake time.Time
		switch {
		case up && !reclaimAt.IsZero():
			wake = reclaimAt
		case up && !next.IsZero():
			wake = next.Add(-p.Warning)
		case !next.IsZero():
			wake = next
		default:
			return // it never changes again
		}
		if !b.sleepUntil(wake) {
			return
		}
		b.mu.Lock()
		b.refreshLocked(p)
		b.mu.Unlock()
	}
}

// sleepUntil waits until the backend's clock reaches t; false means Close
// came first.
func (b *Backend) sleepUntil(t time.Time) bool {
	for {
		d := t.Sub(b.now())
		if d <= 0 {
			return true
		}
		timer := b.clock.NewTimer(d)
		select {
		case <-b.ctx.Done():
			timer.Stop()
			return false
		case <-timer.C():
		}
	}
}

// refreshLocked sets p's state from its availability at the backend's
// clock: up or down and until when, and, once a reclaim's warning has
// begun, stops every attempt on the pool (SIGTERM now, SIGKILL at the
// reclaim). Attempts still on a pool that is down are killed at once.
// b.mu is held.
func (b *Backend) refreshLocked(p *capPool) {
	now := b.now()
	up, next := p.avail.Up(now)
	if !next.IsZero() && !next.After(now) {
		next = time.Time{} // against the contract: taken as never changing
	}
	p.SetUp(up, next)
	switch {
	case up && !next.IsZero() && !now.Before(next.Add(-p.Warning)):
		p.reclaimAt = next
	case up:
		p.reclaimAt = time.Time{}
	default:
		p.reclaimAt = now // down: nothing may run on it
	}
	if p.reclaimAt.IsZero() {
		return
	}
	for _, a := range b.attempts {
		if a.pool == p {
			b.preemptLocked(a, p.reclaimAt)
		}
	}
}

// joinPoolLocked applies a reclaim under way to an attempt that has just
// been put on p (started or adopted). b.mu is held.
func (b *Backend) joinPoolLocked(a *attempt, p *capPool) {
	if !p.reclaimAt.IsZero() {
		b.preemptLocked(a, p.reclaimAt)
	}
}

// preemptLocked stops a because its pool is reclaimed at reclaimAt (the
// backend's clock): SIGTERM now, SIGKILL at reclaimAt; if the pid is not
// known yet, as soon as it is. It records PreemptFile first. An attempt is
// preempted once. b.mu is held.
func (b *Backend) preemptLocked(a *attempt, reclaimAt time.Time) {
	if a.done || a.preempted {
		return
	}
	a.preempted = true
	a.preemptKillAt = reclaimAt
	if now := b.now(); reclaimAt.Before(now) {
		a.preemptKillAt = now
	}
	rec := preemptRecord{Pool: a.pool.Name, ReclaimAt: reclaimAt, KillAtNS: b.wall(a.preemptKillAt).UnixNano()}
	// Best effort: without it, a server adopting the attempt would not know.
	_ = writeJSONAtomic(filepath.Join(a.dir, PreemptFile), rec, false)
	if a.pid != 0 {
		_ = b.stopLocked(a, a.preemptKillAt) // the group may be gone already
	}
}

// readPreemptRecord reads dir's PreemptFile.
func readPreemptRecord(dir string) (*preemptRecord, error) {
	var r preemptRecord
	if err := readJSON(filepath.Join(dir, PreemptFile), &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// writePoolFile records the attempt's pool in its directory (best effort:
// without it an adopting server reserves the attempt in the default pool).
func writePoolFile(dir, pool string) {
	if err := os.MkdirAll(dir, 0o755); err == nil {
		_ = os.WriteFile(filepath.Join(dir, PoolFile), []byte(pool+"\n"), 0o644)
	}
}

// readPoolFile returns the pool recorded in dir, or "".
func readPoolFile(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, PoolFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

// downError is Start's error for a pool that is down.
func downError(p *capPool) error {
	until := "for good"
	if !p.Next().IsZero() {
		until = "until " + p.Next().Format(time.RFC3339)
	}
	return fmt.Errorf("pool %s is down (its capacity was reclaimed) %s: %w", p.Name, until, ErrNoCapacity)
}
