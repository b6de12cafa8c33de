package spec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// MaxFileSize is the largest experiment file Parse accepts (1 MiB).
const MaxFileSize = 1 << 20

// Defaults applied when the file leaves a field out.
const (
	// DefaultMaxConcurrent is max_concurrent's default.
	DefaultMaxConcurrent = 1
	// DefaultMaxRestarts is max_restarts's default.
	DefaultMaxRestarts = 3
	// DefaultStopGrace is stop_grace's default, 120s.
	DefaultStopGrace = Duration(120 * time.Second)
	// DefaultCPU is resources.cpu's default, one core.
	DefaultCPU = 1.0
	// DefaultKeepLast is checkpoints.keep_last's default.
	DefaultKeepLast = 2
	// maxGridTrials bounds the trials a grid search may default to; a larger
	// grid needs an explicit max_trials.
	maxGridTrials = 100000
)

var (
	namePattern    = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,63}$`)
	hpNamePattern  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_.-]{0,63}$`)
	envNamePattern = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
	yamlLineError  = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)
)

// Field names, in the order the documentation lists them.
var (
	topFields        = []string{"name", "description", "entrypoint", "hyperparameters", "searcher", "objective", "max_trials", "max_concurrent", "max_restarts", "timeout", "stop_grace", "resources", "checkpoints", "seed", "deadline", "budget"}
	entrypointFields = []string{"command", "workdir", "env"}
	objectiveFields  = []string{"metric", "direction"}
	resourceFields   = []string{"cpu", "memory", "gpu", "nodes", "processes_per_node"}
	checkpointFields = []string{"keep_last"}
	hpFields         = []string{"type", "min", "max", "log", "count", "values", "value", "default"}
	hpTypeFields     = map[HPType][]string{
		HPInt:         {"type", "min", "max", "log", "count", "default"},
		HPFloat:       {"type", "min", "max", "log", "count", "default"},
		HPCategorical: {"type", "values", "default"},
		HPConst:       {"type", "value"},
	}
	hpTypes = []string{string(HPInt), string(HPFloat), string(HPCategorical), string(HPConst)}
)

// Load reads and parses the experiment file at path. It returns the file's
// bytes as well (also when parsing fails), since Virga stores the file exactly
// as submitted. Files over MaxFileSize are rejected without reading them whole.
func Load(path string) (*Experiment, []byte, error) {
	data, err := readFile("experiment", path)
	if err != nil {
		return nil, nil, err
	}
	e, err := Parse(path, data)
	return e, data, err
}

// readFile reads the kind of file at path, at most MaxFileSize+1 bytes (the
// parsers reject larger ones).
func readFile(kind, path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &FileError{Kind: kind, Path: path, Err: err}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, &FileError{Kind: kind, Path: path, Err: err}
	}
	return data, nil
}

// Parse parses and validates an experiment file and applies defaults.
// filename names the file in messages and anchors a relative workdir (the
// workdir defaults to the file's directory, made absolute). On failure the
// error is an *Error listing every problem found, sorted by position. Parse
// never panics, whatever data holds.
func Parse(filename string, data []byte) (exp *Experiment, err error) {
	p := &parser{file: filename, hpNodes: map[string]*yaml.Node{}}
	defer func() {
		// The YAML library is not ours; a panic in it must not take the server down.
		if r := recover(); r != nil {
			exp = nil
			p.probs = nil
			p.at(nil, "", "cannot parse YAML: internal parser error (%v)", r)
			err = p.err()
		}
	}()
	if len(data) > MaxFileSize {
		p.at(nil, "", "file is over %d bytes (1 MiB); an experiment file must be smaller", MaxFileSize)
		return nil, p.err()
	}
	dir, derr := filepath.Abs(filepath.Dir(filename))
	if derr != nil {
		return nil, fmt.Errorf("resolving the directory of %s: %w", filename, derr)
	}
	p.dir = dir
	root := p.document(data)
	if root == nil {
		return nil, p.err()
	}
	e := p.experiment(root)
	if err := p.err(); err != nil {
		return nil, err
	}
	return e, nil
}

// document decodes data into one YAML mapping node, reporting syntax errors,
// extra documents, aliases and a root that is not a mapping.
func (p *parser) document(data []byte) *yaml.Node {
	return p.root(data, "an experiment file", "file is empty; an experiment needs at least name and objective", "a mapping of fields (name: ..., objective: ...)")
}

// root decodes data into one YAML mapping node for a file of kind,
// reporting syntax errors, extra documents, aliases and a root that is not
// a mapping; empty is the message for an empty file, mapping what the root
// should look like.
func (p *parser) root(data []byte, kind, empty, mapping string) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.at(nil, "", "%s", empty)
		} else {
			p.syntax(err, data)
		}
		return nil
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		p.syntax(err, data)
		return nil
	default:
		if next.Kind != yaml.DocumentNode || len(next.Content) > 0 {
			p.at(&next, "", "a second YAML document starts here; %s holds exactly one (remove the ---)", kind)
			return nil
		}
	}
	if len(doc.Content) == 0 {
		p.at(nil, "", "%s", empty)
		return nil
	}
	root := doc.Content[0]
	if !p.noAliases(root) {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		p.at(root, "", "expected %s, got %s", mapping, describe(root))
		return nil
	}
	return root
}

// yamlParserProblems are the messages of yaml.v3's parser (as opposed to its
// scanner). The library reports their line 0-based (it adds one for scanner
// errors only), so syntax adds the one it forgot.
var yamlParserProblems = map[string]bool{
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"did not find expected <document start>": true,
	"did not find expected <stream-start>":   true,
	"did not find expected '-' indicator":    true,
	"did not find expected key":              true,
	"did not find expected node content":     true,
	"found duplicate %YAML directive":        true,
	"found duplicate %TAG directive":         true,
	"found incompatible YAML document":       true,
	"found undefined tag handle":             true,
}

// syntax reports a YAML syntax error, with its line when the library gives
// one, and a hint when that line is indented with a tab.
func (p *parser) syntax(err error, data []byte) {
	msg := err.Error()
	if m := yamlLineError.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		if yamlParserProblems[m[2]] {
			line++
		}
		hint := ""
		if text := lineOf(data, line); strings.HasPrefix(strings.TrimLeft(text, " "), "\t") {
			hint = "; indent with spaces, YAML does not allow tabs"
		}
		p.at(&yaml.Node{Line: line}, "", "invalid YAML: %s%s", m[2], hint)
		return
	}
	p.at(nil, "", "invalid YAML: %s", strings.TrimPrefix(msg, "yaml: "))
}

// lineOf returns the 1-based line n of data, or "".
func lineOf(data []byte, n int) string {
	for i := 1; len(data) > 0; i++ {
		line, rest, _ := bytes.Cut(data, []byte("\n"))
		if i == n {
			return string(line)
		}
		data = rest
	}
	return ""
}

// noAliases refuses aliases. They buy nothing in an experiment file and
// invite exponential expansion, so the first one (in file order) is reported
// and the file goes no further. The walk does not follow aliases, so it
// visits each node once.
func (p *parser) noAliases(root *yaml.Node) bool {
	var first *yaml.Node
	count := 0
	stack := []*yaml.Node{root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if n.Kind == yaml.AliasNode {
			count++
			if first == nil || n.Line < first.Line || n.Line == first.Line && n.Column < first.Column {
				first = n
			}
			continue
		}
		stack = append(stack, n.Content...)
	}
	if first == nil {
		return true
	}
	more := ""
	if count > 1 {
		more = fmt.Sprintf(" (the file has %d aliases)", count)
	}
	p.at(first, "", "aliases (*%s) are not supported; write the value out%s", clip(first.Value), more)
	return false
}

// experiment reads the root mapping. It reads the hyperparameters first, as
// the entrypoint and the searcher are checked against them.
func (p *parser) experiment(root *yaml.Node) *Experiment {
	f, _ := p.mapping(root, "", "a mapping", topFields)
	e := &Experiment{
		Hyperparameters: map[string]*Hyperparameter{},
		Order:           []string{},
		MaxConcurrent:   DefaultMaxConcurrent,
		MaxRestarts:     DefaultMaxRestarts,
		StopGrace:       DefaultStopGrace,
		Resources:       Resources{CPU: DefaultCPU, Nodes: 1, ProcessesPerNode: 1},
		Checkpoints:     Checkpoints{KeepLast: DefaultKeepLast},
	}

	if n := f.get("name"); n == nil {
		p.missing(f, "name", "required; a name like digits-mlp (letters, digits, '.', '_', '-'; at most 64)")
	} else if s, ok := p.str(n, "name"); ok {
		if namePattern.MatchString(s) {
			e.Name = s
		} else {
			p.at(n, "name", "%q is not a valid name; use letters, digits, '.', '_' and '-', starting with a letter or digit, at most 64 characters", clip(s))
		}
	}
	if n := f.get("description"); n != nil {
		if s, ok := p.str(n, "description"); ok {
			e.Description = s
		}
	}

	// Every declared name counts for placeholders, even if its definition is
	// wrong, so one mistake is not reported twice.
	var declared []string
	if n := f.get("hyperparameters"); n != nil {
		declared = p.hyperparameters(n, e)
	}
	if n := f.get("entrypoint"); n != nil {
		e.Entrypoint = p.entrypoint(n, declared)
	}
	searcherNode := f.get("searcher")
	searcherOK := true
	if searcherNode == nil {
		e.Searcher = Searcher{Name: DefaultSearcher, Sampler: DefaultSearcher}
	} else {
		e.Searcher, searcherOK = p.searcher(searcherNode)
	}
	if n := f.get("objective"); n == nil {
		p.missing(f, "objective", "required; e.g. objective: {metric: val_loss, direction: minimize}")
	} else {
		e.Objective = p.objective(n)
	}

	var maxTrials int
	maxTrialsNode := f.get("max_trials")
	if maxTrialsNode != nil {
		maxTrials, _ = p.intAtLeast(maxTrialsNode, "max_trials", 1)
	}
	if n := f.get("max_concurrent"); n != nil {
		if v, ok := p.intAtLeast(n, "max_concurrent", 1); ok {
			e.MaxConcurrent = v
		}
	}
	if n := f.get("max_restarts"); n != nil {
		if v, ok := p.intAtLeast(n, "max_restarts", 0); ok {
			e.MaxRestarts = v
		}
	}
	if n := f.get("timeout"); n != nil {
		e.Timeout, _ = p.duration(n, "timeout")
	}
	if n := f.get("stop_grace"); n != nil {
		if d, ok := p.duration(n, "stop_grace"); ok {
			e.StopGrace = d
		}
	}
	if n := f.get("deadline"); n != nil {
		e.Deadline, _ = p.deadline(n, "deadline")
	}
	if n := f.get("budget"); n != nil {
		e.Budget, _ = p.dollars(n, "budget")
	}
	if n := f.get("resources"); n != nil {
		p.resources(n, &e.Resources)
	}
	if n := f.get("checkpoints"); n != nil {
		if cf, ok := p.mapping(n, "checkpoints", "a mapping like {keep_last: 2}", checkpointFields); ok {
			if k := cf.get("keep_last"); k != nil {
				if v, ok := p.intAtLeast(k, "checkpoints.keep_last", 1); ok {
					e.Checkpoints.KeepLast = v
				}
			}
		}
	}
	if n := f.get("seed"); n != nil {
		e.Seed, _ = p.seed(n)
	}

	if searcherOK {
		p.searchSpace(e, searcherNode, maxTrialsNode, maxTrials)
	}
	return e
}

// seed reads a uint64.
func (p *parser) seed(n *yaml.Node) (uint64, bool) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int" {
		var u uint64
		if err := n.Decode(&u); err == nil {
			return u, true
		}
		if strings.HasPrefix(strings.TrimSpace(n.Value), "-") {
			p.at(n, "seed", "must be >= 0 (got %s)", clip(n.Value))
		} else {
			p.at(n, "seed", "must fit in 64 bits (at most 18446744073709551615, got %s)", clip(n.Value))
		}
		return 0, false
	}
	p.at(n, "seed", "expected a non-negative integer, got %s", describe(n))
	return 0, false
}

// searcher reads `searcher: NAME`, `searcher: {name: NAME, SETTING: ...}` or
// `searcher: {sampler: NAME, stopper: NAME, SETTING: ...}`. A stopper named
// alone (asha) runs with the random sampler.
func (p *parser) searcher(n *yaml.Node) (Searcher, bool) {
	const path = "searcher"
	names := SearcherNames()
	checkName := func(nn *yaml.Node, path string, choices []string, what string) (string, bool) {
		s, ok := p.str(nn, path)
		if !ok {
			return "", false
		}
		if _, ok := searcherDefs[s]; !ok || !slices.Contains(choices, s) {
			if ok {
				p.at(nn, path, "%s is not a %s (%ss: %s)", s, what, what, strings.Join(choices, ", "))
				return "", false
			}
			p.unknown(nn, path, what, s, choices)
			return "", false
		}
		return s, true
	}
	if n.Kind == yaml.ScalarNode {
		if !isScalar(n) {
			p.at(n, path, "expected a searcher name (%s) or {name: ...}, got %s", strings.Join(names, ", "), describe(n))
			return Searcher{}, false
		}
		name, ok := checkName(n, path, names, "searcher")
		if !ok {
			return Searcher{}, false
		}
		s, ok := p.combine(n, name, "", "")
		if ok && searcherDefs[name].role == roleAuto {
			s = AutoSearcher(0)
		}
		return s, ok
	}
	f, ok := p.mapping(n, path, fmt.Sprintf("a searcher name (%s), {name: ...} or {sampler: ..., stopper: ...}", strings.Join(names, ", ")), nil)
	if !ok {
		return Searcher{}, false
	}
	var name, sampler, stopper string
	ok = true
	if nn := f.get("name"); nn != nil {
		name, ok = checkName(nn, join(path, "name"), names, "searcher")
	}
	if nn := f.get("sampler"); nn != nil {
		var sok bool
		sampler, sok = checkName(nn, join(path, "sampler"), samplerNames(), "sampler")
		ok = ok && sok
	}
	if nn := f.get("stopper"); nn != nil {
		var sok bool
		stopper, sok = checkName(nn, join(path, "stopper"), stopperNames(), "stopper")
		ok = ok && sok
	}
	if !ok {
		return Searcher{}, false
	}
	if name == "" && sampler == "" && stopper == "" {
		p.missing(f, join(path, "name"), "required (or sampler:); one of %s", strings.Join(names, ", "))
		return Searcher{}, false
	}
	s, ok := p.combine(f.node, name, sampler, stopper)
	if !ok {
		return Searcher{}, false
	}
	defs := []searcherDef{searcherDefs[s.Sampler], searcherDefs[s.Stopper]}
	if s.Sampler == "" {
		defs = []searcherDef{searcherDefs[s.Name]}
	}
	allowed := settingNames(defs...)
	for _, fl := range f.list {
		if fl.name == "name" || fl.name == "sampler" || fl.name == "stopper" {
			continue
		}
		var def setting
		known := false
		for _, d := range defs {
			if sd, ok := d.settings[fl.name]; ok {
				def, known = sd, true
			}
		}
		if !known {
			switch sg := suggest(fl.name, allowed); {
			case sg != "":
				p.at(fl.key, path, "unknown setting %q for searcher %s; did you mean %s?", clip(fl.name), s.Name, sg)
			case len(allowed) == 0:
				p.at(fl.key, path, "unknown setting %q; searcher %s takes no settings", clip(fl.name), s.Name)
			default:
				p.at(fl.key, path, "unknown setting %q for searcher %s (allowed: %s)", clip(fl.name), s.Name, strings.Join(allowed, ", "))
			}
			ok = false
			continue
		}
		v, vok := p.setting(fl.val, join(path, fl.name), def.kind)
		if !vok {
			ok = false
			continue
		}
		if msg := def.check(v); msg != "" {
			p.at(fl.val, join(path, fl.name), "%s; %s", msg, def.help)
			ok = false
			continue
		}
		if s.Settings == nil {
			s.Settings = map[string]any{}
		}
		s.Settings[fl.name] = v
	}
	for _, d := range defs {
		for _, req := range d.required {
			if _, set := s.Settings[req]; !set {
				p.missing(f, join(path, req), "required for %s; %s", s.Name, d.settings[req].help)
				ok = false
			}
		}
		for _, rw := range d.requiredWhen {
			if _, set := s.Settings[rw[0]]; !set && s.Settings[rw[1]] == rw[2] {
				p.missing(f, join(path, rw[0]), "required for %s with %s: %s; %s", s.Name, rw[1], rw[2], d.settings[rw[0]].help)
				ok = false
			}
		}
	}
	for _, d := range defs {
		for _, pair := range d.below {
			lo, hi := s.Int(pair[0], d.defaults[pair[0]]), s.Int(pair[1], 0)
			if !ok || hi == 0 || lo < hi {
				continue
			}
			at, given := f.get(pair[0]), ""
			if at == nil {
				at, given = f.get(pair[1]), fmt.Sprintf(" (%s is %d by default)", pair[0], lo)
			}
			p.at(at, join(path, pair[0]), "must be below %s (got %d >= %d)%s", pair[1], lo, hi, given)
			ok = false
		}
	}
	if ok && searcherDefs[s.Name].role == roleAuto {
		s = AutoSearcher(s.Int("max_resource", 0))
	}
	return s, ok
}

// combine combines a searcher name with an explicit sampler and stopper into a
// Searcher, reporting conflicts at n. Any of the three may be empty.
func (p *parser) combine(n *yaml.Node, name, sampler, stopper string) (Searcher, bool) {
	const path = "searcher"
	switch searcherDefs[name].role {
	case roleSampler:
		if name != "" && sampler != "" && sampler != name {
			p.at(n, path, "name: %s and sampler: %s disagree; keep one", name, sampler)
			return Searcher{}, false
		}
		if name != "" {
			sampler = name
		}
	case roleStopper:
		if stopper != "" && stopper != name {
			p.at(n, path, "name: %s and stopper: %s disagree; keep one", name, stopper)
			return Searcher{}, false
		}
		stopper = name
	case roleWhole, roleAuto:
		if sampler != "" || stopper != "" {
			p.at(n, path, "searcher %s chooses and stops its trials itself; remove sampler: and stopper:", name)
			return Searcher{}, false
		}
		return Searcher{Name: name}, true
	}
	if sampler == "" {
		sampler = DefaultSampler
	}
	if stopper != "" && searcherDefs[sampler].oneTrial {
		p.at(n, path, "the %s sampler runs one trial, which nothing can stop early; choose sampler: random, grid or tpe", sampler)
		return Searcher{}, false
	}
	s := Searcher{Name: sampler, Sampler: sampler, Stopper: stopper}
	if stopper != "" {
		s.Name = sampler + "+" + stopper
	}
	return s, true
}

// setting reads one searcher setting of the given kind.
func (p *parser) setting(n *yaml.Node, path string, kind SettingKind) (any, bool) {
	switch kind {
	case SettingInt:
		return p.integer(n, path)
	case SettingFloat:
		return p.number(n, path)
	case SettingBool:
		return p.boolean(n, path)
	default:
		return p.str(n, path)
	}
}

// objective reads `objective: METRIC` or `objective: {metric: ..., direction: ...}`.
func (p *parser) objective(n *yaml.Node) Objective {
	o := Objective{Direction: Minimize}
	if n.Kind == yaml.ScalarNode {
		o.Metric = p.metric(n, "objective")
		return o
	}
	f, ok := p.mapping(n, "objective", "a metric name or {metric: ..., direction: ...}", objectiveFields)
	if !ok {
		return o
	}
	if m := f.get("metric"); m == nil {
		p.missing(f, "objective.metric", "required; the name of a reported metric, e.g. val_loss")
	} else {
		o.Metric = p.metric(m, "objective.metric")
	}
	if d := f.get("direction"); d != nil {
		if s, ok := p.str(d, "objective.direction"); ok {
			switch Direction(s) {
			case Minimize, Maximize:
				o.Direction = Direction(s)
			default:
				if sg := suggest(s, []string{string(Minimize), string(Maximize)}); sg != "" {
					p.at(d, "objective.direction", "must be minimize or maximize (got %q); did you mean %s?", clip(s), sg)
				} else {
					p.at(d, "objective.direction", "must be minimize or maximize (got %q)", clip(s))
				}
			}
		}
	}
	return o
}

// metric reads a metric name: a non-empty string.
func (p *parser) metric(n *yaml.Node, path string) string {
	s, ok := p.str(n, path)
	if ok && strings.TrimSpace(s) == "" {
		p.at(n, path, "must not be empty; give the name of a reported metric, e.g. val_loss")
		return ""
	}
	return s
}

// resources reads {cpu, memory, gpu} into r, which holds the defaults.
func (p *parser) resources(n *yaml.Node, r *Resources) {
	f, ok := p.mapping(n, "resources", "a mapping like {cpu: 1, memory: 512MiB, gpu: 0}", resourceFields)
	if !ok {
		return
	}
	if c := f.get("cpu"); c != nil {
		if v, ok := p.number(c, "resources.cpu"); ok {
			if v > 0 {
				r.CPU = v
			} else {
				p.at(c, "resources.cpu", "must be > 0 (got %s); fractions like 0.5 are allowed", clip(c.Value))
			}
		}
	}
	if m := f.get("memory"); m != nil {
		if !isScalar(m) || m.ShortTag() == "!!bool" {
			p.at(m, "resources.memory", "expected a size like 512MiB, 2GiB, 1G or a number of MiB, got %s", describe(m))
		} else if v, err := ParseMemory(m.Value); err != nil {
			p.at(m, "resources.memory", "%v", err)
		} else {
			r.MemoryMB = v
		}
	}
	if g := f.get("gpu"); g != nil {
		if v, ok := p.intAtLeast(g, "resources.gpu", 0); ok {
			r.GPU = v
		}
	}
	for _, k := range []struct {
		name string
		dst  *int
	}{{"nodes", &r.Nodes}, {"processes_per_node", &r.ProcessesPerNode}} {
		if g := f.get(k.name); g != nil {
			if v, ok := p.intAtLeast(g, "resources."+k.name, 1); ok {
				if v > MaxNodes {
					p.at(g, "resources."+k.name, "must be at most %d (got %d)", MaxNodes, v)
				} else {
					*k.dst = v
				}
			}
		}
	}
}

// deadline reads a deadline: a duration from submission (36h, 2h30m) or a
// time (RFC 3339, e.g. 2026-11-23T18:00:00Z).
func (p *parser) deadline(n *yaml.Node, path string) (Deadline, bool) {
	if isScalar(n) && n.ShortTag() != "!!float" && n.ShortTag() != "!!bool" {
		if d, err := ParseDuration(n.Value); err == nil {
			if d <= 0 {
				p.at(n, path, "must be positive (got %s)", clip(n.Value))
				return Deadline{}, false
			}
			return Deadline{After: d, Line: n.Line, Col: n.Column}, true
		}
		for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05Z07:00", "2006-01-02 15:04:05", "2006-01-02"} {
			if t, err := time.Parse(layout, n.Value); err == nil {
				if t.Year() < 2000 || t.Year() > 9999 {
					break
				}
				return Deadline{At: t, Line: n.Line, Col: n.Column}, true
			}
		}
	}
	p.at(n, path, "expected a duration from submission like 36h or 2h30m, or a time like 2026-11-23T18:00:00Z, got %s", describe(n))
	return Deadline{}, false
}

// dollars reads an amount of US dollars: a number, or a string like "$250"
// or "250 USD".
func (p *parser) dollars(n *yaml.Node, path string) (float64, bool) {
	v := strings.TrimSpace(n.Value)
	if isScalar(n) && n.ShortTag() == "!!str" {
		v = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(v, "$"), "USD"))
	} else if !isScalar(n) || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") {
		v = ""
	}
	f, err := strconv.ParseFloat(v, 64)
	if v == "" || err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		p.at(n, path, "expected an amount of US dollars like 250, 99.5 or \"$250\", got %s", describe(n))
		return 0, false
	}
	if f <= 0 {
		p.at(n, path, "must be > 0 (got %s); leave it out for no limit", clip(n.Value))
		return 0, false
	}
	return f, true
}
