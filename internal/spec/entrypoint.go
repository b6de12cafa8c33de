package spec

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

const entrypointExample = `a command list like [python3, train.py], a command string like "python3 train.py", or {command: ..., workdir: ..., env: ...}`

// entrypoint reads the three forms: a list, a string, or a mapping with
// command, workdir and env. declared lists the hyperparameter names that
// placeholders may use.
func (p *parser) entrypoint(n *yaml.Node, declared []string) Entrypoint {
	const path = "entrypoint"
	var ep Entrypoint
	switch {
	case n.Kind == yaml.SequenceNode || isScalar(n):
		ep.Argv = p.command(n, path, declared)
	case n.Kind == yaml.MappingNode:
		f, _ := p.mapping(n, path, entrypointExample, entrypointFields)
		if c := f.get("command"); c == nil {
			p.missing(f, join(path, "command"), `required; a list like [python3, train.py] or a string like "python3 train.py"`)
		} else {
			ep.Argv = p.command(c, join(path, "command"), declared)
		}
		if w := f.get("workdir"); w != nil {
			if s, ok := p.str(w, join(path, "workdir")); ok {
				ep.Workdir = s
			}
		}
		if en := f.get("env"); en != nil {
			ep.Env = p.env(en, join(path, "env"), declared)
		}
	default:
		p.at(n, path, "expected %s, got %s; to drive trials through the API, leave entrypoint out", entrypointExample, describe(n))
		return ep
	}
	switch {
	case ep.Workdir == "":
		ep.Workdir = p.dir
	case !filepath.IsAbs(ep.Workdir):
		ep.Workdir = filepath.Join(p.dir, ep.Workdir)
	default:
		ep.Workdir = filepath.Clean(ep.Workdir)
	}
	return ep
}

// command reads a command list or a command string split like a shell would.
func (p *parser) command(n *yaml.Node, path string, declared []string) []string {
	var argv []string
	switch {
	case n.Kind == yaml.SequenceNode:
		ok := true
		for i, a := range n.Content {
			apath := fmt.Sprintf("%s[%d]", path, i)
			if !isScalar(a) {
				p.at(a, apath, "expected a string, got %s", describe(a))
				ok = false
				continue
			}
			p.placeholders(a, apath, a.Value, declared)
			argv = append(argv, a.Value)
		}
		if !ok {
			return nil
		}
	case isScalar(n):
		words, err := splitCommand(n.Value)
		if err != nil {
			p.at(n, path, "%v", err)
			return nil
		}
		for _, w := range words {
			p.placeholders(n, path, w, declared)
		}
		argv = words
	default:
		p.at(n, path, "expected a command list like [python3, train.py] or a string like \"python3 train.py\", got %s", describe(n))
		return nil
	}
	if len(argv) == 0 {
		p.at(n, path, "must not be empty; e.g. [python3, train.py]")
		return nil
	}
	if argv[0] == "" {
		p.at(n, path, "the program name (first word) must not be empty")
		return nil
	}
	return argv
}

// env reads the environment mapping; values may be numbers or booleans and
// are kept as written.
func (p *parser) env(n *yaml.Node, path string, declared []string) map[string]string {
	f, ok := p.mapping(n, path, `a mapping like {OMP_NUM_THREADS: "1"}`, nil)
	if !ok {
		return nil
	}
	env := map[string]string{}
	for _, fl := range f.list {
		vpath := join(path, fl.name)
		switch {
		case !envNamePattern.MatchString(fl.name):
			p.at(fl.key, path, "%q is not a valid variable name; use letters, digits and '_', not starting with a digit", clip(fl.name))
			continue
		case strings.HasPrefix(fl.name, "VIRGA_"):
			p.at(fl.key, vpath, "names starting with VIRGA_ are set by Virga; choose another name")
			continue
		case !isScalar(fl.val):
			p.at(fl.val, vpath, "expected a string (numbers and booleans are taken as written), got %s", describe(fl.val))
			continue
		}
		p.placeholders(fl.val, vpath, fl.val.Value, declared)
		env[fl.name] = fl.val.Value
	}
	return env
}

// placeholders checks that every ${name} in s names a declared hyperparameter.
func (p *parser) placeholders(n *yaml.Node, path, s string, declared []string) {
	_, err := expand(s, func(name string) (string, error) {
		if contains(declared, name) {
			return "", nil
		}
		switch sg := suggest(name, declared); {
		case len(declared) == 0:
			p.at(n, path, "${%s} names no hyperparameter (none are defined; write $${ for a literal ${)", clip(name))
		case sg != "":
			p.at(n, path, "${%s} names no hyperparameter; did you mean ${%s}? (defined: %s)", clip(name), sg, strings.Join(declared, ", "))
		default:
			p.at(n, path, "${%s} names no hyperparameter (defined: %s)", clip(name), strings.Join(declared, ", "))
		}
		return "", nil
	})
	if err != nil {
		p.at(n, path, "%v", err)
	}
}

// searchSpace checks the hyperparameters against the searcher and sets
// MaxTrials. maxTrials is the file's value (0 when absent or invalid).
func (p *parser) searchSpace(e *Experiment, searcherNode, maxTrialsNode *yaml.Node, maxTrials int) {
	key := e.Searcher.Sampler
	if key == "" || searcherDefs[e.Searcher.Name].role == roleAuto {
		key = e.Searcher.Name
	}
	def := searcherDefs[key]
	which := fmt.Sprintf("the %s searcher", e.Searcher.Name)
	if searcherNode == nil {
		which = fmt.Sprintf("the %s searcher (used as searcher is not set)", e.Searcher.Name)
	}
	complete := true
	for _, name := range e.Order {
		h := e.Hyperparameters[name]
		path := join("hyperparameters", name)
		if def.needsDefaults && h.Type != HPConst && h.Default == nil {
			p.at(p.hpNodes[name], path, "needs a default for %s, which runs one trial with every default; add default: or choose searcher: random", which)
		}
		if def.needsGrid && h.Type == HPInt && h.Count == 0 {
			if span := math.Floor(h.Max) - math.Ceil(h.Min) + 1; span > MaxImplicitIntPoints {
				p.at(p.hpNodes[name], path, "spans %s integers, too many for %s without count; add count: (grid points, e.g. count: 10)", fmtNum(span), which)
				complete = false
			}
		}
	}
	switch {
	case def.oneTrial:
		if maxTrialsNode != nil && maxTrials > 1 {
			p.at(maxTrialsNode, "max_trials", "must be 1 for %s, which runs one trial (got %d); choose searcher: random or grid for more", which, maxTrials)
		}
		e.MaxTrials = 1
	case def.needsGrid:
		if !complete || len(e.Hyperparameters) != len(p.hpNodes) {
			return // the grid is unknown; its problems are reported already
		}
		g := e.GridSize()
		switch {
		case g == 1:
			// Nothing to search: a grid of one point would run one trial
			// whatever max_trials says.
			p.at(searcherNode, "searcher", "the grid has one point, as no hyperparameter varies%s; give one a range or several values, "+
				"e.g. lr: {type: float, min: 0.001, max: 0.1}, or choose searcher: single to run one trial", constantsNote(e))
		case maxTrials > 0:
			e.MaxTrials = min(maxTrials, g)
		case maxTrialsNode != nil:
			// max_trials was given but is invalid; reported already.
		case g > maxGridTrials:
			size := fmt.Sprintf("%d points", g)
			if g == math.MaxInt {
				size = "too many points to count"
			}
			p.at(searcherNode, "searcher", "the grid has %s (more than %d); set max_trials to run only the first ones, or lower the counts", size, maxGridTrials)
		default:
			e.MaxTrials = g
		}
	case maxTrials > 0:
		e.MaxTrials = maxTrials
	default:
		e.MaxTrials = max(def.defaultTrials, rungTrials(e.Searcher))
	}
}

// constantsNote names the hyperparameters of a grid of one point, which
// each hold one value, for its message.
func constantsNote(e *Experiment) string {
	switch len(e.Order) {
	case 0:
		return " (none is defined)"
	case 1:
		return fmt.Sprintf(" (%s has one value)", e.Order[0])
	}
	return fmt.Sprintf(" (%s each have one value)", strings.Join(e.Order, ", "))
}

// rungTrials is the default max_trials of a rung stopper (asha, hyperband)
// that knows its max_resource: twice reduction_factor^rungs, so that a few
// trials can climb every rung to the end. 0 for other searchers.
func rungTrials(s Searcher) int {
	if s.Stopper != "asha" && s.Stopper != "hyperband" {
		return 0
	}
	hi, eta := s.Int("max_resource", 0), s.Int("reduction_factor", 3)
	lo := s.Int("min_resource", DefaultMinResource(hi, eta))
	if hi <= 0 || lo < 1 || eta < 2 {
		return 0
	}
	n := int64(2)
	for r := lo; r < hi && n < maxDefaultRungTrials; r *= eta {
		n *= eta
	}
	return int(min(n, maxDefaultRungTrials))
}

// maxDefaultRungTrials caps rungTrials.
const maxDefaultRungTrials = 10000
