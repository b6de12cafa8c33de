package virga

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	allTrialStates = []TrialState{"", TrialQueued, TrialRunning, TrialPaused, TrialCompleted, TrialStopped, TrialFailed}
	allExpStates   = []ExperimentState{"", ExperimentActive, ExperimentPaused, ExperimentStopping,
		ExperimentCompleted, ExperimentStopped, ExperimentFailed}
)

// TestTrialTransitions checks every pair of trial states against the
// transitions Virga makes, and nothing else.
func TestTrialTransitions(t *testing.T) {
	// want lists every allowed transition, with where Virga makes it.
	want := map[[2]TrialState]string{
		{"", TrialQueued}:              "a searcher's proposal creates it",
		{TrialQueued, TrialRunning}:    "an attempt is created",
		{TrialQueued, TrialStopped}:    "its experiment is stopped (user or budget)",
		{TrialRunning, TrialRunning}:   "the searcher pauses or stops it, the policy moves it: its attempt stops",
		{TrialRunning, TrialQueued}:    "restart, preemption, move, no capacity, resumed before its pause ended",
		{TrialRunning, TrialPaused}:    "paused by the searcher or with its experiment",
		{TrialRunning, TrialCompleted}: "its attempt succeeded",
		{TrialRunning, TrialStopped}:   "stopped early, by a user or for the budget",
		{TrialRunning, TrialFailed}:    "failed more than max_restarts times",
		{TrialPaused, TrialQueued}:     "resumed by a user or promoted by the searcher",
		{TrialPaused, TrialStopped}:    "its experiment is stopped, or the search ended without promoting it",
	}
	for _, from := range allTrialStates {
		for _, to := range allTrialStates {
			_, ok := want[[2]TrialState{from, to}]
			if got := from.CanBecome(to); got != ok {
				t.Errorf("%q.CanBecome(%q) = %v, want %v", from, to, got, ok)
			}
		}
	}
}

// TestExperimentTransitions checks every pair of experiment states against
// the transitions Virga makes, and nothing else.
func TestExperimentTransitions(t *testing.T) {
	want := map[[2]ExperimentState]string{
		{"", ExperimentActive}:                   "submitted",
		{ExperimentActive, ExperimentPaused}:     "a user pauses it",
		{ExperimentActive, ExperimentStopping}:   "a user or its budget stops it",
		{ExperimentActive, ExperimentCompleted}:  "the search ended with a result",
		{ExperimentActive, ExperimentFailed}:     "the search ended without one, unschedulable, unrecoverable",
		{ExperimentPaused, ExperimentActive}:     "a user resumes it",
		{ExperimentPaused, ExperimentStopping}:   "a user or its budget stops it",
		{ExperimentPaused, ExperimentFailed}:     "unrecoverable after a restart",
		{ExperimentStopping, ExperimentStopping}: "a user's stop overrides the budget's",
		{ExperimentStopping, ExperimentStopped}:  "its last attempt ended",
		{ExperimentStopping, ExperimentFailed}:   "unrecoverable after a restart",
	}
	for _, from := range allExpStates {
		for _, to := range allExpStates {
			_, ok := want[[2]ExperimentState{from, to}]
			if got := from.CanBecome(to); got != ok {
				t.Errorf("%q.CanBecome(%q) = %v, want %v", from, to, got, ok)
			}
		}
	}
}

func TestTrialTransitionRefusesIllegal(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tr := &Trial{ID: 3, State: TrialCompleted, Reason: ReasonSucceeded, Message: "done", EndedAt: now}
	before := *tr
	err := tr.Transition(TrialQueued, ReasonResumedByUser, "resumed by user", now.Add(time.Hour))
	if !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("COMPLETED to QUEUED: error %v, want one wrapping ErrIllegalTransition", err)
	}
	if tr.State != before.State || tr.Reason != before.Reason || tr.Message != before.Message || !tr.EndedAt.Equal(before.EndedAt) {
		t.Errorf("a refused transition changed the trial: %+v, was %+v", tr, before)
	}

	tr = &Trial{ID: 4, State: TrialRunning}
	if err := tr.Transition(TrialRunning, ReasonPausingBySearcher, "pausing", now); err != nil {
		t.Fatalf("RUNNING to RUNNING: %v", err)
	}
	if tr.Reason != ReasonPausingBySearcher || !tr.EndedAt.IsZero() {
		t.Errorf("after pausing: reason %q, ended %v", tr.Reason, tr.EndedAt)
	}
	if err := tr.Transition(TrialStopped, ReasonStoppedEarly, "stopped", now); err != nil {
		t.Fatalf("RUNNING to STOPPED: %v", err)
	}
	if tr.State != TrialStopped || tr.Reason != ReasonStoppedEarly || !tr.EndedAt.Equal(now) {
		t.Errorf("after stopping: %s %q, ended %v; want STOPPED StoppedEarly ended %v", tr.State, tr.Reason, tr.EndedAt, now)
	}
}

func TestExperimentTransitionRefusesIllegal(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	e := &Experiment{ID: 2, State: ExperimentStopping, Reason: ReasonBudgetSpent, Message: "budget of $1.00 reached"}
	before := *e
	err := e.Transition(ExperimentActive, ReasonNone, "", now)
	if !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("STOPPING to ACTIVE: error %v, want one wrapping ErrIllegalTransition", err)
	}
	if e.State != before.State || e.Reason != before.Reason || e.Message != before.Message || !e.EndedAt.IsZero() {
		t.Errorf("a refused transition changed the experiment: %+v, was %+v", e, before)
	}
	if err := e.Transition(ExperimentStopped, ReasonBudgetSpent, before.Message, now); err != nil {
		t.Fatalf("STOPPING to STOPPED: %v", err)
	}
	if e.State != ExperimentStopped || !e.EndedAt.Equal(now) {
		t.Errorf("after stopping: %s, ended %v", e.State, e.EndedAt)
	}
}

func TestEndEvents(t *testing.T) {
	for _, s := range allTrialStates {
		if got := s.EndEvent(); (got != "") != s.Terminal() || got != "" && string(got) != "trial."+lower(string(s)) {
			t.Errorf("%q.EndEvent() = %q", s, got)
		}
	}
	for _, s := range allExpStates {
		if got := s.EndEvent(); (got != "") != s.Terminal() || got != "" && string(got) != "experiment."+lower(string(s)) {
			t.Errorf("%q.EndEvent() = %q", s, got)
		}
	}
}

func lower(s string) string { return strings.ToLower(s) }

// TestListsHoldEveryConstant checks that ExperimentReasons and TrialReasons
// together, and EventKinds, list every constant of their type declared in
// this package (the API documents them from these lists), each once.
func TestListsHoldEveryConstant(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string][]string{} // type name -> constant values
	for _, f := range pkgs["virga"].Files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				id, ok := vs.Type.(*ast.Ident)
				if !ok || len(vs.Values) != 1 {
					continue
				}
				lit, ok := vs.Values[0].(*ast.BasicLit)
				if !ok {
					continue
				}
				v, _ := strconv.Unquote(lit.Value)
				declared[id.Name] = append(declared[id.Name], v)
			}
		}
	}
	str := func(vs any) []string {
		var out []string
		switch vs := vs.(type) {
		case []Reason:
			for _, v := range vs {
				out = append(out, string(v))
			}
		case []EventKind:
			for _, v := range vs {
				out = append(out, string(v))
			}
		}
		return out
	}
	for what, l := range map[string][]string{"ExperimentReasons": str(ExperimentReasons()), "TrialReasons": str(TrialReasons()),
		"EventKinds": str(EventKinds())} {
		if len(l) != len(slices.Compact(slices.Sorted(slices.Values(l)))) {
			t.Errorf("%s lists a value twice: %q", what, l)
		}
	}
	union := func(ls ...[]string) []string {
		return slices.Compact(slices.Sorted(slices.Values(slices.Concat(ls...))))
	}
	if got, want := union(str(ExperimentReasons()), str(TrialReasons())), union(declared["Reason"]); !slices.Equal(got, want) {
		t.Errorf("ExperimentReasons and TrialReasons list\n%q\nthe Reason constants are\n%q", got, want)
	}
	if got, want := union(str(EventKinds())), union(declared["EventKind"]); !slices.Equal(got, want) {
		t.Errorf("EventKinds lists\n%q\nthe EventKind constants are\n%q", got, want)
	}
}
