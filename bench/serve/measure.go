package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/virga-ml/virga/internal/serve/batch"
	"github.com/virga-ml/virga/internal/serve/engine"
	"github.com/virga-ml/virga/internal/serve/runtime/onnx"
)

// parseObjective reads -objective: a multiple of a full batch's latency
// ("2") or a duration ("20ms"), and returns the objective it gives a
// profile.
func parseObjective(s string) (func(batch.Profile) time.Duration, error) {
	if x, err := strconv.ParseFloat(s, 64); err == nil {
		if x <= 0 {
			return nil, fmt.Errorf("-objective %q: want a multiple of a full batch's latency above 0, or a duration like 20ms", s)
		}
		return func(p batch.Profile) time.Duration {
			return time.Duration(x * float64(p.Latency(p.MaxRows())))
		}, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return nil, fmt.Errorf("-objective %q: want a multiple of a full batch's latency above 0, or a duration like 20ms", s)
	}
	return func(batch.Profile) time.Duration { return d }, nil
}

// parseProfile reads -profile: comma-separated rows:latency points by
// increasing rows ("1:6.9us,2:6.9us,64:16.1us"), the last one's rows the
// largest batch; between points the latency is interpolated as the
// engine's measured profiles are.
func parseProfile(s string) (*engine.Profile, error) {
	p := &engine.Profile{}
	for i, f := range strings.Split(s, ",") {
		rowsText, tookText, ok := strings.Cut(strings.TrimSpace(f), ":")
		if !ok {
			return nil, fmt.Errorf("-profile point %d %q: want rows:latency, like 64:16.1us", i+1, f)
		}
		rows, err := strconv.Atoi(rowsText)
		if err != nil || rows < 1 {
			return nil, fmt.Errorf("-profile point %d %q: rows %q: want a whole number of rows of 1 or more", i+1, f, rowsText)
		}
		took, err := time.ParseDuration(tookText)
		if err != nil || took <= 0 {
			return nil, fmt.Errorf("-profile point %d %q: latency %q: want a duration above 0, like 16.1us", i+1, f, tookText)
		}
		if n := len(p.Points); n > 0 && rows <= p.Points[n-1].Rows {
			return nil, fmt.Errorf("-profile point %d %q: rows %d after %d: want points by increasing rows", i+1, f, rows, p.Points[n-1].Rows)
		}
		p.Points = append(p.Points, engine.Point{Rows: rows, Took: took})
		p.Max = rows
	}
	return p, nil
}

// measured loads every model of the repository at root (the version its
// name serves; only those named in only, comma-separated, when it is not
// empty) with the engine's runtimes and profiles it runs times with
// engine.Measure, the engine's own load-time profiling; each batch size's
// latency is the median of the runs.
func measured(ctx context.Context, root, only string, runs int) ([]model, error) {
	src := engine.DirSource{Root: root}
	names, err := src.Models(ctx)
	if err != nil {
		return nil, err
	}
	loaders := engine.DefaultRuntimes(onnx.Settings{})
	var models []model
	for _, name := range names {
		if only != "" && !strings.Contains(","+only+",", ","+name+",") {
			continue
		}
		res, err := src.Resolve(ctx, name, "")
		if err != nil {
			return nil, err
		}
		man, err := engine.ReadManifest(res.Dir)
		if err != nil {
			return nil, err
		}
		loader := loaders[man.Format]
		if loader == nil {
			return nil, fmt.Errorf("%s: format %q is not one the engine runs", res.Dir, man.Format)
		}
		m, err := loader.Load(res.Dir, man)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", res.Dir, err)
		}
		var profs []*engine.Profile
		for range max(1, runs) {
			p, err := engine.Measure(ctx, m, time.Now)
			if err != nil {
				m.Close()
				return nil, fmt.Errorf("%s: %w", res.Dir, err)
			}
			profs = append(profs, p)
		}
		m.Close()
		models = append(models, model{name: name, profile: median(profs), source: "measured"})
	}
	if len(models) == 0 {
		return nil, fmt.Errorf("-repository %s: no models (want DIR/MODEL/VERSION/virga-model.json)", root)
	}
	return models, nil
}

// median is the profile whose every point is the median of ps' (all
// measured at the same batch sizes).
func median(ps []*engine.Profile) *engine.Profile {
	out := &engine.Profile{Max: ps[0].Max}
	for i, pt := range ps[0].Points {
		took := make([]time.Duration, len(ps))
		for j, p := range ps {
			took[j] = p.Points[i].Took
		}
		slices.Sort(took)
		out.Points = append(out.Points, engine.Point{Rows: pt.Rows, Took: took[len(took)/2]})
	}
	return out
}

// describe prints a model's profile: a Linear one as its formula, one of
// points as where it comes from (measured or given) and its points.
func describe(m model) string {
	ep, ok := m.profile.(*engine.Profile)
	if !ok {
		return fmt.Sprint(m.profile)
	}
	var b strings.Builder
	b.WriteString(m.source)
	for _, pt := range ep.Points {
		fmt.Fprintf(&b, " %d:%v", pt.Rows, pt.Took.Round(100*time.Nanosecond))
	}
	return b.String()
}
