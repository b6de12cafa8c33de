package control_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/backend"
)

// TestASHAPromoteThroughControl runs ASHA in promote mode with the fake
// backend: a trial pauses at its rung (its process is stopped), is resumed
// from its checkpoint when promoted and completes; the trial never promoted
// ends as stopped once the search is over, and the experiment completes.
func TestASHAPromoteThroughControl(t *testing.T) {
	h := newHarness(t)
	be := newFakeBackend()
	h.start(be)
	e := h.submit(`name: asha
entrypoint: [sh, -c, "exit 0"]
hyperparameters:
  x: {type: float, min: 0, max: 1}
searcher: {sampler: random, stopper: asha, mode: promote, min_resource: 1, max_resource: 2, reduction_factor: 2}
objective: {metric: loss, direction: minimize}
max_trials: 2
max_concurrent: 1
seed: 42
`)
	// Trial 1 is alone at the rung: it pauses.
	s1 := h.nextStart()
	h.started(s1)
	writeCkpt(t, s1, "trial 1 at step 1")
	if d := h.report(s1.AttemptID, 1, 0.3); d != "stop" {
		t.Fatalf("decision %s for the first trial at the rung, want stop (paused)", d)
	}
	if !be.stopped(s1.AttemptID) {
		t.Fatal("the paused trial's process was not stopped")
	}
	h.exited(s1.AttemptID, 0)
	if tr := h.waitTrial(s1.TrialID, virga.TrialPaused); tr.Message != "paused by the searcher" {
		t.Errorf("trial 1 message %q", tr.Message)
	}
	// Trial 2 is worse: it pauses too, and trial 1 is promoted.
	s2 := h.nextStart()
	h.started(s2)
	if d := h.report(s2.AttemptID, 1, 0.5); d != "stop" {
		t.Fatalf("decision %s for the worse trial, want stop (paused)", d)
	}
	h.exited(s2.AttemptID, 0)
	s3 := h.nextStart()
	if s3.TrialID != s1.TrialID {
		t.Fatalf("started trial %d, want trial %d resumed", s3.TrialID, s1.TrialID)
	}
	b, err := os.ReadFile(filepath.Join(s3.Env["VIRGA_CHECKPOINT_DIR"], "state"))
	if err != nil || string(b) != "trial 1 at step 1" {
		t.Fatalf("the promoted trial restored %q (%v)", b, err)
	}
	h.started(s3)
	if d := h.report(s3.AttemptID, 2, 0.2); d != "continue" {
		t.Fatalf("decision %s at max_resource, want continue", d)
	}
	h.exited(s3.AttemptID, 0)
	h.waitTrial(s1.TrialID, virga.TrialCompleted)
	if tr := h.waitTrial(s2.TrialID, virga.TrialStopped); tr.Message != "not promoted by the searcher" {
		t.Errorf("trial 2 message %q", tr.Message)
	}
	h.waitExp(e.ID, virga.ExperimentCompleted)
}

// TestPBTChildContinuesFromParentCheckpoint checks exploit through the
// control loop: the weaker member is stopped and replaced by a trial that
// records its parent and restores the parent's latest checkpoint.
func TestPBTChildContinuesFromParentCheckpoint(t *testing.T) {
	h := newHarness(t)
	h.start(newFakeBackend())
	e := h.submit(`name: pbt
entrypoint: [sh, -c, "exit 0"]
hyperparameters:
  lr: {type: float, min: 0.001, max: 1, log: true}
searcher: {name: pbt, population: 2, interval: 1, max_resource: 3, quantile: 0.5}
objective: {metric: loss, direction: minimize}
max_trials: 3
max_concurrent: 2
checkpoints: {keep_last: 1}
seed: 42
`)
	s1, s2 := h.nextStart(), h.nextStart()
	h.started(s1)
	h.started(s2)
	writeCkpt(t, s1, "strong at step 1")
	h.report(s1.AttemptID, 1, 0.2)
	writeCkpt(t, s2, "weak at step 1")
	if d := h.report(s2.AttemptID, 1, 0.9); d != "stop" {
		t.Fatalf("decision %s for the weaker member, want stop", d)
	}
	h.exited(s2.AttemptID, 0)
	h.waitTrial(s2.TrialID, virga.TrialStopped)
	s3 := h.nextStart()
	child := h.trial(s3.TrialID)
	parent := h.trial(s1.TrialID)
	if child.Parent != s1.TrialID || child.ParentCheckpoint != parent.Checkpoint || child.ParentStep != 1 {
		t.Fatalf("child lineage parent=%d checkpoint=%q step=%d; want %d, %q, 1", child.Parent, child.ParentCheckpoint, child.ParentStep, s1.TrialID, parent.Checkpoint)
	}
	if as := h.attempts(s3.TrialID); as[0].Restored != parent.Checkpoint {
		t.Errorf("child's first attempt restored %q, want the parent's %q", as[0].Restored, parent.Checkpoint)
	}
	b, err := os.ReadFile(filepath.Join(s3.Env["VIRGA_CHECKPOINT_DIR"], "state"))
	if err != nil || string(b) != "strong at step 1" {
		t.Fatalf("child restored %q (%v), want the parent's checkpoint", b, err)
	}
	if child.HParams["lr"] == parent.HParams["lr"] {
		t.Errorf("child kept lr %v: explore did not perturb it", child.HParams["lr"])
	}
	// The parent moves on; its checkpoint the child started from is kept on
	// disk while the child needs it, and deleted once the child has its own.
	h.started(s3)
	for step := int64(2); step <= 3; step++ {
		writeCkpt(t, s1, fmt.Sprintf("strong at step %d", step))
		h.report(s1.AttemptID, step, 0.1)
	}
	h.exited(s1.AttemptID, 0)
	if !h.ck.Exists(child.ParentCheckpoint) {
		t.Fatal("the parent's retention deleted the checkpoint its child starts from")
	}
	writeCkpt(t, s3, "child at step 3")
	h.report(s3.AttemptID, 3, 0.15)
	h.eventually("the inherited checkpoint to be deleted", func() bool { return !h.ck.Exists(child.ParentCheckpoint) })
	h.exited(s3.AttemptID, 0)
	h.waitExp(e.ID, virga.ExperimentCompleted)
	got, err := h.st.Trial(context.Background(), s3.TrialID)
	if err != nil || got.Parent != s1.TrialID {
		t.Fatalf("stored child %+v, %v: lineage lost", got, err)
	}
}

// TestCurvePredictionIsStored checks that the curve stopper's forecast
// reaches the trial (and so the API and `virga trials`).
func TestCurvePredictionIsStored(t *testing.T) {
	h := newHarness(t)
	h.start(newFakeBackend())
	h.submit(`name: curve
entrypoint: [sh, -c, "exit 0"]
hyperparameters:
  x: {type: float, min: 0, max: 1}
searcher: {stopper: curve, max_resource: 30, min_steps: 4}
objective: {metric: loss, direction: minimize}
max_trials: 1
seed: 42
`)
	s := h.nextStart()
	h.started(s)
	for step := int64(1); step <= 6; step++ {
		h.report(s.AttemptID, step, 0.2+1/float64(step))
	}
	// Progress is written at most once a second.
	h.advance(time.Second)
	var p *virga.Prediction
	h.eventually("the prediction to be stored", func() bool {
		tr, err := h.st.Trial(context.Background(), s.TrialID)
		if err == nil {
			p = tr.Prediction
		}
		return p != nil && p.Step == 6
	})
	if p.Step != 6 || p.Horizon != 30 || !(p.Mean > 0.15 && p.Mean < 0.4) || !(p.Std > 0) || p.ProbBetter != 1 {
		t.Errorf("prediction %+v: want step 6, horizon 30, a mean near 0.23, a positive std, and probability 1 with no completed trial", *p)
	}
}

const ashaPromoteYAML = `name: asha
entrypoint: [sh, -c, "exit 0"]
hyperparameters:
  x: {type: float, min: 0, max: 1}
searcher: {sampler: random, stopper: asha, mode: promote, min_resource: 1, max_resource: 2, reduction_factor: 2}
objective: {metric: loss, direction: minimize}
max_trials: 3
max_concurrent: 3
seed: 42
`

// TestPromotionWaitsForThePauseToEnd: a trial told to pause is promoted
// only once its process has exited, so a slot freed meanwhile does not
// lose the promotion (the searcher used to promote it while it was still
// checkpointing, control refused, and no trial ever completed).
func TestPromotionWaitsForThePauseToEnd(t *testing.T) {
	h := newHarness(t)
	h.start(newFakeBackend())
	e := h.submit(ashaPromoteYAML)
	s1, s2, s3 := h.nextStart(), h.nextStart(), h.nextStart()
	for _, s := range []*backend.StartSpec{s1, s2, s3} {
		h.started(s)
	}
	writeCkpt(t, s1, "t1")
	h.report(s1.AttemptID, 1, 0.1) // alone at the rung: pauses
	writeCkpt(t, s2, "t2")
	h.report(s2.AttemptID, 1, 0.5) // second: t1 is the top half, t2 pauses
	if tr := h.trial(s1.TrialID); tr.Message != "pausing: the searcher paused it at this step" {
		t.Errorf("pausing trial's message %q", tr.Message)
	}
	h.exited(s2.AttemptID, 0) // t2 exits first: t1 is still checkpointing
	h.noStart()
	h.exited(s1.AttemptID, 0)
	s4 := h.nextStart()
	if s4.TrialID != s1.TrialID {
		t.Fatalf("started trial %d, want trial %d promoted once paused", s4.TrialID, s1.TrialID)
	}
	h.started(s4)
	h.report(s4.AttemptID, 2, 0.05)
	h.exited(s4.AttemptID, 0)
	h.report(s3.AttemptID, 1, 0.9)
	h.exited(s3.AttemptID, 0)
	h.waitTrial(s1.TrialID, virga.TrialCompleted)
	h.waitExp(e.ID, virga.ExperimentCompleted)
}

// TestCrashWhilePausing: the server dies after a trial was told to pause
// and before its process exits. After recovery the exit is the pause it
// was (not a failure to restart), and the trial can be promoted.
func TestCrashWhilePausing(t *testing.T) {
	h := newHarness(t)
	h.start(&adoptingBackend{newFakeBackend()})
	e := h.submit(strings.Replace(ashaPromoteYAML, "max_concurrent: 3", "max_concurrent: 1", 1))
	s1 := h.nextStart()
	h.started(s1)
	writeCkpt(t, s1, "t1")
	if d := h.report(s1.AttemptID, 1, 0.1); d != "stop" {
		t.Fatalf("decision %s, want stop (pause)", d)
	}
	h.crash()
	h.start(&adoptingBackend{newFakeBackend()})
	h.exited(s1.AttemptID, 0)
	tr := h.waitTrial(s1.TrialID, virga.TrialPaused)
	if tr.Restarts != 0 || tr.Message != "paused by the searcher" {
		t.Fatalf("after recovery the pause became restarts=%d, %q", tr.Restarts, tr.Message)
	}
	// The search goes on: every attempt that starts runs (the other trials,
	// the promoted ones) until the experiment completes.
	for range 100 {
		h.step()
		if h.exp(e.ID).State == virga.ExperimentCompleted {
			break
		}
		var s *backend.StartSpec
		select {
		case s = <-h.be.starts:
		default:
			t.Fatalf("experiment %d neither completed nor started an attempt: %s", e.ID, h.exp(e.ID).State)
		}
		h.started(s)
		step := int64(1)
		if s.TrialID == s1.TrialID {
			step = 2
		}
		h.report(s.AttemptID, step, 0.3+0.1*float64(s.TrialID))
		h.exited(s.AttemptID, 0)
	}
	if st := h.exp(e.ID).State; st != virga.ExperimentCompleted {
		t.Fatalf("experiment %d did not complete: %s", e.ID, st)
	}
	completed := 0
	for _, tr := range h.trials(e.ID) {
		if tr.State == virga.TrialCompleted {
			completed++
		}
	}
	if completed == 0 {
		t.Error("no trial completed: the search ended with every trial paused")
	}
}

// TestCrashWhilePausingInAPausedExperiment: a searcher's pause outranks the
// user's pause of the experiment after a restart too, so the trial stays
// the searcher's to promote (it was requeued by the user's resume before).
func TestCrashWhilePausingInAPausedExperiment(t *testing.T) {
	h := newHarness(t)
	h.start(&adoptingBackend{newFakeBackend()})
	e := h.submit(strings.Replace(ashaPromoteYAML, "max_concurrent: 3", "max_concurrent: 1", 1))
	s1 := h.nextStart()
	h.started(s1)
	writeCkpt(t, s1, "t1")
	if d := h.report(s1.AttemptID, 1, 0.1); d != "stop" {
		t.Fatalf("decision %s, want stop (pause)", d)
	}
	if _, err := h.ctl.Control(context.Background(), e.ID, wire.OpPause); err != nil {
		t.Fatal(err)
	}
	h.crash()
	h.start(&adoptingBackend{newFakeBackend()})
	h.exited(s1.AttemptID, 0)
	if tr := h.waitTrial(s1.TrialID, virga.TrialPaused); tr.Message != "paused by the searcher" {
		t.Fatalf("after recovery the searcher's pause became %q", tr.Message)
	}
	if _, err := h.ctl.Control(context.Background(), e.ID, wire.OpResume); err != nil {
		t.Fatal(err)
	}
	if s := h.nextStart(); s.TrialID == s1.TrialID {
		t.Fatal("the user's resume restarted a trial the searcher paused and did not promote")
	}
}
