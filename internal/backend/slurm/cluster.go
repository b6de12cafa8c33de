package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// What the cluster says of itself, read with scontrol: its preemption
// configuration (`scontrol show config`), its partitions (`scontrol -o show
// partition`) and their nodes (`scontrol -o show node NODES`). Resolve fills
// in the pools of a capacity file from it.

// Partition is one partition as `scontrol show partition` prints it.
type Partition struct {
	Name string
	// Nodes is the partition's nodes as a hostlist expression
	// ("virga[1-2]"); "" when it has none.
	Nodes        string
	TotalNodes   int
	TotalCPUs    int
	PriorityTier int
	// PreemptMode is the partition's, upper case ("OFF", "REQUEUE",
	// "CANCEL", "SUSPEND,GANG"); "" when scontrol prints none, and then the
	// cluster's applies.
	PreemptMode string
	// GraceTime is how long a preempted job's steps have between SIGTERM and
	// SIGKILL.
	GraceTime time.Duration
	// MaxTime is the longest a job may run; 0 means UNLIMITED.
	MaxTime time.Duration
	State   string // UP, DOWN, DRAIN, INACTIVE
}

// Node is one node as `scontrol show node` prints it.
type Node struct {
	Name string
	// CPUs is what jobs may use: CPUEfctv (Slurm 22.05 on: without the
	// cores kept for the system), else CPUTot.
	CPUs int
	// MemoryMB is RealMemory, in MiB (Slurm's "MB").
	MemoryMB int64
	// GPUs is the count of Gres "gpu", and GPUType its type when all of
	// them have the same one ("a100" of gpu:a100:4).
	GPUs       int
	GPUType    string
	Partitions []string
	State      string // IDLE, MIXED, ALLOCATED, DOWN+DRAIN, ...
}

// PreemptConfig is what the cluster's configuration says of preemption.
type PreemptConfig struct {
	PreemptType string // preempt/none, preempt/partition_prio, preempt/qos
	PreemptMode string // the default of partitions without their own
}

// ParsePartitions reads the output of `scontrol show partition`, one line
// per partition (-o) or the multi-line form. A record starts at its
// PartitionName.
func ParsePartitions(out string) ([]Partition, error) {
	recs, err := records(out, "PartitionName")
	if err != nil {
		return nil, err
	}
	parts := make([]Partition, 0, len(recs))
	for _, r := range recs {
		p := Partition{Name: r.get("PartitionName"), PreemptMode: strings.ToUpper(r.get("PreemptMode")), State: r.get("State")}
		if n := r.get("Nodes"); n != "(null)" {
			p.Nodes = n
		}
		var errs []error
		p.TotalNodes, errs = r.count("TotalNodes", errs)
		p.TotalCPUs, errs = r.count("TotalCPUs", errs)
		p.PriorityTier, errs = r.count("PriorityTier", errs)
		if g := r.get("GraceTime"); g != "" {
			secs, err := strconv.Atoi(g)
			if err != nil || secs < 0 {
				errs = append(errs, fmt.Errorf("GraceTime=%q: expected whole seconds", clipped(g)))
			}
			p.GraceTime = time.Duration(secs) * time.Second
		}
		if m := r.get("MaxTime"); m != "" {
			d, err := parseLimit(m)
			if err != nil {
				errs = append(errs, fmt.Errorf("MaxTime=%q: %w", clipped(m), err))
			}
			p.MaxTime = d
		}
		if err := errors.Join(errs...); err != nil {
			return nil, fmt.Errorf("partition %s: %w", clipped(p.Name), err)
		}
		parts = append(parts, p)
	}
	return parts, nil
}

// ParseNodes reads the output of `scontrol show node`, one line per node
// (-o) or the multi-line form. A record starts at its NodeName.
func ParseNodes(out string) ([]Node, error) {
	recs, err := records(out, "NodeName")
	if err != nil {
		return nil, err
	}
	nodes := make([]Node, 0, len(recs))
	for _, r := range recs {
		n := Node{Name: r.get("NodeName"), State: r.get("State")}
		var errs []error
		cpus := "CPUEfctv"
		if r.get(cpus) == "" {
			cpus = "CPUTot"
		}
		n.CPUs, errs = r.count(cpus, errs)
		if m := r.get("RealMemory"); m != "" {
			v, err := strconv.ParseInt(m, 10, 64)
			if err != nil || v < 0 {
				errs = append(errs, fmt.Errorf("RealMemory=%q: expected MiB", clipped(m)))
			}
			n.MemoryMB = v
		}
		if g := r.get("Gres"); g != "" {
			var err error
			if n.GPUs, n.GPUType, err = parseGres(g); err != nil {
				errs = append(errs, fmt.Errorf("Gres=%q: %w", clipped(g), err))
			}
		}
		if ps := r.get("Partitions"); ps != "" && ps != "(null)" {
			n.Partitions = strings.Split(ps, ",")
		}
		if err := errors.Join(errs...); err != nil {
			return nil, fmt.Errorf("node %s: %w", clipped(n.Name), err)
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// ParseConfig reads the output of `scontrol show config`: "Key = Value"
// lines.
func ParseConfig(out string) (PreemptConfig, error) {
	var c PreemptConfig
	found := false
	for line := range strings.Lines(out) {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "PreemptType":
			c.PreemptType, found = strings.TrimSpace(v), true
		case "PreemptMode":
			c.PreemptMode = strings.ToUpper(strings.TrimSpace(v))
		}
	}
	if !found {
		return c, errors.New("no PreemptType in the configuration")
	}
	return c, nil
}

// record is one object of scontrol's output: its Key=Value pairs.
type record map[string]string

func (r record) get(key string) string { return r[key] }

// count reads a non-negative integer field (absent: 0), appending a
// problem to errs.
func (r record) count(key string, errs []error) (int, []error) {
	s := r[key]
	if s == "" {
		return 0, errs
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		return 0, append(errs, fmt.Errorf("%s=%q: expected a count", key, clipped(s)))
	}
	return v, errs
}

// records splits scontrol's output into records, each starting at the
// field first. Fields are Key=Value separated by white space; a word
// without "=" (or not starting with a name) continues the value before it,
// as in "OS=Linux 6.1.0 #1 SMP".
func records(out, first string) ([]record, error) {
	if strings.HasPrefix(strings.TrimSpace(out), "No ") {
		return nil, nil // "No partitions in the system", "No nodes in the system"
	}
	var recs []record
	var cur record
	var words []string // the value being read, word by word (joined once: linear time)
	last := ""
	flush := func() {
		if cur != nil && last != "" {
			if _, dup := cur[last]; !dup {
				cur[last] = strings.Join(words, " ")
			}
		}
	}
	for _, w := range strings.Fields(out) {
		k, v, ok := strings.Cut(w, "=")
		if !ok || !isName(k) {
			if cur == nil {
				return nil, fmt.Errorf("unexpected %q before the first %s=", clipped(w), first)
			}
			words = append(words, w)
			continue
		}
		flush()
		if k == first {
			cur = record{}
			recs = append(recs, cur)
		} else if cur == nil {
			return nil, fmt.Errorf("unexpected %s= before the first %s=", clipped(k), first)
		}
		last, words = k, append(words[:0], v)
	}
	flush()
	for _, r := range recs {
		if r[first] == "" {
			return nil, fmt.Errorf("a record with an empty %s", first)
		}
	}
	return recs, nil
}

// isName reports whether s is a field name: a letter, then letters,
// digits and '_'.
func isName(s string) bool {
	if s == "" || !(s[0] >= 'A' && s[0] <= 'Z' || s[0] >= 'a' && s[0] <= 'z') {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// parseGres reads a node's Gres ("gpu:a100:4(S:0-1),mps:400", "gpu:2",
// "(null)") and returns its GPUs and their type ("" when untyped or of
// several types).
func parseGres(s string) (int, string, error) {
	if s == "(null)" || s == "" {
		return 0, "", nil
	}
	total, typ := 0, ""
	types := map[string]bool{}
	for _, g := range splitTop(s) {
		if i := strings.IndexByte(g, '('); i >= 0 {
			g = g[:i] // (S:0-1), (IDX:0-3): where, not how many
		}
		parts := strings.Split(g, ":")
		if parts[0] != "gpu" {
			continue
		}
		n, t := 1, ""
		switch len(parts) {
		case 1:
		case 2:
			if v, err := gresCount(parts[1]); err == nil {
				n = v
			} else {
				t = parts[1] // gpu:TYPE, one of them
			}
		case 3:
			t = parts[1]
			v, err := gresCount(parts[2])
			if err != nil {
				return 0, "", err
			}
			n = v
		default:
			return 0, "", fmt.Errorf("expected gpu[:TYPE][:COUNT], got %q", clipped(g))
		}
		if total+n > 1<<20 {
			return 0, "", errors.New("more than 2^20 GPUs on a node")
		}
		total += n
		typ = t
		types[t] = true
	}
	if len(types) != 1 || total == 0 {
		typ = "" // untyped, or of several types
	}
	return total, typ, nil
}

// splitTop splits s at the commas outside parentheses.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// gresCount reads a Gres count: digits with an optional K, M or G (powers of
// 1024).
func gresCount(s string) (int, error) {
	mult := 1
	if s != "" {
		switch s[len(s)-1] {
		case 'K', 'k':
			mult = 1 << 10
		case 'M', 'm':
			mult = 1 << 20
		case 'G', 'g':
			mult = 1 << 30
		}
		if mult != 1 {
			s = s[:len(s)-1]
		}
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 || v > (1<<31)/mult {
		return 0, fmt.Errorf("expected a count, got %q", clipped(s))
	}
	return v * mult, nil
}

// parseLimit reads a time limit as scontrol prints it: UNLIMITED (0),
// "MM", "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM" or "D-HH:MM:SS".
func parseLimit(s string) (time.Duration, error) {
	switch s {
	case "UNLIMITED", "INFINITE", "NONE":
		return 0, nil
	}
	const bad = "expected UNLIMITED or [D-]HH:MM:SS"
	days := 0
	rest := s
	if d, r, ok := strings.Cut(s, "-"); ok {
		v, err := strconv.Atoi(d)
		if err != nil || v < 0 || v > 1e6 {
			return 0, errors.New(bad)
		}
		days, rest = v, r
	}
	parts := strings.Split(rest, ":")
	if len(parts) > 3 {
		return 0, errors.New(bad)
	}
	nums := make([]int, len(parts))
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 || v > 1e6 {
			return 0, errors.New(bad)
		}
		nums[i] = v
	}
	var h, m, sec int
	switch {
	case strings.Contains(s, "-"): // D-HH[:MM[:SS]]
		h = nums[0]
		if len(nums) > 1 {
			m = nums[1]
		}
		if len(nums) > 2 {
			sec = nums[2]
		}
	case len(nums) == 1:
		m = nums[0]
	case len(nums) == 2:
		m, sec = nums[0], nums[1]
	default:
		h, m, sec = nums[0], nums[1], nums[2]
	}
	return time.Duration(days)*24*time.Hour + time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(sec)*time.Second, nil
}

// clipped shortens s for a message.
func clipped(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

// Cluster is what Resolve needs to know of a cluster.
type Cluster struct {
	Preempt    PreemptConfig
	Partitions []Partition
	// Nodes holds the nodes of each partition asked for, by partition name.
	Nodes map[string][]Node
}

// Partition returns the partition named name, or nil.
func (c *Cluster) Partition(name string) *Partition {
	for i := range c.Partitions {
		if c.Partitions[i].Name == name {
			return &c.Partitions[i]
		}
	}
	return nil
}

// ReadCluster asks the cluster, with scontrol (the command's name or
// path; "" means "scontrol"), for its preemption configuration, its
// partitions and the nodes of those named in partitions: one `scontrol
// show config`, one `scontrol -o show partition` and one `scontrol -o show
// node` per partition.
func ReadCluster(ctx context.Context, scontrol string, partitions []string) (*Cluster, error) {
	if scontrol == "" {
		scontrol = "scontrol"
	}
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, scontrol, args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			if msg := strings.TrimSpace(stderr.String() + " " + stdout.String()); msg != "" {
				return "", fmt.Errorf("%s %s: %w: %s", scontrol, strings.Join(args, " "), err, clipped(msg))
			}
			return "", fmt.Errorf("%s %s: %w", scontrol, strings.Join(args, " "), err)
		}
		return stdout.String(), nil
	}
	c := &Cluster{Nodes: map[string][]Node{}}
	out, err := run("show", "config")
	if err != nil {
		return nil, err
	}
	if c.Preempt, err = ParseConfig(out); err != nil {
		return nil, fmt.Errorf("%s show config: %w", scontrol, err)
	}
	if out, err = run("-o", "show", "partition"); err != nil {
		return nil, err
	}
	if c.Partitions, err = ParsePartitions(out); err != nil {
		return nil, fmt.Errorf("%s show partition: %w", scontrol, err)
	}
	for _, name := range partitions {
		p := c.Partition(name)
		if p == nil || p.Nodes == "" || c.Nodes[name] != nil {
			continue
		}
		if out, err = run("-o", "show", "node", p.Nodes); err != nil {
			return nil, err
		}
		nodes, err := ParseNodes(out)
		if err != nil {
			return nil, fmt.Errorf("%s show node %s: %w", scontrol, p.Nodes, err)
		}
		c.Nodes[name] = slices.DeleteFunc(nodes, func(n Node) bool { return !slices.Contains(n.Partitions, name) && n.Partitions != nil })
	}
	return c, nil
}
