package api

import (
	"context"
	"slices"
	"strings"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/control"
	"github.com/virga-ml/virga/internal/spec"
)

// live reports whether any attempt has not ended.
func live(as []*virga.Attempt) bool {
	return slices.ContainsFunc(as, func(a *virga.Attempt) bool { return a.State != virga.AttemptExited })
}

// priced returns an experiment's attempts with the Cost of each live one set
// to what it has cost up to now (on copies: the stored rows are untouched).
// A live attempt that cannot be priced keeps its stored cost (0); the
// control loop logs why when it ends.
func (s *Server) priced(e *virga.Experiment, as []*virga.Attempt) []*virga.Attempt {
	if s.cfg.Pricer == nil || !live(as) {
		return as
	}
	var res virga.Resources
	if sp, err := spec.Parse(e.SpecFile, e.Spec); err == nil {
		res = virga.Resources{CPU: sp.Resources.CPU, MemoryMB: sp.Resources.MemoryMB, GPU: sp.Resources.GPU}
	}
	now := s.cfg.Clock.Now()
	out := make([]*virga.Attempt, len(as))
	for i, a := range as {
		out[i] = a
		if a.State == virga.AttemptExited {
			continue
		}
		if c, err := control.AttemptCost(s.cfg.Pricer, a, res, now); err == nil {
			cp := *a
			cp.Cost = c
			out[i] = &cp
		}
	}
	return out
}

// addSpend sets what an experiment has cost, in total and by pool.
func (s *Server) addSpend(ctx context.Context, v *wire.ExperimentView) error {
	as, err := s.st.ExperimentAttempts(ctx, v.ID)
	if err != nil {
		return err
	}
	pools := map[string]*wire.PoolSpend{}
	for _, a := range s.priced(v.Experiment, as) {
		v.Add(a)
		p := pools[a.Pool]
		if p == nil {
			p = &wire.PoolSpend{Pool: a.Pool}
			pools[a.Pool] = p
		}
		p.Attempts++
		p.Add(a)
	}
	v.Pools = nil
	for _, p := range pools {
		v.Pools = append(v.Pools, *p)
	}
	slices.SortFunc(v.Pools, func(a, b wire.PoolSpend) int { return strings.Compare(a.Pool, b.Pool) })
	return nil
}
