package spec

// The capacity file declares the pools of nodes Virga may run trials on: what
// a node holds, how many there may be, what they cost and how they are
// reclaimed. docs/capacity.md documents it for users:
//
//	pools:
//	  - name: p3-spot               # required, unique; like experiment names
//	    backend: local              # local | slurm | kubernetes | sim; default local
//	    node: {cpu: 8, memory: 61GiB, gpu: 1, gpu_type: V100}   # cpu required (slurm: read)
//	    nodes: 4                    # or {min: 0, max: 16}; default 1 (slurm: read)
//	    market: spot                # on-demand | spot; default on-demand (slurm: read)
//	    price: 0.918                # required (slurm: default 0): USD per node-hour, or a price trace:
//	                                #   {trace: prices.csv, format: gcp|aws-json|aws-tsv,
//	                                #    instance_type: ..., zone: ..., product: Linux/UNIX}
//	    on_demand_price: 3.06       # spot pools only: the on-demand price of the same node
//	    preemption: none            # spot pools of local and sim, required: none, {trace: avail.json,
//	                                #   speed: 60, offset: 2h | random}, {rate: 0.5/h, outage: 10m}, {bid: 1.2};
//	                                #   slurm and kubernetes: optional, a model for estimates (never none)
//	    billing: per-second         # per-second (1 min minimum) | per-hour |
//	                                #   {increment: 1s, minimum: 60s}; default per-second
//	                                #   (slurm: {increment: 1s, minimum: 0s})
//	    warning: 120s               # spot pools: notice before a reclaim; default 120s (slurm: read)
//	    restart_overhead: 3m        # getting a node and starting a trial on it; default 0s
//	    slurm: {partition: spot, qos: low, account: ml}   # backend slurm; partition defaults to the name
//	    kubernetes: {node_selector: {pool: gpu}, tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}],
//	                 provider: karpenter | gke | eks}      # backend kubernetes; provider: its spot labels
//
// Trace paths are kept as written; they are relative to the capacity file's
// directory, and internal/capacity reads them.
//
// A pool of backend slurm may leave out what its partition tells: the node's
// shape, the nodes, the market and the warning. The parser leaves them at
// their zero values and records in Pool.Given which fields the file gives;
// internal/backend/slurm (Resolve) reads the rest from the cluster and checks
// what the file gives against it, before the pools are used.

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Capacity is a parsed, validated capacity file with defaults applied.
type Capacity struct {
	// File is the name the file was parsed under, for messages about it
	// (internal/capacity names it when a trace fails to load).
	File  string `json:"-"`
	Pools []Pool `json:"pools"`
}

// Pool returns the pool named name, or nil.
func (c *Capacity) Pool(name string) *Pool {
	for i := range c.Pools {
		if c.Pools[i].Name == name {
			return &c.Pools[i]
		}
	}
	return nil
}

// Pos is a position in a file: 1-based line and column.
type Pos struct {
	Line int `json:"line"`
	Col  int `json:"col"`
}

// PoolBackend is the backend that runs a pool's trials.
type PoolBackend string

// Pool backends.
const (
	BackendLocal      PoolBackend = "local"
	BackendSlurm      PoolBackend = "slurm"
	BackendKubernetes PoolBackend = "kubernetes"
	BackendSim        PoolBackend = "sim"
)

// Market is how a pool's nodes are bought.
type Market string

// Markets.
const (
	OnDemand Market = "on-demand"
	Spot     Market = "spot"
)

// PriceFormat is the format of a price trace file.
type PriceFormat string

// Price trace formats: the GCP change-log CSV (spot and on-demand prices per
// machine type and region), the JSON output of `aws ec2
// describe-spot-price-history`, and the TSV of the same columns without a
// header (uncompressed).
const (
	PriceGCP     PriceFormat = "gcp"
	PriceAWSJSON PriceFormat = "aws-json"
	PriceAWSTSV  PriceFormat = "aws-tsv"
)

// PreemptionKind is the model of how a pool's nodes are reclaimed.
type PreemptionKind string

// Preemption models.
const (
	// PreemptNone: never reclaimed.
	PreemptNone PreemptionKind = "none"
	// PreemptTrace replays an availability trace.
	PreemptTrace PreemptionKind = "trace"
	// PreemptRate reclaims after exponential up times of mean 1/rate, for
	// exponential outages of mean Outage.
	PreemptRate PreemptionKind = "rate"
	// PreemptBid is down while the spot price is above the bid.
	PreemptBid PreemptionKind = "bid"
)

// Defaults applied when a pool leaves a field out.
const (
	// DefaultSpotWarning is a spot pool's warning before a reclaim (AWS's two minutes).
	DefaultSpotWarning = Duration(120 * time.Second)
	// DefaultAWSProduct is the product description an AWS price trace is read for.
	DefaultAWSProduct = "Linux/UNIX"
	// maxPoolNodes bounds nodes and max.
	maxPoolNodes = 1_000_000
	// maxSpeed bounds a trace replay's speed-up.
	maxSpeed = 1e6
)

// Pool is one pool of identical nodes.
type Pool struct {
	Name    string      `json:"name"`
	Backend PoolBackend `json:"backend"` // default local
	Node    NodeShape   `json:"node"`
	Nodes   NodeCount   `json:"nodes"` // default 1
	Market  Market      `json:"market"`
	Price   Price       `json:"price"`
	// OnDemandPrice is a spot pool's on-demand price of the same node in USD
	// per node-hour; 0 when the file gives none.
	OnDemandPrice float64    `json:"on_demand_price,omitempty"`
	Preemption    Preemption `json:"preemption"`
	Billing       Billing    `json:"billing"`
	// Warning is the notice given before a reclaim; 0 for on-demand pools.
	Warning Duration `json:"warning"`
	// RestartOverhead is the time to get a node and start a trial on it.
	RestartOverhead Duration `json:"restart_overhead"`
	// Slurm is where a pool of backend slurm submits (nil otherwise).
	Slurm *SlurmPool `json:"slurm,omitempty"`
	// Kubernetes is where a pool of backend kubernetes places pods (nil
	// otherwise).
	Kubernetes *KubernetesPool `json:"kubernetes,omitempty"`
	// Pos is where the pool's entry starts in the file.
	Pos Pos `json:"-"`
	// Given holds the position of each field the file gives, by its path
	// in the pool: "node", "node.cpu", "node.memory", "node.gpu",
	// "node.gpu_type", "nodes", "market", "price", "on_demand_price",
	// "preemption", "billing", "warning". A pool of backend slurm reads the
	// others from its partition, and checks these against it.
	Given map[string]Pos `json:"-"`
	// Resolved is set once the pool's partition filled in what the file
	// leaves out (internal/backend/slurm.Resolve).
	Resolved bool `json:"-"`
}

// Gave returns the position of a field the file gives and true, or false
// when the file leaves it out.
func (p *Pool) Gave(field string) (Pos, bool) {
	pos, ok := p.Given[field]
	return pos, ok
}

// FromCluster reports whether a pool of backend slurm leaves out something
// that only its partition tells (the node's CPUs, the nodes, the market, a
// spot pool's warning): such a pool must be resolved against the cluster
// (internal/backend/slurm.Resolve) before it is used.
func (p *Pool) FromCluster() bool {
	if p.Backend != BackendSlurm || p.Resolved {
		return false
	}
	for _, f := range []string{"node.cpu", "nodes", "market"} {
		if _, ok := p.Given[f]; !ok {
			return true
		}
	}
	_, warned := p.Given["warning"]
	return p.Market == Spot && !warned
}

// SlurmPool is the Slurm partition (and optionally QoS and account) a pool's
// attempts are submitted to.
type SlurmPool struct {
	Partition string `json:"partition"` // default: the pool's name
	QoS       string `json:"qos,omitempty"`
	Account   string `json:"account,omitempty"`
	// MaxTime is the partition's MaxTime as read from the cluster (never
	// from the file); 0 for none or not read.
	MaxTime Duration `json:"max_time,omitempty"`
}

// KubernetesPool is how a pool's pods are put on its nodes.
type KubernetesPool struct {
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	Tolerations  []Toleration      `json:"tolerations,omitempty"`
	// Provider names the cloud whose spot-node labels a spot pool selects
	// (karpenter, gke, eks); empty: the node selector says it all.
	Provider string `json:"provider,omitempty"`
}

// Toleration is a Kubernetes toleration of a node taint.
type Toleration struct {
	Key      string `json:"key,omitempty"`
	Operator string `json:"operator,omitempty"` // Equal (default) or Exists
	Value    string `json:"value,omitempty"`
	Effect   string `json:"effect,omitempty"` // NoSchedule, PreferNoSchedule, NoExecute; empty: all
}

// Path returns the field path of one of the pool's fields as messages show
// it, e.g. "pools[p3-spot].price.trace".
func (p *Pool) Path(field string) string {
	return join("pools["+p.Name+"]", field)
}

// NodeShape is what one node of a pool holds.
type NodeShape struct {
	CPU      float64 `json:"cpu"`
	MemoryMB int64   `json:"memory_mb"` // 0 when not given (unaccounted)
	GPU      int     `json:"gpu"`
	GPUType  string  `json:"gpu_type,omitempty"`
}

// NodeCount bounds the nodes of a pool: `nodes: 4` is Min = Max = 4.
type NodeCount struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// Price is a pool's price in USD per node-hour: a constant, or a trace.
type Price struct {
	USDPerHour float64     `json:"usd_per_hour,omitempty"` // when Trace is nil
	Trace      *PriceTrace `json:"trace,omitempty"`
}

// PriceTrace selects one series of a price trace file.
type PriceTrace struct {
	Path         string      `json:"path"` // as written; relative to the capacity file's directory
	Format       PriceFormat `json:"format"`
	InstanceType string      `json:"instance_type"`
	Zone         string      `json:"zone"`              // a GCP region, or an AWS zone name or id
	Product      string      `json:"product,omitempty"` // AWS only; default Linux/UNIX
	Pos          Pos         `json:"-"`                 // of the path
}

// Preemption is a pool's preemption model.
type Preemption struct {
	Kind PreemptionKind `json:"kind"`
	// Trace is the availability trace's path (kind trace), as written.
	Trace    string `json:"trace,omitempty"`
	TracePos Pos    `json:"-"`
	// Speed is the replay's speed-up: one trace tick lasts tick/Speed of
	// wall time. Default 1.
	Speed float64 `json:"speed,omitempty"`
	// Offset is where in the trace replay starts, in trace time.
	Offset Duration `json:"offset,omitempty"`
	// RandomOffset starts each replay at a random point of the trace.
	RandomOffset bool `json:"random_offset,omitempty"`
	// RatePerHour is the reclaim rate of a running node (kind rate).
	RatePerHour float64 `json:"rate_per_hour,omitempty"`
	// Outage is the mean time the capacity stays gone (kind rate).
	Outage Duration `json:"outage,omitempty"`
	// Bid is the most USD per node-hour paid (kind bid).
	Bid float64 `json:"bid,omitempty"`
}

// Billing is how a pool's run time is billed: rounded up to a multiple of
// Increment, at least Minimum per run.
type Billing struct {
	Increment Duration `json:"increment"`
	Minimum   Duration `json:"minimum"`
}

// Billing models by name, and the default of Slurm pools: Slurm accounts a
// job's time by the second, with no minimum (a site that charges otherwise
// says so with billing:).
var (
	BillingPerSecond = Billing{Increment: Duration(time.Second), Minimum: Duration(time.Minute)}
	BillingPerHour   = Billing{Increment: Duration(time.Hour), Minimum: Duration(time.Hour)}
	BillingSlurm     = Billing{Increment: Duration(time.Second)}
)

// Field names and choices of the capacity file, in the order the
// documentation lists them.
var (
	capacityFields   = []string{"pools"}
	poolFields       = []string{"name", "backend", "node", "nodes", "market", "price", "on_demand_price", "preemption", "billing", "warning", "restart_overhead", "slurm", "kubernetes"}
	slurmFields      = []string{"partition", "qos", "account"}
	kubeFields       = []string{"node_selector", "tolerations", "provider"}
	tolerationFields = []string{"key", "operator", "value", "effect"}
	kubeProviders    = []string{"karpenter", "gke", "eks"}
	tolerationOps    = []string{"Equal", "Exists"}
	taintEffects     = []string{"NoSchedule", "PreferNoSchedule", "NoExecute"}
	nodeFields       = []string{"cpu", "memory", "gpu", "gpu_type"}
	nodeCountFields  = []string{"min", "max"}
	priceTraceFields = []string{"trace", "format", "instance_type", "zone", "product"}
	preemptionFields = []string{"trace", "speed", "offset", "rate", "outage", "bid"}
	billingFields    = []string{"increment", "minimum"}
	poolBackends     = []string{string(BackendLocal), string(BackendSlurm), string(BackendKubernetes), string(BackendSim)}
	markets          = []string{string(OnDemand), string(Spot)}
	priceFormats     = []string{string(PriceGCP), string(PriceAWSJSON), string(PriceAWSTSV)}
	billingNames     = []string{"per-second", "per-hour"}
	// preemptionModelFields maps each model's key to the other keys it takes.
	preemptionModelFields = map[string][]string{"trace": {"speed", "offset"}, "rate": {"outage"}, "bid": {}}
)

// LoadCapacity reads and parses the capacity file at path. It returns the
// file's bytes as well (also when parsing fails). Files over MaxFileSize are
// rejected without reading them whole.
func LoadCapacity(path string) (*Capacity, []byte, error) {
	data, err := readFile("capacity", path)
	if err != nil {
		return nil, nil, err
	}
	c, err := ParseCapacity(path, data)
	return c, data, err
}

// ParseCapacity parses and validates a capacity file and applies defaults.
// name names the file in messages. On failure the error is an *Error listing
// every problem found, sorted by position. It reads no trace file (see
// internal/capacity) and never panics, whatever data holds.
func ParseCapacity(name string, data []byte) (c *Capacity, err error) {
	p := &parser{file: name}
	defer func() {
		// The YAML library is not ours; a panic in it must not take the server down.
		if r := recover(); r != nil {
			c = nil
			p.probs = nil
			p.at(nil, "", "cannot parse YAML: internal parser error (%v)", r)
			err = p.err()
		}
	}()
	if len(data) > MaxFileSize {
		p.at(nil, "", "file is over %d bytes (1 MiB); a capacity file must be smaller", MaxFileSize)
		return nil, p.err()
	}
	root := p.capacityDocument(data)
	if root == nil {
		return nil, p.err()
	}
	c = p.capacity(root)
	if err := p.err(); err != nil {
		return nil, err
	}
	c.File = name
	return c, nil
}

// capacityDocument decodes data into one YAML mapping node, like document
// does for experiment files.
func (p *parser) capacityDocument(data []byte) *yaml.Node {
	return p.root(data, "a capacity file", "file is empty; a capacity file lists pools, e.g. pools: [{name: local, node: {cpu: 4}, price: 0}]", "a mapping with pools: [...]")
}

// capacity reads the root mapping.
func (p *parser) capacity(root *yaml.Node) *Capacity {
	c := &Capacity{Pools: []Pool{}}
	f, _ := p.mapping(root, "", "a mapping", capacityFields)
	n := f.get("pools")
	if n == nil {
		p.missing(f, "pools", "required; a list of pools, e.g. pools: [{name: local, node: {cpu: 4}, price: 0}]")
		return c
	}
	if n.Kind != yaml.SequenceNode {
		hint := ""
		if n.Kind == yaml.MappingNode {
			hint = "; write each pool as a list item with its name: - name: p3-spot"
		}
		p.at(n, "pools", "expected a list of pools, got %s%s", describe(n), hint)
		return c
	}
	if len(n.Content) == 0 {
		p.at(n, "pools", "must list at least one pool, e.g. - {name: local, node: {cpu: 4}, price: 0}")
		return c
	}
	seen := map[string]*yaml.Node{}
	for i, pn := range n.Content {
		c.Pools = append(c.Pools, p.pool(pn, i, seen))
	}
	return c
}

// poolName finds a pool's name before its fields are read, so that every
// message about the pool can name it; "" when it has no valid name.
func poolName(n *yaml.Node) (string, *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		return "", nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k, v := n.Content[i], n.Content[i+1]; k.Kind == yaml.ScalarNode && k.Value == "name" {
			if isScalar(v) && namePattern.MatchString(v.Value) {
				return v.Value, v
			}
			return "", v
		}
	}
	return "", nil
}

// pool reads pools[i]. seen maps the names read so far to their nodes.
func (p *parser) pool(n *yaml.Node, i int, seen map[string]*yaml.Node) Pool {
	name, nameNode := poolName(n)
	path := fmt.Sprintf("pools[%d]", i)
	if name != "" {
		if first, dup := seen[name]; dup {
			p.at(nameNode, join(path, "name"), "duplicate pool name %s (first at line %d); each pool needs a name of its own", name, first.Line)
		} else {
			seen[name] = nameNode
			path = "pools[" + name + "]"
		}
	}
	pool := Pool{
		Name:    name,
		Backend: BackendLocal,
		Nodes:   NodeCount{Min: 1, Max: 1},
		Market:  OnDemand,
		Billing: BillingPerSecond,
		Pos:     Pos{Line: n.Line, Col: n.Column},
		Given:   map[string]Pos{},
	}
	f, ok := p.mapping(n, path, "a pool like {name: p3-spot, node: {cpu: 8}, market: spot, price: 0.918, ...}", poolFields)
	if !ok {
		return pool
	}
	at := func(field string) string { return join(path, field) }
	for _, fl := range f.list {
		pool.Given[fl.name] = Pos{Line: fl.val.Line, Col: fl.val.Column}
	}

	if nn := f.get("name"); nn == nil {
		p.missing(f, at("name"), "required; a name like p3-spot (letters, digits, '.', '_', '-'; at most 64)")
	} else if s, ok := p.str(nn, at("name")); ok && !namePattern.MatchString(s) {
		p.at(nn, at("name"), "%q is not a valid name; use letters, digits, '.', '_' and '-', starting with a letter or digit, at most 64 characters", clip(s))
	}
	if nn := f.get("backend"); nn != nil {
		if s, ok := p.choice(nn, at("backend"), "backend", poolBackends); ok {
			pool.Backend = PoolBackend(s)
		}
	}
	// A Slurm pool reads what it leaves out from its partition; real
	// capacity (Slurm, Kubernetes) is reclaimed by its provider.
	slurm := pool.Backend == BackendSlurm
	provider := slurm || pool.Backend == BackendKubernetes
	if slurm {
		pool.Nodes = NodeCount{}
		pool.Billing = BillingSlurm
	}
	if nn := f.get("node"); nn == nil {
		if !slurm {
			p.missing(f, at("node"), "required; the shape of one node, e.g. node: {cpu: 8, memory: 61GiB, gpu: 1, gpu_type: V100}")
		}
	} else {
		pool.Node = p.nodeShape(nn, at("node"), slurm, pool.Given)
	}
	if nn := f.get("nodes"); nn != nil {
		if nc, ok := p.nodeCount(nn, at("nodes")); ok {
			pool.Nodes = nc
		}
	}
	marketOK := true
	if nn := f.get("market"); nn != nil {
		var s string
		if s, marketOK = p.choice(nn, at("market"), "market", markets); marketOK {
			pool.Market = Market(s)
		}
	} else if slurm {
		marketOK = false // read from the partition, which checks the spot-only fields
	}
	spot := pool.Market == Spot
	// spotOnly reports a spot-only field given on an on-demand pool.
	spotOnly := func(nn *yaml.Node, field, why string) bool {
		if spot || !marketOK {
			return true
		}
		p.at(nn, at(field), "only for spot pools (%s); remove it or set market: spot", why)
		return false
	}

	priceNode := f.get("price")
	if priceNode == nil {
		if !slurm {
			p.missing(f, at("price"), "required; USD per node-hour, e.g. price: 3.06 (0 for capacity that costs nothing), or a price trace {trace: prices.csv, instance_type: ..., zone: ...}")
		}
	} else {
		pool.Price = p.price(priceNode, at("price"), pool.Market, marketOK)
	}
	if nn := f.get("on_demand_price"); nn != nil && spotOnly(nn, "on_demand_price", "an on-demand pool's price is its on-demand price") {
		if v, ok := p.number(nn, at("on_demand_price")); ok {
			if v > 0 {
				pool.OnDemandPrice = v
			} else {
				p.at(nn, at("on_demand_price"), "must be > 0 (got %s); USD per node-hour", clip(nn.Value))
			}
		}
	}

	pool.Preemption = Preemption{Kind: PreemptNone}
	if nn := f.get("preemption"); nn == nil {
		if spot && !provider {
			p.missing(f, at("preemption"), "required for a spot pool; none, {trace: avail.json, speed: 60}, {rate: 0.5/h, outage: 10m} or {bid: 1.2}")
		}
	} else if provider && spot && marketOK && nn.Kind == yaml.ScalarNode && nn.Value == string(PreemptNone) {
		who, fix := "provider", "remove it"
		if slurm {
			who, fix = "cluster", "remove it and market: spot (a Slurm pool reads whether it is preempted from its partition)"
		}
		p.at(nn, at("preemption"), "none says this spot pool is never reclaimed, but on backend %s the %s reclaims it and a model here only feeds virga sim and virga estimate; %s, or model the reclaims, e.g. {rate: 0.5/h, outage: 10m}",
			pool.Backend, who, fix)
	} else if nn.Kind == yaml.MappingNode && !spot && marketOK {
		spotOnly(nn, "preemption", "on-demand capacity is not reclaimed")
	} else if pr, ok := p.preemption(nn, at("preemption"), pool.Price.Trace != nil, priceNode != nil); ok {
		pool.Preemption = pr
	}

	if nn := f.get("billing"); nn != nil {
		if b, ok := p.billing(nn, at("billing")); ok {
			pool.Billing = b
		}
	}
	if spot && !slurm {
		pool.Warning = DefaultSpotWarning
	}
	if nn := f.get("warning"); nn != nil && spotOnly(nn, "warning", "on-demand capacity is not reclaimed") {
		if d, ok := p.durationFrom0(nn, at("warning")); ok {
			pool.Warning = d
		}
	}
	if nn := f.get("restart_overhead"); nn != nil {
		pool.RestartOverhead, _ = p.durationFrom0(nn, at("restart_overhead"))
	}
	if pool.Backend == BackendSlurm {
		pool.Slurm = &SlurmPool{Partition: name}
	}
	if nn := f.get("slurm"); nn != nil {
		if pool.Backend != BackendSlurm {
			p.at(nn, at("slurm"), "only for pools of backend slurm (this one's is %s); remove it or set backend: slurm", pool.Backend)
		} else {
			p.slurmPool(nn, at("slurm"), pool.Slurm, pool.Given)
		}
	}
	if pool.Backend == BackendKubernetes {
		pool.Kubernetes = &KubernetesPool{}
	}
	if nn := f.get("kubernetes"); nn != nil {
		if pool.Backend != BackendKubernetes {
			p.at(nn, at("kubernetes"), "only for pools of backend kubernetes (this one's is %s); remove it or set backend: kubernetes", pool.Backend)
		} else {
			p.kubePool(nn, at("kubernetes"), pool.Kubernetes)
		}
	}
	return pool
}

// slurmPool reads {partition, qos, account}, recording the fields given in
// given ("slurm.partition", ...).
func (p *parser) slurmPool(n *yaml.Node, path string, sp *SlurmPool, given map[string]Pos) {
	f, ok := p.mapping(n, path, "a mapping like {partition: spot, qos: low, account: ml}", slurmFields)
	if !ok {
		return
	}
	for _, fl := range f.list {
		given["slurm."+fl.name] = Pos{Line: fl.val.Line, Col: fl.val.Column}
	}
	for _, k := range []struct {
		name string
		dst  *string
	}{{"partition", &sp.Partition}, {"qos", &sp.QoS}, {"account", &sp.Account}} {
		if nn := f.get(k.name); nn != nil {
			if v, ok := p.str(nn, join(path, k.name)); ok {
				if strings.ContainsAny(v, " \t\n,;'\"$`") {
					p.at(nn, join(path, k.name), "%q is not a Slurm name; no spaces, quotes or separators", clip(v))
				} else {
					*k.dst = v
				}
			}
		}
	}
}

// kubePool reads {node_selector, tolerations, provider}.
func (p *parser) kubePool(n *yaml.Node, path string, kp *KubernetesPool) {
	f, ok := p.mapping(n, path, "a mapping like {node_selector: {pool: gpu}, tolerations: [...], provider: karpenter}", kubeFields)
	if !ok {
		return
	}
	if nn := f.get("node_selector"); nn != nil {
		if sel, ok := p.mapping(nn, join(path, "node_selector"), "a mapping of node labels to values, like {pool: gpu}", nil); ok {
			kp.NodeSelector = map[string]string{}
			for _, fl := range sel.list {
				if v, ok := p.str(fl.val, join(path, "node_selector."+fl.name)); ok {
					kp.NodeSelector[fl.name] = v
				}
			}
		}
	}
	if nn := f.get("tolerations"); nn != nil {
		if nn.Kind != yaml.SequenceNode {
			p.at(nn, join(path, "tolerations"), "expected a list like [{key: gpu, operator: Exists, effect: NoSchedule}], got %s", describe(nn))
		} else {
			for i, tn := range nn.Content {
				tp := join(path, "tolerations["+strconv.Itoa(i)+"]")
				tf, ok := p.mapping(tn, tp, "a toleration like {key: gpu, operator: Exists, effect: NoSchedule}", tolerationFields)
				if !ok {
					continue
				}
				var t Toleration
				if v := tf.get("key"); v != nil {
					t.Key, _ = p.str(v, join(tp, "key"))
				}
				if v := tf.get("operator"); v != nil {
					t.Operator, _ = p.choice(v, join(tp, "operator"), "operator", tolerationOps)
				}
				if v := tf.get("value"); v != nil {
					t.Value, _ = p.str(v, join(tp, "value"))
				}
				if v := tf.get("effect"); v != nil {
					t.Effect, _ = p.choice(v, join(tp, "effect"), "effect", taintEffects)
				}
				kp.Tolerations = append(kp.Tolerations, t)
			}
		}
	}
	if nn := f.get("provider"); nn != nil {
		kp.Provider, _ = p.choice(nn, join(path, "provider"), "provider", kubeProviders)
	}
}

// choice reads one of choices, with a did-you-mean for a misspelling.
func (p *parser) choice(n *yaml.Node, path, kind string, choices []string) (string, bool) {
	s, ok := p.str(n, path)
	if !ok {
		return "", false
	}
	if !contains(choices, s) {
		p.unknown(n, path, kind, s, choices)
		return "", false
	}
	return s, true
}

// nodeShape reads {cpu, memory, gpu, gpu_type}, recording the fields given
// in given ("node.cpu", ...). fromCluster: a Slurm pool, whose partition
// tells what the file leaves out.
func (p *parser) nodeShape(n *yaml.Node, path string, fromCluster bool, given map[string]Pos) NodeShape {
	var s NodeShape
	f, ok := p.mapping(n, path, "a mapping like {cpu: 8, memory: 61GiB, gpu: 1, gpu_type: V100}", nodeFields)
	if !ok {
		return s
	}
	for _, fl := range f.list {
		given["node."+fl.name] = Pos{Line: fl.val.Line, Col: fl.val.Column}
	}
	if c := f.get("cpu"); c == nil {
		if !fromCluster {
			p.missing(f, join(path, "cpu"), "required; the cores of one node, e.g. cpu: 8")
		}
	} else if v, ok := p.number(c, join(path, "cpu")); ok {
		if v > 0 && v <= maxPoolNodes {
			s.CPU = v
		} else {
			p.at(c, join(path, "cpu"), "must be > 0 and at most %d (got %s)", maxPoolNodes, clip(c.Value))
		}
	}
	if m := f.get("memory"); m != nil {
		if !isScalar(m) || m.ShortTag() == "!!bool" {
			p.at(m, join(path, "memory"), "expected a size like 61GiB, 16G or a number of MiB, got %s", describe(m))
		} else if v, err := ParseMemory(m.Value); err != nil {
			p.at(m, join(path, "memory"), "%v", err)
		} else {
			s.MemoryMB = v
		}
	}
	gpuOK := true
	if g := f.get("gpu"); g != nil {
		s.GPU, gpuOK = p.intAtLeast(g, join(path, "gpu"), 0)
	}
	if t := f.get("gpu_type"); t != nil {
		if v, ok := p.str(t, join(path, "gpu_type")); ok {
			s.GPUType = v
			if gpuOK && s.GPU == 0 && (f.get("gpu") != nil || !fromCluster) {
				p.at(t, join(path, "gpu_type"), "names the GPU type, but the node has no GPU; give the GPUs per node, e.g. gpu: 1")
			}
		}
	}
	return s
}

// nodeCount reads `nodes: N` or `nodes: {min: N, max: M}`.
func (p *parser) nodeCount(n *yaml.Node, path string) (NodeCount, bool) {
	if n.Kind == yaml.ScalarNode {
		v, ok := p.integer(n, path)
		if !ok {
			return NodeCount{}, false
		}
		if v < 1 || v > maxPoolNodes {
			p.at(n, path, "must be between 1 and %d (got %d); for a pool that may shrink to no node write {min: 0, max: N}", maxPoolNodes, v)
			return NodeCount{}, false
		}
		return NodeCount{Min: int(v), Max: int(v)}, true
	}
	f, ok := p.mapping(n, path, "a number of nodes like 4 or bounds like {min: 0, max: 16}", nodeCountFields)
	if !ok {
		return NodeCount{}, false
	}
	var nc NodeCount
	ok = true
	if m := f.get("min"); m != nil {
		v, vok := p.intAtLeast(m, join(path, "min"), 0)
		nc.Min, ok = v, vok
	}
	maxNode := f.get("max")
	if maxNode == nil {
		p.missing(f, join(path, "max"), "required; the most nodes the pool may hold, e.g. max: 16")
		return NodeCount{}, false
	}
	v, vok := p.intAtLeast(maxNode, join(path, "max"), 1)
	if !vok {
		return NodeCount{}, false
	}
	nc.Max = v
	if v > maxPoolNodes {
		p.at(maxNode, join(path, "max"), "must be <= %d (got %d)", maxPoolNodes, v)
		return NodeCount{}, false
	}
	if ok && nc.Min > nc.Max {
		p.at(f.get("min"), join(path, "min"), "must be <= max (got %d > %d)", nc.Min, nc.Max)
		return NodeCount{}, false
	}
	return nc, ok
}

// price reads a constant price or a price trace.
func (p *parser) price(n *yaml.Node, path string, market Market, marketOK bool) Price {
	if n.Kind == yaml.ScalarNode {
		if isScalar(n) && (n.ShortTag() == "!!int" || n.ShortTag() == "!!float") {
			if v, ok := p.number(n, path); ok {
				if v < 0 {
					p.at(n, path, "must be >= 0 (got %s); USD per node-hour", clip(n.Value))
				}
				return Price{USDPerHour: v}
			}
			return Price{}
		}
		p.at(n, path, "expected USD per node-hour as a number like 3.06, or a price trace {trace: prices.csv, instance_type: ..., zone: ...}, got %s", describe(n))
		return Price{}
	}
	f, ok := p.mapping(n, path, "USD per node-hour as a number like 3.06, or a price trace {trace: prices.csv, instance_type: ..., zone: ...}", priceTraceFields)
	if !ok {
		return Price{}
	}
	t := &PriceTrace{}
	if tn := f.get("trace"); tn == nil {
		p.missing(f, join(path, "trace"), "required; the price trace file, relative to the capacity file, e.g. trace: prices.csv")
	} else {
		t.Path, _ = p.tracePath(tn, join(path, "trace"))
		t.Pos = Pos{Line: tn.Line, Col: tn.Column}
	}
	if fn := f.get("format"); fn != nil {
		if s, ok := p.choice(fn, join(path, "format"), "format", priceFormats); ok {
			t.Format = PriceFormat(s)
		}
	} else if t.Path != "" {
		switch strings.ToLower(filepath.Ext(t.Path)) {
		case ".csv":
			t.Format = PriceGCP
		case ".json":
			t.Format = PriceAWSJSON
		case ".tsv":
			t.Format = PriceAWSTSV
		default:
			p.missing(f, join(path, "format"), "required, as the file name ends in neither .csv, .json nor .tsv; one of %s", strings.Join(priceFormats, ", "))
		}
	}
	for _, key := range []struct {
		name, example string
		dst           *string
	}{{"instance_type", "p3.2xlarge or a2-highgpu-1g", &t.InstanceType}, {"zone", "us-east-1a (AWS) or us-central1 (a GCP region)", &t.Zone}} {
		kn := f.get(key.name)
		if kn == nil {
			p.missing(f, join(path, key.name), "required; the %s whose prices to read, e.g. %s", strings.ReplaceAll(key.name, "_", " "), key.example)
			continue
		}
		if s, ok := p.str(kn, join(path, key.name)); ok && strings.TrimSpace(s) == "" {
			p.at(kn, join(path, key.name), "must not be empty; e.g. %s", key.example)
		} else if ok {
			*key.dst = s
		}
	}
	aws := t.Format == PriceAWSJSON || t.Format == PriceAWSTSV
	if pn := f.get("product"); pn != nil {
		if s, ok := p.str(pn, join(path, "product")); ok {
			t.Product = s
			if t.Format == PriceGCP {
				p.at(pn, join(path, "product"), "only for the AWS formats; GCP prices have no product description")
			}
		}
	} else if aws {
		t.Product = DefaultAWSProduct
	}
	if aws && marketOK && market == OnDemand {
		at, atPath := f.get("format"), join(path, "format")
		if at == nil {
			at, atPath = f.get("trace"), path
		}
		p.at(at, atPath, "the AWS spot price history holds spot prices only; give an on-demand pool's price as a number, or set market: spot")
	}
	return Price{Trace: t}
}

// tracePath reads a trace file's path: a non-empty string.
func (p *parser) tracePath(n *yaml.Node, path string) (string, bool) {
	s, ok := p.str(n, path)
	if !ok {
		return "", false
	}
	if strings.TrimSpace(s) == "" || strings.ContainsRune(s, 0) {
		p.at(n, path, "expected a file name, relative to the capacity file, got %q", clip(s))
		return "", false
	}
	return s, true
}

// preemption reads `none` or one of the models {trace: ...}, {rate: ...},
// {bid: ...}. priceTrace says whether the pool's price is a trace, which bid
// needs; priceGiven whether the pool has a price at all (so a missing one is
// not reported twice).
func (p *parser) preemption(n *yaml.Node, path string, priceTrace, priceGiven bool) (Preemption, bool) {
	const forms = "none, {trace: avail.json, speed: 60}, {rate: 0.5/h, outage: 10m} or {bid: 1.2}"
	if n.Kind == yaml.ScalarNode {
		s, ok := p.str(n, path)
		if !ok {
			return Preemption{}, false
		}
		if s != string(PreemptNone) {
			if sg := suggest(s, []string{string(PreemptNone)}); sg != "" {
				p.at(n, path, "unknown preemption %q; did you mean %s?", clip(s), sg)
			} else {
				p.at(n, path, "expected %s, got %s", forms, describe(n))
			}
			return Preemption{}, false
		}
		return Preemption{Kind: PreemptNone}, true
	}
	f, ok := p.mapping(n, path, forms, preemptionFields)
	if !ok {
		return Preemption{}, false
	}
	// The model is the first of trace, rate and bid in the file.
	var model field
	for _, fl := range f.list {
		if _, isModel := preemptionModelFields[fl.name]; !isModel {
			continue
		}
		if model.name == "" {
			model = fl
			continue
		}
		p.at(fl.key, join(path, fl.name), "%s and %s are different models; keep one", model.name, fl.name)
		return Preemption{}, false
	}
	if model.name == "" {
		if len(f.suggested) == 0 {
			p.at(n, path, "expected one model: {trace: avail.json, speed: 60}, {rate: 0.5/h, outage: 10m} or {bid: 1.2}")
		}
		return Preemption{}, false
	}
	ok = true
	for _, fl := range f.list {
		if fl.name == model.name || contains(preemptionModelFields[model.name], fl.name) {
			continue
		}
		owner := "trace"
		if fl.name == "outage" {
			owner = "rate"
		}
		p.at(fl.key, join(path, fl.name), "only with %s, not with %s; remove it", owner, model.name)
		ok = false
	}
	pr := Preemption{Kind: PreemptionKind(model.name)}
	switch model.name {
	case "trace":
		var tok bool
		pr.Trace, tok = p.tracePath(model.val, join(path, "trace"))
		pr.TracePos = Pos{Line: model.val.Line, Col: model.val.Column}
		ok = ok && tok
		pr.Speed = 1
		if sn := f.get("speed"); sn != nil {
			if v, vok := p.number(sn, join(path, "speed")); !vok {
				ok = false
			} else if v <= 0 || v > maxSpeed {
				p.at(sn, join(path, "speed"), "must be > 0 and at most %d (got %s); 60 replays an hour of trace in a minute", int(maxSpeed), clip(sn.Value))
				ok = false
			} else {
				pr.Speed = v
			}
		}
		if on := f.get("offset"); on != nil {
			if isScalar(on) && on.Value == "random" {
				pr.RandomOffset = true
			} else if d, dok := p.durationFrom0(on, join(path, "offset")); dok {
				pr.Offset = d
			} else {
				ok = false
			}
		}
	case "rate":
		r, rok := p.rate(model.val, join(path, "rate"))
		pr.RatePerHour = r
		ok = ok && rok
		if on := f.get("outage"); on == nil {
			p.missing(f, join(path, "outage"), "required with rate; the mean time the capacity stays gone after a reclaim, e.g. outage: 10m")
			ok = false
		} else if d, dok := p.duration(on, join(path, "outage")); dok {
			pr.Outage = d
		} else {
			ok = false
		}
	case "bid":
		if v, vok := p.number(model.val, join(path, "bid")); !vok {
			ok = false
		} else if v <= 0 {
			p.at(model.val, join(path, "bid"), "must be > 0 (got %s); the most USD per node-hour to pay", clip(model.val.Value))
			ok = false
		} else {
			pr.Bid = v
		}
		if !priceTrace && priceGiven {
			p.at(model.key, join(path, "bid"), "needs a spot price trace to compare with; give price: {trace: ..., instance_type: ..., zone: ...}")
			ok = false
		}
	}
	return pr, ok
}

// maxMeanUp and minMeanUp bound a rate's mean up time, 1/rate.
const (
	minMeanUp = time.Millisecond
	maxMeanUp = 100 * 365 * 24 * time.Hour
)

// rateUnits are the bare units a rate may be given per.
var rateUnits = map[string]time.Duration{
	"s": time.Second, "sec": time.Second, "m": time.Minute, "min": time.Minute,
	"h": time.Hour, "hour": time.Hour, "d": 24 * time.Hour, "day": 24 * time.Hour,
}

// rate reads a reclaim rate: a number (per hour), or "N/UNIT" with UNIT one
// of s, m, h, d, or a duration ("1/30m"). It returns reclaims per hour.
func (p *parser) rate(n *yaml.Node, path string) (float64, bool) {
	const want = "expected a rate like 0.5/h, 2/d or 1/30m (a number alone is per hour)"
	if !isScalar(n) || n.ShortTag() == "!!bool" {
		p.at(n, path, "%s, got %s", want, describe(n))
		return 0, false
	}
	num, per, slash := strings.Cut(n.Value, "/")
	v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		p.at(n, path, "%s, got %s", want, describe(n))
		return 0, false
	}
	unit := time.Hour
	if slash {
		per = strings.TrimSpace(per)
		if u, ok := rateUnits[per]; ok {
			unit = u
		} else if d, err := ParseDuration(per); err == nil && d > 0 {
			unit = d.D()
		} else {
			p.at(n, path, "%s, got %s", want, describe(n))
			return 0, false
		}
	}
	if v <= 0 {
		p.at(n, path, "must be > 0 (got %s); for a pool never reclaimed write preemption: none", clip(n.Value))
		return 0, false
	}
	perHour := v / unit.Hours()
	if meanUp := float64(time.Hour) / perHour; !(meanUp >= float64(minMeanUp) && meanUp <= float64(maxMeanUp)) {
		p.at(n, path, "must give a mean up time (1/rate) between 1ms and 100 years (got %s)", clip(n.Value))
		return 0, false
	}
	return perHour, true
}

// billing reads per-second, per-hour or {increment, minimum}.
func (p *parser) billing(n *yaml.Node, path string) (Billing, bool) {
	const forms = "per-second, per-hour or {increment: 1s, minimum: 60s}"
	if n.Kind == yaml.ScalarNode {
		s, ok := p.str(n, path)
		if !ok {
			return Billing{}, false
		}
		switch s {
		case "per-second":
			return BillingPerSecond, true
		case "per-hour":
			return BillingPerHour, true
		}
		if sg := suggest(s, billingNames); sg != "" {
			p.at(n, path, "unknown billing %q; did you mean %s?", clip(s), sg)
		} else {
			p.at(n, path, "unknown billing %q; expected %s", clip(s), forms)
		}
		return Billing{}, false
	}
	f, ok := p.mapping(n, path, forms, billingFields)
	if !ok {
		return Billing{}, false
	}
	var b Billing
	in := f.get("increment")
	if in == nil {
		p.missing(f, join(path, "increment"), "required; run time is billed in multiples of it, e.g. increment: 1s")
		return Billing{}, false
	}
	if b.Increment, ok = p.duration(in, join(path, "increment")); !ok {
		return Billing{}, false
	}
	b.Minimum = b.Increment
	if mn := f.get("minimum"); mn != nil {
		if b.Minimum, ok = p.durationFrom0(mn, join(path, "minimum")); !ok {
			return Billing{}, false
		}
	}
	return b, true
}

// durationFrom0 reads a duration >= 0: Go syntax ("90s") or whole seconds.
func (p *parser) durationFrom0(n *yaml.Node, path string) (Duration, bool) {
	if !isScalar(n) || n.ShortTag() == "!!float" || n.ShortTag() == "!!bool" {
		p.at(n, path, "expected a duration like 90s, 30m or 1h30m, or whole seconds, got %s", describe(n))
		return 0, false
	}
	d, err := ParseDuration(n.Value)
	if err != nil {
		p.at(n, path, "%v", err)
		return 0, false
	}
	if d < 0 {
		p.at(n, path, "must be >= 0 (got %s)", clip(n.Value))
		return 0, false
	}
	return d, true
}
