package spec

import "slices"

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

// searcherDef is what the parser knows about one searcher. The searcher's
// factory in internal/search validates settings' ranges; the parser checks
// names and kinds so every mistake is reported with a position.
type searcherDef struct {
	// settings maps each allowed setting key to its kind.
	settings map[string]SettingKind
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

// searcherDefs is the table of known searchers. Adding a searcher is one entry.
var searcherDefs = map[string]searcherDef{
	"single": {defaultTrials: 1, oneTrial: true, needsDefaults: true},
	"grid":   {needsGrid: true},
	"random": {defaultTrials: 10},
}

// DefaultSearcher is the searcher used when the file has no searcher field.
const DefaultSearcher = "single"

// SearcherNames returns the names of the searchers the file format knows, sorted.
func SearcherNames() []string {
	names := make([]string, 0, len(searcherDefs))
	for n := range searcherDefs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// settingNames returns a searcher's setting keys, sorted.
func (d searcherDef) settingNames() []string {
	names := make([]string, 0, len(d.settings))
	for n := range d.settings {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
