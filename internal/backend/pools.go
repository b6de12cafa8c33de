package backend

import (
	"fmt"
	"strings"
	"time"

	"github.com/virga-ml/virga"
)

// Pools is the bookkeeping of a backend's capacity pools: what each can
// hand out, what the backend's attempts reserve of it, and whether it is up.
// Every backend keeps its pools in one (a backend without named pools has
// one unnamed pool of all its capacity). It is not safe for concurrent use:
// the backend guards it, and every Pool of it, with its own lock.
type Pools struct {
	named bool
	list  []*Pool
}

// Pool is one pool of a Pools. Name, Capacity, Preemptible and Warning are
// fixed; the rest changes through its methods.
type Pool struct {
	Name        string
	Capacity    virga.Resources
	Preemptible bool
	Warning     time.Duration

	reserved virga.Resources
	up       bool
	next     time.Time
}

// NewPools returns the pools of list, in order (the first is the default),
// each up with nothing reserved. named says that they were configured by
// name (Status then lists them); without, list is one unnamed pool. The
// backend validates its configuration before.
func NewPools(named bool, list []Pool) *Pools {
	ps := &Pools{named: named}
	for _, p := range list {
		p.reserved, p.up, p.next = virga.Resources{}, true, time.Time{}
		ps.list = append(ps.list, &p)
	}
	return ps
}

// Named reports whether the pools were configured by name.
func (ps *Pools) Named() bool { return ps.named }

// All returns the pools in order; the slice is the caller's.
func (ps *Pools) All() []*Pool { return append([]*Pool(nil), ps.list...) }

// Default returns the first pool.
func (ps *Pools) Default() *Pool { return ps.list[0] }

// Get returns the pool called name, the default one for "". The error
// names the pools there are.
func (ps *Pools) Get(name string) (*Pool, error) {
	if name == "" {
		return ps.list[0], nil
	}
	if !ps.named {
		return nil, fmt.Errorf("no pool named %q: this backend has no pools configured", name)
	}
	names := make([]string, 0, len(ps.list))
	for _, p := range ps.list {
		if p.Name == name {
			return p, nil
		}
		names = append(names, p.Name)
	}
	return nil, fmt.Errorf("no pool named %q (the pools: %s)", name, strings.Join(names, ", "))
}

// Capacity returns the sum of the pools' capacities.
func (ps *Pools) Capacity() virga.Resources {
	var c virga.Resources
	for _, p := range ps.list {
		c = c.Add(p.Capacity)
	}
	return c
}

// Free returns what the attempts leave of the pools that are up (negative
// in a dimension where adopted attempts overcommit a pool).
func (ps *Pools) Free() virga.Resources {
	var free virga.Resources
	for _, p := range ps.list {
		if p.up {
			free = free.Add(p.Free())
		}
	}
	return free
}

// Status returns each pool's status, in order, or nil for pools not
// configured by name (the Pooled contract).
func (ps *Pools) Status() []PoolStatus {
	if !ps.named {
		return nil
	}
	out := make([]PoolStatus, len(ps.list))
	for i, p := range ps.list {
		out[i] = PoolStatus{Name: p.Name, Capacity: p.Capacity, Free: p.Free(), Preemptible: p.Preemptible,
			Up: p.up, Next: p.next, Warning: p.Warning}
	}
	return out
}

// Free returns what the attempts leave of the pool's capacity.
func (p *Pool) Free() virga.Resources { return p.Capacity.Sub(p.reserved) }

// Fits reports whether r fits what is free of the pool (whether it is up
// or not).
func (p *Pool) Fits(r virga.Resources) bool { return r.Fits(p.Free()) }

// Reserve counts r as taken by an attempt, even beyond the capacity (an
// adopted attempt runs whether it fits or not).
func (p *Pool) Reserve(r virga.Resources) { p.reserved = p.reserved.Add(r) }

// Release gives back what Reserve took.
func (p *Pool) Release(r virga.Resources) { p.reserved = p.reserved.Sub(r) }

// Up reports whether the pool's capacity can be had now; a pool is up
// unless SetUp said otherwise.
func (p *Pool) Up() bool { return p.up }

// Next is when Up next changes (zero: never), as SetUp last said.
func (p *Pool) Next() time.Time { return p.next }

// SetUp records whether a preemptible pool is up, and when that next
// changes (zero: never).
func (p *Pool) SetUp(up bool, next time.Time) { p.up, p.next = up, next }
