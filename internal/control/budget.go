package control

import (
	"context"
	"fmt"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/search"
)

// An experiment's budget (spec.Experiment.Budget, in dollars) holds to
// within one billing increment:
//   - an attempt is started only if what the experiment has spent, what its
//     running attempts are expected to cost until they end, and what the new
//     one is expected to cost (the mean run of its attempts that succeeded,
//     or the billing minimum before any did) fit in the budget, all of them
//     counted at least until the new attempt's restart overhead and the stop
//     reserve below have passed (else the next check would stop it before it
//     made progress);
//   - at every tick, if what has been spent plus what the running attempts
//     will cost until a stop could end them (the stop reserve: the stop
//     grace and two ticks)
//     reaches the budget, the experiment stops: its running trials get
//     SIGTERM (checkpoints are kept) and it ends STOPPED with the reason
//     BudgetSpent (recorded while it stops, so a restarted server ends it
//     so too) and a message saying why.

// recoverSpend sums what an experiment's ended attempts cost, after a
// restart of the server.
func (c *Controller) recoverSpend(ctx context.Context, es *expState) error {
	as, err := c.cfg.Store.ExperimentAttempts(ctx, es.exp.ID)
	if err != nil {
		return fmtErr("listing attempts", err)
	}
	for _, a := range as {
		if a.State != virga.AttemptExited {
			continue
		}
		es.spent += a.Cost
		if a.Outcome == virga.OutcomeSucceeded && !a.StartedAt.IsZero() && a.EndedAt.After(a.StartedAt) {
			es.runs++
			es.runTime += a.EndedAt.Sub(a.StartedAt)
		}
	}
	return nil
}

// committed returns what es has spent plus what its running attempts will
// have cost by until (each at least to its start plus run, when run > 0).
func (c *Controller) committed(es *expState, until time.Time, run time.Duration) float64 {
	total := es.spent
	res := resources(es.spec)
	for _, ts := range es.active { // settled trials have no attempt
		a := ts.attempt
		if a == nil || a.Backend == apiBackend {
			continue
		}
		if a.StartedAt.IsZero() {
			// Created, not yet seen started: it will cost at least a
			// start (its billing minimum) or its expected run, and
			// runs until then as if started when created.
			from := ts.started
			if from.IsZero() || from.After(until) {
				from = until
			}
			cost, err := c.cfg.Pricer.Cost(a.Pool, res, from, later(until, from.Add(max(run, time.Second))))
			if err != nil {
				c.log.Warn("pricing a starting attempt for the budget", "attempt", a.ID, "err", err)
			}
			total += cost
			continue
		}
		end := until
		if run > 0 {
			end = later(end, a.StartedAt.Add(run))
		}
		cost, err := runCost(c.cfg.Pricer, a, res, end)
		if err != nil {
			c.log.Warn("pricing a running attempt for the budget", "attempt", a.ID, "err", err)
		}
		total += cost
	}
	return total
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// expectedRun is how long es's next attempt is expected to run: the mean run
// of its attempts that succeeded; 0 before any did.
func expectedRun(es *expState) time.Duration {
	if es.runs == 0 {
		return 0
	}
	return es.runTime / time.Duration(es.runs)
}

// stopReserve is how long running attempts may go on costing after the
// budget check that stops them: until the next check (two ticks, one of
// them for a late tick) and then the stop grace a stopped trial may take.
func (c *Controller) stopReserve(es *expState) time.Duration {
	return es.spec.StopGrace.D() + 2*c.cfg.TickInterval
}

// budgetFits tells whether starting ts now (on ts.pool) keeps es within its
// budget, with pending the expected cost of the trials already chosen to
// start in this pass (not yet attempts); if it fits, it adds ts's expected
// cost to pending, else it says why. The start must leave the attempt its
// restart overhead before the budget check (checkBudgets) would stop it:
// everything is counted at least until the overhead and the stop reserve
// have passed, so that no trial is started only to be stopped for the
// budget before it made any progress.
func (c *Controller) budgetFits(es *expState, ts *trialState, res virga.Resources, now time.Time, pending *float64) (bool, string) {
	budget := es.spec.Budget
	if budget <= 0 || c.cfg.Pricer == nil {
		return true, ""
	}
	run := expectedRun(es)
	least := c.cfg.PoolInfo[ts.pool].RestartOverhead + c.stopReserve(es)
	horizon := now.Add(least)
	next, err := c.cfg.Pricer.Cost(ts.pool, res, now, later(now.Add(max(run, time.Second)), horizon))
	if err != nil {
		c.log.Warn("pricing the next attempt for the budget", "trial", ts.t.ID, "pool", ts.pool, "err", err)
		return true, ""
	}
	spent := c.committed(es, horizon, run) + *pending
	if spent+next <= budget {
		*pending += next
		return true, ""
	}
	what := fmt.Sprintf("its next trial (about %s, the mean run so far)", run.Round(time.Second))
	if run < least {
		what = fmt.Sprintf("its next trial, counted for %s (its restart overhead, two ticks and the stop grace: the least it runs before the budget could stop it)",
			least.Round(time.Second))
	}
	return false, fmt.Sprintf("budget of %s reached: %s spent or committed, and %s would cost %s; stopped, checkpoints kept (submit again with a larger budget to go on)",
		fmtUSD(budget), fmtUSD(spent), what, fmtUSD(next))
}

// budgetAllowsNew tells whether es's budget leaves room for one more trial
// on the cheapest of pools (nil: the backend's default pool), so that the
// searcher is not asked for a trial that could not start; if not, why.
func (c *Controller) budgetAllowsNew(es *expState, res virga.Resources, pools []backend.PoolStatus, now time.Time, pending float64) (bool, string) {
	if es.spec.Budget <= 0 || c.cfg.Pricer == nil {
		return true, ""
	}
	names := []string{""}
	if pools != nil {
		names = names[:0]
		for _, p := range pools {
			names = append(names, p.Name)
		}
	}
	why := ""
	for _, name := range names {
		probe := &trialState{t: &virga.Trial{}, exp: es, pool: name}
		p := pending
		ok, w := c.budgetFits(es, probe, res, now, &p)
		if ok {
			return true, ""
		}
		why = w
	}
	return false, why
}

// checkBudgets stops every experiment whose running attempts would take it
// past its budget before a stop could end them.
func (c *Controller) checkBudgets(it *iteration) {
	now := c.now()
	for _, es := range c.exps {
		budget := es.spec.Budget
		if budget <= 0 || c.cfg.Pricer == nil || es.exp.State.Terminal() || es.exp.State == virga.ExperimentStopping {
			continue
		}
		horizon := now.Add(c.stopReserve(es))
		if projected := c.committed(es, horizon, 0); projected >= budget {
			c.stopForBudget(it, es, fmt.Sprintf("budget of %s reached: %s spent by the time the running trials stop; stopped, checkpoints kept (submit again with a larger budget to go on)",
				fmtUSD(budget), fmtUSD(projected)), now)
		}
	}
}

// stopForBudget stops es because of its budget, as a user's stop would,
// with msg as the reason.
func (c *Controller) stopForBudget(it *iteration, es *expState, msg string, now time.Time) {
	if !c.setExp(it, es, virga.ExperimentStopping, virga.ReasonBudgetSpent, msg, now) {
		return
	}
	for _, ts := range es.trials {
		switch {
		case ts.attempt != nil:
			c.stopAttempt(it, ts, stopUser)
		case !ts.t.State.Terminal():
			why, tmsg := stoppedBy(es)
			c.endTrial(it, ts, virga.TrialStopped, why, tmsg, search.Stopped, now)
		}
	}
	it.event(&virga.Event{ExperimentID: es.exp.ID, Kind: virga.EventExperimentBudget, Message: msg, Time: now})
	c.maybeFinish(it, es)
}

func fmtUSD(usd float64) string {
	if usd != 0 && usd < 0.01 && usd > -0.01 {
		return fmt.Sprintf("$%.4f", usd)
	}
	return fmt.Sprintf("$%.2f", usd)
}
