package spec

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// SettingKind is the type of a searcher setting's value.
type SettingKind int

// Setting kinds. Values are stored in Searcher.Settings as int64, float64,
// string and bool respectively.
const (
	SettingInt SettingKind = iota
	SettingFloat
	SettingString
	SettingBool
)

// String names the kind as messages show it.
func (k SettingKind) String() string {
	switch k {
	case SettingInt:
		return "an integer"
	case SettingFloat:
		return "a number"
	case SettingString:
		return "a string"
	case SettingBool:
		return "true or false"
	}
	return "a value"
}

// setting describes one searcher setting: its kind and the values it may take.
type setting struct {
	kind SettingKind
	// min and max bound numbers (inclusive) when hasMin/hasMax.
	min, max       float64
	hasMin, hasMax bool
	// above means the bound min is exclusive.
	above bool
	// oneOf lists the allowed strings.
	oneOf []string
	// help says what the setting means, for messages.
	help string
}

func intAtLeast(lo float64, help string) setting {
	return setting{kind: SettingInt, min: lo, hasMin: true, max: maxSettingInt, hasMax: true, help: help}
}

func intBetween(lo, hi float64, help string) setting {
	return setting{kind: SettingInt, min: lo, hasMin: true, max: hi, hasMax: true, help: help}
}

// maxSettingInt bounds integer settings: steps, trials and counts far
// beyond any search, small enough that no arithmetic on them overflows.
const maxSettingInt = 1<<31 - 1

func fraction(help string) setting {
	return setting{kind: SettingFloat, min: 0, max: 1, hasMin: true, hasMax: true, above: true, help: help}
}

// check returns what is wrong with a setting's value, or "".
func (s setting) check(v any) string {
	var f float64
	show := fmtNum
	switch x := v.(type) {
	case int64:
		f = float64(x)
		show = func(g float64) string {
			if g == f {
				return strconv.FormatInt(x, 10)
			}
			return fmtNum(g)
		}
	case float64:
		f = x
	case string:
		if len(s.oneOf) > 0 && !slices.Contains(s.oneOf, x) {
			return fmt.Sprintf("must be one of %s (got %q)", strings.Join(s.oneOf, ", "), clip(x))
		}
		return ""
	default:
		return ""
	}
	switch {
	case s.hasMin && s.above && f <= s.min:
		return fmt.Sprintf("must be > %s (got %s)", fmtNum(s.min), show(f))
	case s.hasMin && !s.above && f < s.min:
		return fmt.Sprintf("must be >= %s (got %s)", fmtNum(s.min), show(f))
	case s.hasMax && f > s.max:
		return fmt.Sprintf("must be <= %s (got %s)", fmtNum(s.max), show(f))
	}
	return ""
}

// searcherRole says what part of a search a searcherDef plays.
type searcherRole int

const (
	roleSampler searcherRole = iota // chooses hyperparameters
	roleStopper                     // ends or pauses trials early; needs a sampler
	roleWhole                       // does both (pbt)
	roleAuto                        // chooses a sampler and a stopper (auto)
)

// searcherDef is what the parser knows about one searcher. The parser checks
// names, kinds and ranges, so that every mistake is reported with a position;
// the searcher's factory in internal/search reads the values.
type searcherDef struct {
	role searcherRole
	// settings maps each allowed setting key to its description.
	settings map[string]setting
	// required lists settings that must be given.
	required []string
	// requiredWhen lists settings that must be given when another setting
	// has a value: {"max_resource", "mode", "promote"}.
	requiredWhen [][3]string
	// below lists pairs of settings where the first must be below the
	// second when both are known (defaults included): {"min_resource",
	// "max_resource"}.
	below [][2]string
	// defaults holds the defaults that below rules compare with.
	defaults map[string]int64
	// defaultTrials is max_trials when the file omits it; 0 means the grid size.
	defaultTrials int
	// oneTrial means the searcher runs exactly one trial; max_trials may only be 1.
	oneTrial bool
	// needsDefaults means every non-const hyperparameter needs a default.
	needsDefaults bool
	// needsGrid means the search space must be a finite grid; max_trials, if
	// given, caps the grid size.
	needsGrid bool
}

// Settings shared by the rung-based stoppers.
var (
	minResource     = intAtLeast(1, "the step of the first rung")
	maxResource     = intAtLeast(1, "the step at which a trial ends, e.g. its number of epochs")
	reductionFactor = intBetween(2, 1000, "keep the best 1/reduction_factor at each rung")
	rungMode        = setting{kind: SettingString, oneOf: []string{"stop", "promote"}, help: "stop: weak trials are stopped; promote: trials pause at each rung until promoted"}
	graceMode       = setting{kind: SettingString, oneOf: []string{"fixed", "adaptive"}, help: "fixed: trials are first judged at min_resource; adaptive: from there down to the lowest rung that would have kept the best completed trials"}
)

// searcherDefs is the table of known searchers. Adding a searcher is one
// entry. Setting names must not repeat between a sampler and a stopper, so
// that a pair's settings can sit side by side in one mapping.
var searcherDefs = map[string]searcherDef{
	"single": {defaultTrials: 1, oneTrial: true, needsDefaults: true},
	"grid":   {needsGrid: true},
	"random": {defaultTrials: 10},
	"tpe": {defaultTrials: 20, settings: map[string]setting{
		"startup_trials": intAtLeast(0, "random trials before the model is used"),
		"candidates":     intBetween(1, 100000, "candidates drawn per suggestion"),
		"multivariate":   {kind: SettingBool, help: "model the parameters jointly"},
		"gamma":          fraction("the fraction of trials counted as good"),
		"prior_weight":   setting{kind: SettingFloat, min: 0, hasMin: true, above: true, help: "the weight of the prior"},
	}},
	"asha": {role: roleStopper, settings: map[string]setting{
		"mode": rungMode, "min_resource": minResource, "max_resource": maxResource, "reduction_factor": reductionFactor,
		"grace": graceMode,
	}, requiredWhen: [][3]string{{"max_resource", "mode", "promote"}, {"max_resource", "grace", "adaptive"}}, below: [][2]string{{"min_resource", "max_resource"}},
		defaults: map[string]int64{"min_resource": 1}},
	"hyperband": {role: roleStopper, settings: map[string]setting{
		"mode": rungMode, "min_resource": minResource, "max_resource": maxResource, "reduction_factor": reductionFactor,
	}, required: []string{"max_resource"}, below: [][2]string{{"min_resource", "max_resource"}},
		defaults: map[string]int64{"min_resource": 1}},
	"median": {role: roleStopper, settings: map[string]setting{
		"min_trials":   intAtLeast(1, "trials that must have reported a step before any is stopped there"),
		"warmup_steps": intAtLeast(0, "steps of each trial that are never judged"),
	}},
	"curve": {role: roleStopper, settings: map[string]setting{
		"max_resource": maxResource,
		"threshold":    fraction("stop a trial whose probability of beating the best is below this"),
		"min_steps":    intAtLeast(3, "points of a curve before it is extrapolated"),
		"min_trials":   intAtLeast(1, "finished trials before any trial is stopped"),
	}, required: []string{"max_resource"}, below: [][2]string{{"min_steps", "max_resource"}},
		defaults: map[string]int64{"min_steps": 5}},
	"auto": {role: roleAuto, defaultTrials: 20, settings: map[string]setting{
		"max_resource": maxResource,
	}},
	"pbt": {role: roleWhole, defaultTrials: 40, settings: map[string]setting{
		"population":           intAtLeast(2, "trials trained at once"),
		"interval":             intAtLeast(1, "steps between exploit and explore"),
		"max_resource":         maxResource,
		"quantile":             setting{kind: SettingFloat, min: 0, max: 0.5, hasMin: true, hasMax: true, above: true, help: "the fraction of the population replaced, and copied from"},
		"perturb":              setting{kind: SettingFloat, min: 0, max: 1, hasMin: true, hasMax: true, above: true, help: "numbers are multiplied by 1-perturb or 1+perturb"},
		"resample_probability": setting{kind: SettingFloat, min: 0, max: 1, hasMin: true, hasMax: true, help: "probability of drawing a parameter anew instead"},
	}, required: []string{"max_resource"}, below: [][2]string{{"interval", "max_resource"}},
		defaults: map[string]int64{"interval": 4}},
}

// DefaultMinResource is the first rung of asha and hyperband when the file
// sets no min_resource (a grace period, as Ray Tune calls it): two halvings
// below max_resource, max_resource/reduction_factor^2 rounded down, so that
// a trial is first judged after a ninth of its training with the default
// factor 3; at least 2 when max_resource is above 2, as a trainer's first
// report (an untrained network, or one epoch of warm-up) says little of how
// it will end; 1 when max_resource is 1 or 2. Without max_resource (stop mode
// only) it is reduction_factor: rungs at eta, eta^2, ...
func DefaultMinResource(maxResource, eta int64) int64 {
	if eta < 2 {
		return 1
	}
	if maxResource <= 0 {
		return eta
	}
	if maxResource <= 2 {
		return 1
	}
	return max(2, maxResource/(eta*eta))
}

// AutoSearcher is the searcher `searcher: auto` stands for, given its
// max_resource (0 when not set): random sampling with ASHA in promote mode
// and an adaptive grace period (trials are first judged at max_resource/9
// with the default reduction factor 3, and earlier once the completed
// trials show an earlier rung would have kept the best of them); without
// max_resource, which both need, ASHA in stop mode (rungs at 3, 9, 27, ...).
// Of the searchers compared on the tabular benchmarks of bench/search, it is
// the one closest to, or below, Optuna 3.1's best configuration over every
// table and budget (bench/search/README.md). Its name stays auto.
func AutoSearcher(maxResource int64) Searcher {
	s := Searcher{Name: "auto", Sampler: "random", Stopper: "asha"}
	if maxResource > 0 {
		s.Settings = map[string]any{"max_resource": maxResource, "mode": "promote", "grace": "adaptive"}
	}
	return s
}

// DefaultSearcher is the searcher used when the file has no searcher field.
const DefaultSearcher = "single"

// DefaultSampler is the sampler of a stopper named alone (searcher: asha).
const DefaultSampler = "random"

// SearcherNames returns the names of the searchers the file format knows, sorted.
func SearcherNames() []string {
	return defNames(func(searcherDef) bool { return true })
}

func defNames(keep func(searcherDef) bool) []string {
	names := make([]string, 0, len(searcherDefs))
	for n, d := range searcherDefs {
		if keep(d) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

func samplerNames() []string {
	return defNames(func(d searcherDef) bool { return d.role == roleSampler })
}

func stopperNames() []string {
	return defNames(func(d searcherDef) bool { return d.role == roleStopper })
}

// settingNames returns the setting keys of a sampler and stopper, sorted.
func settingNames(defs ...searcherDef) []string {
	var names []string
	for _, d := range defs {
		for n := range d.settings {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}
