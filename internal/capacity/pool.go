package capacity

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/capacity/trace"
	"github.com/virga-ml/virga/internal/spec"
)

// Pool is a runtime pool of identical nodes, built from a capacity file's
// pool by Load (or by hand, for simulations and tests). It is immutable
// once built and safe for concurrent use.
type Pool struct {
	Name    string
	Backend spec.PoolBackend
	// Node is what one node offers; GPUType names its GPUs ("" when unknown).
	Node    virga.Resources
	GPUType string
	// MinNodes and MaxNodes bound the nodes the pool may hold.
	MinNodes, MaxNodes int
	Market             spec.Market
	Billing            Billing
	// Warning is the notice given before a reclaim (SIGTERM then; SIGKILL
	// at the reclaim); 0 for on-demand pools.
	Warning time.Duration
	// RestartOverhead is the time to get a node and start a trial on it.
	RestartOverhead time.Duration
	// PriceSeries is the price in USD per node-hour: a step function whose
	// first step is at the zero time, so that it has a price at every time
	// (the first price of a trace holds before the trace). Use Price, or
	// Cost for a run's dollars.
	PriceSeries *trace.Series
	// OnDemandSeries is the on-demand price of the same node: a spot pool's
	// on_demand_price, or the on-demand prices of its GCP price trace; nil
	// when unknown. An on-demand pool's is its PriceSeries.
	OnDemandSeries *trace.Series
	// Preemption is when the capacity is available; nil means never
	// reclaimed.
	Preemption *Preemption
	// Slurm and Kubernetes say where a pool of those backends runs its
	// attempts (partition; node selectors and tolerations).
	Slurm      *spec.SlurmPool
	Kubernetes *spec.KubernetesPool
}

// Spot reports whether the pool buys spot capacity.
func (p *Pool) Spot() bool { return p.Market == spec.Spot }

// Price is the price in USD per node-hour at t; 0 without a price series.
func (p *Pool) Price(t time.Time) float64 { return priceAt(p.PriceSeries, t) }

// OnDemandPrice is the on-demand price in USD per node-hour of the pool's
// node at t; 0 when unknown.
func (p *Pool) OnDemandPrice(t time.Time) float64 { return priceAt(p.OnDemandSeries, t) }

// priceAt is s's price at t, the first price before the first step and 0
// for a nil series. It allocates nothing.
func priceAt(s *trace.Series, t time.Time) float64 {
	if s == nil || len(s.Steps) == 0 {
		return 0
	}
	if len(s.Steps) == 1 {
		return s.Steps[0].USDPerHour
	}
	i, _ := slices.BinarySearchFunc(s.Steps, t, func(st trace.Price, t time.Time) int {
		if st.Time.After(t) {
			return 1
		}
		return -1
	})
	if i == 0 {
		return s.Steps[0].USDPerHour
	}
	return s.Steps[i-1].USDPerHour
}

// Cost returns the dollars of a run of share of a node (0 < share <= 1) from
// start for run, as the pool bills it, at the prices in force over the
// billed time.
func (p *Pool) Cost(start time.Time, run time.Duration, share float64) (float64, error) {
	if p.PriceSeries == nil {
		return 0, fmt.Errorf("pool %s: %w", p.Name, ErrNoPrice)
	}
	return Cost(p.PriceSeries, start, run, share, p.Billing)
}

// Timeline returns the pool's availability from start on (see
// Preemption.Timeline). All nodes of a pool share one availability trace;
// a backend that wants independent nodes under a rate model asks for one
// Timeline per node.
func (p *Pool) Timeline(start time.Time, rng *rand.Rand) *Timeline {
	return p.Preemption.Timeline(start, rng)
}

// Stats returns the preemption model's summary statistics.
func (p *Pool) Stats() Stats { return p.Preemption.Stats() }

// Set is the pools of one capacity file, in file order.
type Set struct {
	Pools []*Pool
}

// Pool returns the pool named name, or nil.
func (s *Set) Pool(name string) *Pool {
	for _, p := range s.Pools {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Pricer returns a pricer of runs on the set's pools, by name.
func (s *Set) Pricer() *Pricer {
	pr := &Pricer{Pools: make(map[string]PricedPool, len(s.Pools))}
	for _, p := range s.Pools {
		pr.Pools[p.Name] = PricedPool{Price: p.PriceSeries, Node: p.Node, Billing: p.Billing}
	}
	return pr
}

// LoadFile reads the capacity file at path and builds its pools, reading
// trace files relative to the file's directory.
func LoadFile(path string) (*Set, error) {
	c, _, err := spec.LoadCapacity(path)
	if err != nil {
		return nil, err
	}
	return Load(c, filepath.Dir(path))
}

// Load builds the runtime pools of a parsed capacity file, reading the
// trace files it names (relative paths are relative to dir, the capacity
// file's directory; each file is read once). On failure the error is a
// *spec.Error listing every pool whose traces could not be used, at the
// capacity file's line of the trace, naming the trace file.
func Load(c *spec.Capacity, dir string) (*Set, error) {
	l := &loader{c: c, dir: dir, avail: map[string]*trace.Availability{}, prices: map[string]trace.Prices{},
		failed: map[string]bool{}}
	s := &Set{}
	for i := range c.Pools {
		if p := l.pool(&c.Pools[i]); p != nil {
			s.Pools = append(s.Pools, p)
		}
	}
	if len(l.probs) > 0 {
		return nil, &spec.Error{Problems: l.probs}
	}
	return s, nil
}

// loader reads each trace file once and collects problems.
type loader struct {
	c      *spec.Capacity
	dir    string
	avail  map[string]*trace.Availability
	prices map[string]trace.Prices // by path and format
	failed map[string]bool         // files already reported unreadable
	probs  []spec.Problem
}

func (l *loader) problem(pos spec.Pos, path, format string, args ...any) {
	l.probs = append(l.probs, spec.Problem{File: l.c.File, Line: pos.Line, Col: pos.Col, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// resolve returns a trace path relative to the capacity file's directory.
func (l *loader) resolve(path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(l.dir, path)
}

// pool builds one pool; nil after reporting a problem.
func (l *loader) pool(sp *spec.Pool) *Pool {
	if sp.FromCluster() {
		l.problem(sp.Pos, sp.Path("slurm"), "leaves out what only its Slurm partition tells (node, nodes, market, warning), and the cluster was not read; read it where scontrol works (virga server, virga sim and virga estimate do), or give them")
		return nil
	}
	p := &Pool{
		Name:            sp.Name,
		Backend:         sp.Backend,
		Node:            virga.Resources{CPU: sp.Node.CPU, MemoryMB: sp.Node.MemoryMB, GPU: sp.Node.GPU},
		GPUType:         sp.Node.GPUType,
		MinNodes:        sp.Nodes.Min,
		MaxNodes:        sp.Nodes.Max,
		Market:          sp.Market,
		Billing:         Billing{Increment: sp.Billing.Increment.D(), Minimum: sp.Billing.Minimum.D()},
		Warning:         sp.Warning.D(),
		RestartOverhead: sp.RestartOverhead.D(),
		Slurm:           sp.Slurm,
		Kubernetes:      sp.Kubernetes,
	}
	ok := true
	var spotSteps []trace.Price // the spot price trace, for a bid
	if pt := sp.Price.Trace; pt != nil {
		series, onDemand := l.priceTrace(sp, pt)
		if series == nil {
			ok = false
		} else {
			spotSteps = series.Steps
			p.PriceSeries = fromZero(series)
			if onDemand != nil && len(finiteSteps(onDemand.Steps)) > 0 {
				p.OnDemandSeries = fromZero(onDemand)
			}
		}
	} else {
		p.PriceSeries = Constant(sp.Price.USDPerHour)
	}
	switch {
	case sp.Market == spec.OnDemand:
		p.OnDemandSeries = p.PriceSeries
	case sp.OnDemandPrice > 0:
		p.OnDemandSeries = Constant(sp.OnDemandPrice)
	}

	pr := sp.Preemption
	var err error
	switch pr.Kind {
	case spec.PreemptTrace:
		a := l.availability(sp, pr)
		if a == nil {
			return nil
		}
		p.Preemption, err = ReplayTrace(a, pr.Speed, pr.Offset.D(), pr.RandomOffset)
		if err != nil {
			l.problem(pr.TracePos, sp.Path("preemption"), "cannot replay %s: %v", pr.Trace, err)
			return nil
		}
	case spec.PreemptRate:
		if p.Preemption, err = RateModel(pr.RatePerHour, pr.Outage.D()); err != nil {
			l.problem(sp.Pos, sp.Path("preemption"), "%v", err)
			return nil
		}
	case spec.PreemptBid:
		if !ok {
			return nil
		}
		if p.Preemption, err = BidModel(&trace.Series{Steps: spotSteps}, pr.Bid); err != nil {
			l.problem(sp.Price.Trace.Pos, sp.Path("preemption.bid"), "%v", err)
			return nil
		}
	default:
		p.Preemption = Never()
	}
	if !ok {
		return nil
	}
	return p
}

// fromZero returns s without NaN steps and with its first step moved to the
// zero time.
func fromZero(s *trace.Series) *trace.Series {
	steps := finiteSteps(s.Steps)
	if len(steps) > 0 {
		steps[0].Time = time.Time{}
	}
	return &trace.Series{Key: s.Key, Steps: steps}
}

// availability reads a pool's availability trace.
func (l *loader) availability(sp *spec.Pool, pr spec.Preemption) *trace.Availability {
	path := l.resolve(pr.Trace)
	if a, ok := l.avail[path]; ok {
		return a
	}
	if l.failed[path] {
		l.problem(pr.TracePos, sp.Path("preemption.trace"), "cannot read the availability trace %s (see above)", pr.Trace)
		return nil
	}
	a, err := trace.ReadAvailability(path)
	if err != nil {
		l.failed[path] = true
		l.problem(pr.TracePos, sp.Path("preemption.trace"), "cannot read the availability trace: %v", err)
		return nil
	}
	if len(a.Count) == 0 {
		l.failed[path] = true
		l.problem(pr.TracePos, sp.Path("preemption.trace"), "the availability trace %s has no ticks", path)
		return nil
	}
	l.avail[path] = a
	return a
}

// priceTrace reads a pool's price series and, for the GCP format, the
// on-demand series of the same machine (nil when absent).
func (l *loader) priceTrace(sp *spec.Pool, pt *spec.PriceTrace) (series, onDemand *trace.Series) {
	path := l.resolve(pt.Path)
	field := sp.Path("price.trace")
	cacheKey := path + "\x00" + string(pt.Format)
	prices, ok := l.prices[cacheKey]
	if !ok {
		if l.failed[cacheKey] {
			l.problem(pt.Pos, field, "cannot read the price trace %s (see above)", pt.Path)
			return nil, nil
		}
		var err error
		prices, err = readPrices(path, pt.Format)
		if err != nil {
			l.failed[cacheKey] = true
			l.problem(pt.Pos, field, "cannot read the price trace: %v", err)
			return nil, nil
		}
		l.prices[cacheKey] = prices
	}
	market := trace.Spot
	if sp.Market == spec.OnDemand {
		market = trace.OnDemand
	}
	provider := "aws"
	if pt.Format == spec.PriceGCP {
		provider = "gcp"
	}
	key := trace.Key{Provider: provider, InstanceType: pt.InstanceType, Zone: pt.Zone, Product: pt.Product, Market: market}
	s := prices[key]
	if s == nil {
		l.problem(pt.Pos, field, "%s", missingSeries(path, prices, key))
		return nil, nil
	}
	if len(finiteSteps(s.Steps)) == 0 {
		l.problem(pt.Pos, field, "%s has no price for %s in %s (every value is empty)", path, pt.InstanceType, pt.Zone)
		return nil, nil
	}
	if provider == "gcp" && market == trace.Spot {
		key.Market = trace.OnDemand
		onDemand = prices[key]
	}
	return s, onDemand
}

// readPrices reads a price trace file in format.
func readPrices(path string, format spec.PriceFormat) (trace.Prices, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	switch format {
	case spec.PriceGCP:
		return trace.ParseGCPPrices(path, f)
	case spec.PriceAWSJSON:
		return trace.ParseAWSPrices(path, f)
	case spec.PriceAWSTSV:
		if strings.HasSuffix(path, ".zst") {
			return nil, errors.New("compressed files are not read; decompress it first (zstd -d)")
		}
		return trace.ParseAWSPricesTSV(path, f)
	}
	return nil, fmt.Errorf("unknown price format %q", format)
}

// missingSeries explains that prices has no series for key, naming what it
// does have that is closest.
func missingSeries(path string, prices trace.Prices, key trace.Key) string {
	var zones, types, products []string
	seenType := map[string]bool{}
	for _, k := range prices.Keys() {
		if k.Market != key.Market {
			continue
		}
		if k.InstanceType == key.InstanceType {
			if k.Zone == key.Zone {
				products = append(products, k.Product)
			} else if !slices.Contains(zones, k.Zone) {
				zones = append(zones, k.Zone)
			}
		} else if !seenType[k.InstanceType] {
			seenType[k.InstanceType] = true
			types = append(types, k.InstanceType)
		}
	}
	market := "spot"
	if key.Market == trace.OnDemand {
		market = "on-demand"
	}
	what := fmt.Sprintf("%s has no %s prices for %s in %s", path, market, key.InstanceType, key.Zone)
	switch {
	case len(products) > 0:
		return fmt.Sprintf("%s for product %q (it has %s); set product:", what, key.Product, list(products))
	case len(zones) > 0:
		return fmt.Sprintf("%s (it has %s in %s)", what, key.InstanceType, list(zones))
	case len(types) > 0:
		// Name the types that share the longest prefix with the one asked for.
		sort.SliceStable(types, func(i, j int) bool {
			return commonPrefix(types[i], key.InstanceType) > commonPrefix(types[j], key.InstanceType)
		})
		return fmt.Sprintf("%s (it has no %s at all; it has %s)", what, key.InstanceType, list(types))
	}
	return fmt.Sprintf("%s (it has no %s prices at all)", what, market)
}

// list formats names for messages, at most 8 of them.
func list(names []string) string {
	const most = 8
	if len(names) > most {
		return strings.Join(names[:most], ", ") + fmt.Sprintf(" and %d more", len(names)-most)
	}
	return strings.Join(names, ", ")
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
