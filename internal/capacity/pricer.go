package capacity

import (
	"errors"
	"fmt"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/capacity/trace"
)

// ErrUnknownPool means a pool has no price: the pricer was not told of it.
var ErrUnknownPool = errors.New("unknown pool")

// PricedPool is what pricing a run on one pool takes: the price of one of
// its nodes over time, the node's resources (a run pays for its share of the
// node) and how the provider bills.
type PricedPool struct {
	// Price is the node's price in USD per hour over time; Constant makes a
	// fixed one, a trace.Series read from a price history replays it.
	Price   *trace.Series
	Node    virga.Resources
	Billing Billing
}

// Pricer prices runs on named pools. The zero value knows no pool. It is
// safe for concurrent use as long as Pools is not changed.
type Pricer struct {
	// Pools by name; the name "" prices the attempts a backend runs without
	// naming a pool.
	Pools map[string]PricedPool
}

// Constant returns the price step function of a fixed price in USD per
// hour, in force at every time.
func Constant(usdPerHour float64) *trace.Series {
	return &trace.Series{Steps: []trace.Price{{USDPerHour: usdPerHour}}}
}

// Share returns the fraction of a node that res takes: the largest of its
// CPU, memory and GPU fractions (a run that takes all of a node's GPUs keeps
// the node from others, however few of its cores it uses). A dimension the
// node does not state (0, as memory may be) is not counted. It is 0 for a
// run that takes nothing, and an error for one that does not fit on the
// node.
func Share(res, node virga.Resources) (float64, error) {
	share := 0.0
	for _, d := range []struct {
		name      string
		need, has float64
	}{
		{"cpu", res.CPU, node.CPU},
		{"memory", float64(res.MemoryMB), float64(node.MemoryMB)},
		{"gpu", float64(res.GPU), float64(node.GPU)},
	} {
		switch {
		case d.need <= 0 || d.has <= 0:
		case d.need > d.has+1e-9:
			return 0, fmt.Errorf("%s %g is more than a node has (%g)", d.name, d.need, d.has)
		default:
			share = max(share, min(d.need/d.has, 1))
		}
	}
	return share, nil
}

// Cost returns the dollars billed for running res on pool from start to
// end: the pool's billing applied to the run (its increments and minimum),
// at the node's prices in force over the billed time, times res's share of
// the node. A run with end not after start costs nothing. Errors wrap
// ErrUnknownPool for a pool the pricer does not know and ErrNoPrice for
// billed time without a price.
func (p *Pricer) Cost(pool string, res virga.Resources, start, end time.Time) (float64, error) {
	pp, ok := p.Pools[pool]
	if !ok {
		if pool == "" {
			return 0, fmt.Errorf("the backend's default pool: %w", ErrUnknownPool)
		}
		return 0, fmt.Errorf("pool %q: %w", pool, ErrUnknownPool)
	}
	if pp.Price == nil {
		return 0, fmt.Errorf("pool %q: %w (no price series)", pool, ErrNoPrice)
	}
	run := end.Sub(start)
	if run <= 0 {
		return 0, nil
	}
	share, err := Share(res, pp.Node)
	if err != nil {
		return 0, fmt.Errorf("pool %q: %w", pool, err)
	}
	if share == 0 {
		return 0, nil
	}
	c, err := Cost(pp.Price, start, run, share, pp.Billing)
	if err != nil {
		return 0, fmt.Errorf("pool %q: %w", pool, err)
	}
	return c, nil
}
