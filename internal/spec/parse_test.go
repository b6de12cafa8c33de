package spec

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite testdata/bad/*.want from the parser's output")

// TestBadFiles parses every testdata/bad/NAME.yaml as "NAME.yaml" and compares
// the whole error text with NAME.want.
func TestBadFiles(t *testing.T) {
	goldenErrors(t, "testdata/bad", 30, func(name string, data []byte) (any, error) { return Parse(name, data) })
}

// goldenErrors parses every DIR/NAME.yaml (at least least of them) as
// "NAME.yaml" with parse, which must fail with a *spec.Error naming that
// file, and compares the whole error text with DIR/NAME.want (-update
// rewrites them).
func goldenErrors(t *testing.T, dir string, least int, parse func(name string, data []byte) (any, error)) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < least {
		t.Fatalf("want at least %d bad files in %s, found %d", least, dir, len(files))
	}
	for _, file := range files {
		name := filepath.Base(file)
		t.Run(strings.TrimSuffix(name, ".yaml"), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			v, err := parse(name, data)
			if err == nil {
				t.Fatalf("parsing succeeded, want an error; got %+v", v)
			}
			var perr *Error
			if !errors.As(err, &perr) {
				t.Fatalf("error is %T, want *spec.Error: %v", err, err)
			}
			for _, p := range perr.Problems {
				if p.File != name {
					t.Errorf("problem %q names file %q, want %q", p.Msg, p.File, name)
				}
			}
			got := err.Error() + "\n"
			wantFile := strings.TrimSuffix(file, ".yaml") + ".want"
			if *update {
				if err := os.WriteFile(wantFile, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(wantFile)
			if err != nil {
				t.Fatalf("reading golden (run with -update to create it): %v", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("error text mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGoodFiles(t *testing.T) {
	dir, err := filepath.Abs("testdata/good")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		file string
		want *Experiment // the parsed experiment, defaults applied
	}{
		{
			file: "full.yaml",
			want: &Experiment{
				Name:        "digits-mlp",
				Description: "free text",
				Entrypoint: Entrypoint{
					Argv:    []string{"go", "run", "./examples/digits-go", "--lr=${lr}"},
					Workdir: filepath.Dir(filepath.Dir(dir)),
					Env:     map[string]string{"OMP_NUM_THREADS": "1", "HIDDEN": "${hidden}", "DEBUG": "true", "RATIO": "1.50"},
				},
				Hyperparameters: map[string]*Hyperparameter{
					"lr":     {Name: "lr", Type: HPFloat, Min: 1e-4, Max: 0.3, Log: true, Default: 0.01},
					"hidden": {Name: "hidden", Type: HPInt, Min: 16, Max: 128, Count: 4},
					"act":    {Name: "act", Type: HPCategorical, Values: []any{"relu", "tanh"}, Default: "tanh"},
					"epochs": {Name: "epochs", Type: HPConst, Value: int64(20)},
					"batch":  {Name: "batch", Type: HPConst, Value: int64(32)},
				},
				Order:         []string{"lr", "hidden", "act", "epochs", "batch"},
				Searcher:      Searcher{Name: "random", Sampler: "random"},
				Objective:     Objective{Metric: "val_loss", Direction: Maximize},
				MaxTrials:     20,
				MaxConcurrent: 4,
				MaxRestarts:   0,
				Timeout:       Duration(30 * time.Minute),
				StopGrace:     Duration(90 * time.Second),
				Resources:     Resources{CPU: 0.5, MemoryMB: 2048, GPU: 1, Nodes: 1, ProcessesPerNode: 1},
				Checkpoints:   Checkpoints{KeepLast: 3},
				Seed:          42,
			},
		},
		{
			file: "minimal.yaml",
			want: &Experiment{
				Name:            "m1",
				Entrypoint:      Entrypoint{Argv: []string{"python3", "train.py"}, Workdir: dir},
				Hyperparameters: map[string]*Hyperparameter{},
				Order:           []string{},
				Searcher:        Searcher{Name: "single", Sampler: "single"},
				Objective:       Objective{Metric: "loss", Direction: Minimize},
				MaxTrials:       1,
				MaxConcurrent:   1,
				MaxRestarts:     3,
				StopGrace:       Duration(120 * time.Second),
				Resources:       Resources{CPU: 1, Nodes: 1, ProcessesPerNode: 1},
				Checkpoints:     Checkpoints{KeepLast: 2},
			},
		},
		{
			file: "api_driven.yaml",
			want: &Experiment{
				Name: "ask-tell",
				Hyperparameters: map[string]*Hyperparameter{
					"x": {Name: "x", Type: HPFloat, Min: -5, Max: 5},
					"y": {Name: "y", Type: HPInt, Min: 0, Max: 10, Log: false},
				},
				Order:         []string{"x", "y"},
				Searcher:      Searcher{Name: "random", Sampler: "random"},
				Objective:     Objective{Metric: "score", Direction: Maximize},
				MaxTrials:     10,
				MaxConcurrent: 1,
				MaxRestarts:   3,
				StopGrace:     Duration(120 * time.Second),
				Resources:     Resources{CPU: 1, MemoryMB: 954, Nodes: 1, ProcessesPerNode: 1},
				Checkpoints:   Checkpoints{KeepLast: 2},
				Seed:          18446744073709551615,
			},
		},
		{
			file: "grid.yaml",
			want: &Experiment{
				Name: "grid.search_1",
				Entrypoint: Entrypoint{
					Argv:    []string{"sh", "-c", "echo ${lr} $${HOME} > out", "it's", "--act=${act}"},
					Workdir: "/tmp/work",
				},
				Hyperparameters: map[string]*Hyperparameter{
					"lr":     {Name: "lr", Type: HPFloat, Min: 0.001, Max: 0.1, Log: true, Count: 3},
					"layers": {Name: "layers", Type: HPInt, Min: 1, Max: 4},
					"act":    {Name: "act", Type: HPCategorical, Values: []any{"relu", int64(1), 2.5, true}},
					"seed":   {Name: "seed", Type: HPConst, Value: "abc"},
				},
				Order:         []string{"lr", "layers", "act", "seed"},
				Searcher:      Searcher{Name: "grid", Sampler: "grid"},
				Objective:     Objective{Metric: "val_loss", Direction: Minimize},
				MaxTrials:     48,
				MaxConcurrent: 2,
				MaxRestarts:   3,
				Timeout:       Duration(90 * time.Second),
				StopGrace:     Duration(120 * time.Second),
				Resources:     Resources{CPU: 2, MemoryMB: 512, Nodes: 1, ProcessesPerNode: 1},
				Checkpoints:   Checkpoints{KeepLast: 2},
			},
		},
		{
			file: "grid_capped.yaml",
			want: &Experiment{
				Name:       "capped",
				Entrypoint: Entrypoint{Argv: []string{"./train"}, Workdir: filepath.Join(dir, "sub")},
				Hyperparameters: map[string]*Hyperparameter{
					"a": {Name: "a", Type: HPInt, Min: 1, Max: 1000, Count: 50, Default: int64(7)},
					"b": {Name: "b", Type: HPFloat, Min: 0, Max: 1},
				},
				Order:         []string{"a", "b"},
				Searcher:      Searcher{Name: "grid", Sampler: "grid"},
				Objective:     Objective{Metric: "loss", Direction: Minimize},
				MaxTrials:     100,
				MaxConcurrent: 1,
				MaxRestarts:   3,
				StopGrace:     Duration(120 * time.Second),
				Resources:     Resources{CPU: 1, Nodes: 1, ProcessesPerNode: 1},
				Checkpoints:   Checkpoints{KeepLast: 2},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, data, err := Load(filepath.Join("testdata/good", tt.file))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if len(data) == 0 {
				t.Error("Load returned no bytes")
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("parsed experiment mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEveryGoodFileIsTested(t *testing.T) {
	files, err := filepath.Glob("testdata/good/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, _, err := Load(f); err != nil {
			t.Errorf("%v", err)
		}
	}
}

func TestShortForms(t *testing.T) {
	e, err := Parse("x/short.yaml", []byte(`
name: s
entrypoint: "python3 'my script.py' --lr ${lr} \"a b\" c\\ d"
hyperparameters:
  lr: {type: float, min: 0.1, max: 1, default: 0.5}
searcher: {name: single}
objective: acc
`))
	if err != nil {
		t.Fatal(err)
	}
	wantArgv := []string{"python3", "my script.py", "--lr", "${lr}", "a b", "c d"}
	if diff := cmp.Diff(wantArgv, e.Entrypoint.Argv); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
	wantDir, _ := filepath.Abs("x")
	if e.Entrypoint.Workdir != wantDir {
		t.Errorf("workdir = %q, want %q", e.Entrypoint.Workdir, wantDir)
	}
	if e.Objective != (Objective{Metric: "acc", Direction: Minimize}) {
		t.Errorf("objective = %+v", e.Objective)
	}
	if e.DriveByAPI() {
		t.Error("DriveByAPI() = true for an experiment with an entrypoint")
	}
}

func TestSearcherSettingsTable(t *testing.T) {
	// A searcher with settings is one table entry; exercise the kinds with a
	// temporary one.
	searcherDefs["test"] = searcherDef{defaultTrials: 7, settings: map[string]setting{
		"rungs": {kind: SettingInt}, "eta": {kind: SettingFloat}, "mode": {kind: SettingString}, "early": {kind: SettingBool},
	}}
	defer delete(searcherDefs, "test")

	e, err := Parse("s.yaml", []byte("name: s\nobjective: l\nsearcher: {name: test, rungs: 3, eta: 2, mode: fast, early: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Searcher{Name: "test", Sampler: "test", Settings: map[string]any{"rungs": int64(3), "eta": 2.0, "mode": "fast", "early": true}}
	if diff := cmp.Diff(want, e.Searcher); diff != "" {
		t.Errorf("searcher (-want +got):\n%s", diff)
	}
	if e.MaxTrials != 7 {
		t.Errorf("MaxTrials = %d, want the table default 7", e.MaxTrials)
	}

	_, err = Parse("s.yaml", []byte("name: s\nobjective: l\nsearcher: {name: test, rung: 3, eta: fast}\n"))
	want2 := "s.yaml:3:24: searcher: unknown setting \"rung\" for searcher test; did you mean rungs?\n" +
		"s.yaml:3:38: searcher.eta: expected a number, got the string \"fast\""
	if err == nil || err.Error() != want2 {
		t.Errorf("error:\n%v\nwant:\n%s", err, want2)
	}
}

func TestTooLarge(t *testing.T) {
	data := []byte("name: big\nobjective: l\ndescription: " + strings.Repeat("x", MaxFileSize) + "\n")
	_, err := Parse("big.yaml", data)
	want := "big.yaml: file is over 1048576 bytes (1 MiB); an experiment file must be smaller"
	if err == nil || err.Error() != want {
		t.Errorf("error = %v, want %q", err, want)
	}

	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, got, err := Load(path); err == nil || len(got) != MaxFileSize+1 {
		t.Errorf("Load: err = %v, read %d bytes; want an error after reading at most %d", err, len(got), MaxFileSize+1)
	}
}

func TestLoadMissing(t *testing.T) {
	_, _, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("error = %v, want one wrapping os.ErrNotExist", err)
	}
}

func TestTooManyProblems(t *testing.T) {
	var b strings.Builder
	b.WriteString("name: s\nobjective: l\n")
	for i := 0; i < 2*maxProblems; i++ {
		b.WriteString("bogus" + strings.Repeat("x", i) + ": 1\n")
	}
	_, err := Parse("m.yaml", []byte(b.String()))
	var perr *Error
	if !errors.As(err, &perr) {
		t.Fatalf("error = %v, want *Error", err)
	}
	if len(perr.Problems) != maxProblems+1 {
		t.Fatalf("got %d problems, want %d plus a final note", len(perr.Problems), maxProblems)
	}
	if last := perr.Problems[maxProblems]; !strings.Contains(last.Msg, "too many problems") {
		t.Errorf("last problem = %q, want the too-many note", last.Msg)
	}
}

func TestAliasBombIsCheap(t *testing.T) {
	// The classic billion-laughs shape: refused on the first alias, never expanded.
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 30; i++ {
		b.WriteString("a" + itoa(i) + ": &a" + itoa(i) + " [")
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a" + itoa(i-1))
		}
		b.WriteString("]\n")
	}
	start := time.Now()
	_, err := Parse("bomb.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "aliases (*a0) are not supported") {
		t.Errorf("error = %v, want aliases refused", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Parse took %v on an alias bomb", d)
	}
}

func itoa(i int) string { return FormatValue(i) }

func TestProblemString(t *testing.T) {
	tests := []struct {
		p    Problem
		want string
	}{
		{Problem{File: "e.yaml", Line: 12, Col: 5, Path: "hyperparameters.lr.max", Msg: "must be > min"}, "e.yaml:12:5: hyperparameters.lr.max: must be > min"},
		{Problem{File: "e.yaml", Line: 3, Msg: "invalid YAML: x"}, "e.yaml:3: invalid YAML: x"},
		{Problem{File: "e.yaml", Msg: "file is empty"}, "e.yaml: file is empty"},
	}
	for _, tt := range tests {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

func TestSuggest(t *testing.T) {
	tests := []struct {
		word string
		want string
	}{
		{"max_trails", "max_trials"},
		{"Max_Trials", "max_trials"},
		{"timout", "timeout"},
		{"nmae", "name"},
		{"colour", ""},
		{"foo", ""},
		{"", ""},
	}
	for _, tt := range tests {
		if got := suggest(tt.word, topFields); got != tt.want {
			t.Errorf("suggest(%q) = %q, want %q", tt.word, got, tt.want)
		}
	}
}

func TestSearcherForms(t *testing.T) {
	const head = "name: s\nobjective: l\nhyperparameters: {lr: {type: float, min: 0.001, max: 0.1, log: true}}\n"
	tests := []struct {
		searcher string
		want     Searcher
		trials   int
	}{
		{"tpe", Searcher{Name: "tpe", Sampler: "tpe"}, 20},
		{"asha", Searcher{Name: "random+asha", Sampler: "random", Stopper: "asha"}, 10},
		{"{name: asha, sampler: tpe, reduction_factor: 4}", Searcher{Name: "tpe+asha", Sampler: "tpe", Stopper: "asha",
			Settings: map[string]any{"reduction_factor": int64(4)}}, 20},
		{"{sampler: tpe, stopper: asha, mode: promote, max_resource: 27, startup_trials: 5}", Searcher{Name: "tpe+asha", Sampler: "tpe", Stopper: "asha",
			Settings: map[string]any{"mode": "promote", "max_resource": int64(27), "startup_trials": int64(5)}}, 20}, // tpe's 20 > 2 x 3^2 rungs (at 3 and 9, the default grace period)
		{"{sampler: tpe, stopper: asha, mode: promote, max_resource: 27, min_resource: 1}", Searcher{Name: "tpe+asha", Sampler: "tpe", Stopper: "asha",
			Settings: map[string]any{"mode": "promote", "max_resource": int64(27), "min_resource": int64(1)}}, 54}, // 2 x 3^3 rungs
		{"{stopper: curve, max_resource: 30, threshold: 0.05}", Searcher{Name: "random+curve", Sampler: "random", Stopper: "curve",
			Settings: map[string]any{"max_resource": int64(30), "threshold": 0.05}}, 10},
		{"{name: tpe, stopper: median}", Searcher{Name: "tpe+median", Sampler: "tpe", Stopper: "median"}, 20},
		{"{name: pbt, population: 4, max_resource: 20}", Searcher{Name: "pbt",
			Settings: map[string]any{"population": int64(4), "max_resource": int64(20)}}, 40},
	}
	for _, tt := range tests {
		e, err := Parse("s.yaml", []byte(head+"searcher: "+tt.searcher+"\n"))
		if err != nil {
			t.Errorf("searcher: %s: %v", tt.searcher, err)
			continue
		}
		if diff := cmp.Diff(tt.want, e.Searcher); diff != "" {
			t.Errorf("searcher: %s (-want +got):\n%s", tt.searcher, diff)
		}
		if e.MaxTrials != tt.trials {
			t.Errorf("searcher: %s: max_trials %d, want %d", tt.searcher, e.MaxTrials, tt.trials)
		}
	}
}

func TestSamplerAndStopperSettingsDoNotCollide(t *testing.T) {
	for _, sm := range samplerNames() {
		for _, st := range stopperNames() {
			for k := range searcherDefs[sm].settings {
				if _, dup := searcherDefs[st].settings[k]; dup {
					t.Errorf("setting %q belongs to both sampler %s and stopper %s", k, sm, st)
				}
			}
		}
	}
}

func TestDeadlineAndBudget(t *testing.T) {
	for _, c := range []struct {
		deadline, budget string
		after            time.Duration
		at               time.Time
		dollars          float64
	}{
		{"36h", "250", 36 * time.Hour, time.Time{}, 250},
		{"2h30m", `"$99.50"`, 150 * time.Minute, time.Time{}, 99.5},
		{"2026-11-23T18:00:00Z", `"12 USD"`, 0, time.Date(2026, 11, 23, 18, 0, 0, 0, time.UTC), 12},
		{`"2026-11-23T18:00:00+01:00"`, "0.5", 0, time.Date(2026, 11, 23, 17, 0, 0, 0, time.UTC), 0.5},
	} {
		src := "name: exp\nobjective: loss\ndeadline: " + c.deadline + "\nbudget: " + c.budget + "\n"
		e, err := Parse("exp.yaml", []byte(src))
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if time.Duration(e.Deadline.After) != c.after || !e.Deadline.At.Equal(c.at) || e.Budget != c.dollars {
			t.Errorf("%s: got deadline %+v budget %v", src, e.Deadline, e.Budget)
		}
		sub := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
		want := c.at
		if c.after != 0 {
			want = sub.Add(c.after)
		}
		if got := e.Deadline.Time(sub); !got.Equal(want) {
			t.Errorf("%s: deadline time %s, want %s", src, got, want)
		}
	}
}

// TestQuotedBigNumbersAreStrings: a number beyond a float64 is an error only
// when written as a number; quoted or tagged !!str it is the string written.
func TestQuotedBigNumbersAreStrings(t *testing.T) {
	e, err := Parse("q.yaml", []byte("name: q\nobjective: l\nhyperparameters:\n  a: \"-1e400\"\n  b: !!str 1e400\n  c: 1e-400\n"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]any{"a": "-1e400", "b": "1e400", "c": 0.0} {
		if got := e.Hyperparameters[name].Value; got != want {
			t.Errorf("%s = %#v, want %#v", name, got, want)
		}
	}
}

func TestDefaultMinResource(t *testing.T) {
	for _, tt := range []struct{ max, eta, want int64 }{
		{27, 3, 3}, {81, 3, 9}, {100, 3, 11}, {10, 3, 2}, {9, 3, 2}, {3, 3, 2}, {2, 3, 1}, {1, 3, 1},
		{64, 4, 4}, {0, 3, 3}, {0, 4, 4},
	} {
		if got := DefaultMinResource(tt.max, tt.eta); got != tt.want {
			t.Errorf("DefaultMinResource(%d, %d) = %d, want %d", tt.max, tt.eta, got, tt.want)
		}
	}
}

// TestSearcherAuto: searcher auto stands for the combination AutoSearcher
// names, with or without max_resource, and takes no sampler or stopper.
func TestSearcherAuto(t *testing.T) {
	const head = "name: x\nobjective: loss\nhyperparameters: {lr: {type: float, min: 0.001, max: 0.1, log: true}}\n"
	for _, tt := range []struct {
		searcher string
		want     Searcher
	}{
		{"auto", Searcher{Name: "auto", Sampler: "random", Stopper: "asha"}},
		{"{name: auto}", Searcher{Name: "auto", Sampler: "random", Stopper: "asha"}},
		{"{name: auto, max_resource: 27}", Searcher{Name: "auto", Sampler: "random", Stopper: "asha",
			Settings: map[string]any{"max_resource": int64(27), "mode": "promote", "grace": "adaptive"}}},
	} {
		e, err := Parse("s.yaml", []byte(head+"searcher: "+tt.searcher+"\n"))
		if err != nil {
			t.Errorf("searcher: %s: %v", tt.searcher, err)
			continue
		}
		if diff := cmp.Diff(tt.want, e.Searcher); diff != "" {
			t.Errorf("searcher: %s (-want +got):\n%s", tt.searcher, diff)
		}
		if e.MaxTrials != 20 {
			t.Errorf("searcher: %s: max_trials %d, want 20", tt.searcher, e.MaxTrials)
		}
	}
	for searcher, want := range map[string]string{
		"{name: auto, stopper: asha}":     "searcher auto chooses and stops its trials itself",
		"{name: auto, max_resource: 0}":   "searcher.max_resource: must be >= 1",
		"{name: auto, threshold: 0.1}":    `unknown setting "threshold" for searcher auto (allowed: max_resource)`,
		"{name: auto, max_resource: two}": "searcher.max_resource: expected an integer",
	} {
		_, err := Parse("s.yaml", []byte(head+"searcher: "+searcher+"\n"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("searcher: %s: error %v, want one containing %q", searcher, err, want)
		}
	}
}

// TestSearcherGrace: asha takes grace fixed or adaptive; adaptive needs
// max_resource, the step at which completed trials' final values are known.
func TestSearcherGrace(t *testing.T) {
	const head = "name: x\nobjective: loss\nhyperparameters: {lr: {type: float, min: 0.001, max: 0.1, log: true}}\n"
	e, err := Parse("s.yaml", []byte(head+"searcher: {sampler: random, stopper: asha, max_resource: 27, grace: adaptive}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if g := e.Searcher.Text("grace", "fixed"); g != "adaptive" {
		t.Errorf("grace %q, want adaptive", g)
	}
	for searcher, want := range map[string]string{
		"{sampler: random, stopper: asha, grace: adaptive}":                        "max_resource",
		"{sampler: random, stopper: asha, max_resource: 27, grace: sometimes}":     "adaptive",
		"{sampler: random, stopper: hyperband, max_resource: 27, grace: adaptive}": `unknown setting "grace"`,
	} {
		_, err := Parse("s.yaml", []byte(head+"searcher: "+searcher+"\n"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("searcher: %s: error %v, want one containing %q", searcher, err, want)
		}
	}
}
