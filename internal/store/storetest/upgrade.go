package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store"
)

// OldSchema builds a new, isolated database at schema version (the store's
// migrations 1 to version applied, recorded in schema_version as an older
// Virga left it), runs stmts in it (portable SQL), then opens it with the
// store, which migrates it to the latest version, and closes it when t ends.
type OldSchema func(t *testing.T, version int, stmts []string) store.Store

// WithOldSchema enables the upgrade subtests, which check what migrations do
// to the rows an older Virga wrote.
func WithOldSchema(build OldSchema) Option {
	return func(c *config) { c.oldSchema = build }
}

// testReasonsBackfilled: a database at version 6 (before trials had a
// reason) holds trials and experiments in the middle of what recovery must
// carry on; migrating it gives each the reason its message's exact words
// meant, and leaves the messages as they were.
func testReasonsBackfilled(t *testing.T, build OldSchema) {
	ctx := context.Background()
	type trialRow struct {
		state virga.TrialState
		msg   string
		want  virga.Reason
	}
	trials := []trialRow{
		{virga.TrialRunning, "pausing: the searcher paused it at this step", virga.ReasonPausingBySearcher},
		{virga.TrialRunning, "stopping: the searcher stopped it early", virga.ReasonStoppingEarly},
		{virga.TrialRunning, "moving to on-demand pool od: the deadline needs it (18m0s of work left, 20m0s to the deadline)", virga.ReasonMoving},
		{virga.TrialRunning, "", virga.ReasonNone},
		{virga.TrialPaused, "paused by the searcher", virga.ReasonPausedBySearcher},
		{virga.TrialPaused, "paused by user", virga.ReasonPausedByUser},
		{virga.TrialQueued, "", virga.ReasonNone},
		{virga.TrialQueued, "continues from trial 1 at step 40", virga.ReasonNone},
		{virga.TrialQueued, "resumed by user", virga.ReasonResumedByUser},
		{virga.TrialQueued, "resumed by the searcher", virga.ReasonResumedBySearcher},
		{virga.TrialQueued, "waiting for capacity", virga.ReasonWaitingForCapacity},
		{virga.TrialQueued, "requeued after a server restart", virga.ReasonRequeued},
		{virga.TrialQueued, "restarting from checkpoint 0123456789ab after exit code 1", virga.ReasonRestarting},
		{virga.TrialQueued, "moved off pool spot; resuming from checkpoint 0123456789ab", virga.ReasonMoved},
		{virga.TrialQueued, "preempted: pool spot reclaimed its capacity; resuming from the start", virga.ReasonPreempted},
		{virga.TrialCompleted, "", virga.ReasonSucceeded},
		{virga.TrialStopped, "stopped early by the searcher", virga.ReasonStoppedEarly},
		{virga.TrialStopped, "stopped by user", virga.ReasonStoppedByUser},
		{virga.TrialStopped, "stopped: the experiment's budget is spent", virga.ReasonBudgetSpent},
		{virga.TrialStopped, "not promoted by the searcher", virga.ReasonNotPromoted},
		{virga.TrialFailed, "failed 3 times; last: exit code 1", virga.ReasonRestartsExhausted},
		{virga.TrialFailed, "preempted 8 times in a row without saving a new checkpoint (last by pool spot); checkpoint more often", virga.ReasonPreemptedWithoutProgress},
	}
	type expRow struct {
		state       virga.ExperimentState
		reason, msg string
		want        virga.Reason
	}
	exps := []expRow{
		{virga.ExperimentActive, "", "", virga.ReasonNone},
		{virga.ExperimentStopping, "", "budget of $1.00 reached: $0.95 spent by the time the running trials stop; stopped, checkpoints kept", virga.ReasonBudgetSpent},
		{virga.ExperimentStopping, "", "stopping at user request", virga.ReasonStoppedByUser},
		{virga.ExperimentPaused, "", "paused by user", virga.ReasonPausedByUser},
		{virga.ExperimentStopped, "BudgetSpent", "budget of $1.00 reached", virga.ReasonBudgetSpent},
		{virga.ExperimentStopped, "", "stopped by user", virga.ReasonStoppedByUser},
		{virga.ExperimentCompleted, "SearchFinished", "", virga.ReasonSearchFinished},
		{virga.ExperimentFailed, "NoObjectiveReported", "no trial reported the objective metric", virga.ReasonNoObjective},
	}
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	var stmts []string
	for i, e := range exps {
		stmts = append(stmts, fmt.Sprintf(`INSERT INTO experiments (id, name, state, spec_file, message, reason)
			VALUES (%d, 'old-%d', %s, 'old.yaml', %s, %s)`, i+1, i, quote(string(e.state)), quote(e.msg), quote(e.reason)))
	}
	for i, tr := range trials {
		stmts = append(stmts, fmt.Sprintf(`INSERT INTO trials (id, experiment_id, seq, request, state, hparams, attempts,
			restarts, step, best_step, checkpoint, message) VALUES (%d, 1, %d, 'r', %s, '{}', 1, 0, 0, 0, '', %s)`,
			i+1, i+1, quote(string(tr.state)), quote(tr.msg)))
	}
	s := build(t, 6, stmts)

	got, err := s.Trials(ctx, 1)
	if err != nil {
		t.Fatalf("Trials: %v", err)
	}
	if len(got) != len(trials) {
		t.Fatalf("%d trials after the migration, want %d", len(got), len(trials))
	}
	for i, tr := range trials {
		g := got[i]
		if g.State != tr.state || g.Reason != tr.want || g.Message != tr.msg {
			t.Errorf("trial %s %q migrated to %s reason %q message %q; want reason %q, the message kept",
				tr.state, tr.msg, g.State, g.Reason, g.Message, tr.want)
		}
	}
	for i, e := range exps {
		g, err := s.Experiment(ctx, int64(i+1))
		if err != nil {
			t.Fatalf("Experiment(%d): %v", i+1, err)
		}
		if g.State != e.state || g.Reason != e.want || g.Message != e.msg {
			t.Errorf("experiment %s (reason %q) %q migrated to %s reason %q message %q; want reason %q, the message kept",
				e.state, e.reason, e.msg, g.State, g.Reason, g.Message, e.want)
		}
	}
}
