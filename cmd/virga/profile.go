package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/client"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/search"
	"github.com/virga-ml/virga/internal/server"
	"github.com/virga-ml/virga/internal/spec"
	"github.com/virga-ml/virga/internal/steptime"
)

// profileExperiment rewrites an experiment file into one trial, run alone:
// max_trials and max_concurrent 1, the random searcher (a stopper would cut
// the run short), a stop grace of 5 s, no deadline or budget. Everything else, comments aside,
// stays as written.
func profileExperiment(data []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("not a mapping")
	}
	m := doc.Content[0]
	set := map[string]string{"max_trials": "1", "max_concurrent": "1", "searcher": "random", "stop_grace": "5s"}
	var kept []*yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i].Value
		if k == "deadline" || k == "budget" {
			continue
		}
		if v, ok := set[k]; ok {
			if k == "searcher" && (m.Content[i+1].Value == "single" || m.Content[i+1].Value == "grid") {
				v = m.Content[i+1].Value
			}
			m.Content[i+1] = &yaml.Node{Kind: yaml.ScalarNode, Tag: tagOf(k), Value: v}
			delete(set, k)
		}
		kept = append(kept, m.Content[i], m.Content[i+1])
	}
	for _, k := range []string{"max_trials", "max_concurrent", "searcher", "stop_grace"} {
		if v, ok := set[k]; ok {
			kept = append(kept, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, &yaml.Node{Kind: yaml.ScalarNode, Tag: tagOf(k), Value: v})
		}
	}
	m.Content = kept
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	return b.Bytes(), enc.Close()
}

func tagOf(key string) string {
	if key == "searcher" || key == "stop_grace" {
		return "!!str"
	}
	return "!!int"
}

// profileDesign measures the step time of configs configurations of the
// experiment in file, chosen to span its space (search.Design), on this
// machine, each for steps steps, and the median start-up of their trials.
// They run as many at a time as the experiment runs trials
// (max_concurrent), on one server of their own in a temporary directory,
// so that the step times are those of trials sharing the machine as the
// run's will.
func profileDesign(ctx context.Context, file string, data []byte, e *spec.Experiment, configs, steps int, timeout time.Duration, seed uint64, progress io.Writer) (obs []steptime.Obs, startup time.Duration, err error) {
	pts, err := search.Design(e, configs, rand.New(rand.NewPCG(seed, 0x70726f66696c65)))
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", file, err)
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, 0, err
	}
	dir, err := os.MkdirTemp("", "virga-profile-*")
	if err != nil {
		return nil, 0, err
	}
	defer os.RemoveAll(dir)
	srv, err := server.Start(ctx, server.Config{DataDir: dir, Version: version, WarmShims: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, 0, fmt.Errorf("starting a server for the profile: %w", err)
	}
	defer srv.Close()
	c := client.New(srv.URL, srv.Token)

	res := virga.Resources{CPU: e.Resources.CPU, MemoryMB: e.Resources.MemoryMB, GPU: e.Resources.GPU}
	at := max(e.MaxConcurrent, 1)
	var ups []time.Duration
	for i := 0; i < len(pts); i += at {
		group := pts[i:min(i+at, len(pts))]
		ids := make([]int64, len(group))
		for j, p := range group {
			pinned, err := pin(data, p)
			if err == nil {
				pinned, err = profileExperiment(pinned)
			}
			if err != nil {
				return nil, 0, fmt.Errorf("%s: %w", file, err)
			}
			exp, err := c.Submit(ctx, abs, pinned)
			if err != nil {
				return nil, 0, err
			}
			ids[j] = exp.ID
			fmt.Fprintf(progress, "profiling configuration %d of %d (%s) of %s on this machine for %d steps...\n", i+j+1, len(pts), fmtPoint(e, p), file, steps)
		}
		got, err := profileGroup(ctx, c, ids, file, steps, timeout)
		if err != nil {
			return nil, 0, err
		}
		for j, m := range got {
			fmt.Fprintf(progress, "  configuration %d: %s per step, %s to start\n", i+j+1, fmtDuration(m.stepTime), fmtDuration(m.startup))
			obs = append(obs, steptime.Obs{Point: group[j], Resources: res, StepTime: m.stepTime})
			ups = append(ups, m.startup)
		}
	}
	slices.Sort(ups)
	return obs, ups[len(ups)/2], nil
}

// measured is what the profile of one configuration found.
type measured struct{ stepTime, startup time.Duration }

// fmtPoint is a configuration as name=value pairs in the file's order.
func fmtPoint(e *spec.Experiment, p map[string]any) string {
	var b strings.Builder
	for _, n := range e.Order {
		if e.Hyperparameters[n].Type == spec.HPConst {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		v := p[n]
		if f, ok := v.(float64); ok {
			v = strconv.FormatFloat(f, 'g', 4, 64)
		}
		fmt.Fprintf(&b, "%s=%v", n, v)
	}
	return b.String()
}

// pin rewrites an experiment file so that every hyperparameter is the
// constant point gives it.
func pin(data []byte, point map[string]any) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("not a mapping")
	}
	m := doc.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value != "hyperparameters" || m.Content[i+1].Kind != yaml.MappingNode {
			continue
		}
		hps := m.Content[i+1]
		for j := 0; j+1 < len(hps.Content); j += 2 {
			v, ok := point[hps.Content[j].Value]
			if !ok {
				continue
			}
			var n yaml.Node
			if err := n.Encode(v); err != nil {
				return nil, err
			}
			hps.Content[j+1] = &n
		}
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	return b.Bytes(), enc.Close()
}

// profileGroup follows the one-trial experiments ids, running at once,
// until each has reported steps times after its first report (or ended,
// or timeout passed), stops them, and returns for each the median time
// between its consecutive reports per step, and its start-up: from its
// creation to its first report, less the steps that report counts
// (placing it, starting its process, the trainer's own set-up: what every
// attempt pays before it makes progress).
func profileGroup(ctx context.Context, c *client.Client, ids []int64, file string, steps int, timeout time.Duration) ([]measured, error) {
	// However this ends (Ctrl-C included), stop the trials and wait for
	// their processes to end before the server and its directory go.
	defer func() {
		bg := context.WithoutCancel(ctx)
		for _, id := range ids {
			_, _ = c.Control(bg, id, wire.OpStop)
		}
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			done := true
			for _, id := range ids {
				if v, err := c.Experiment(bg, id); err == nil && !v.State.Terminal() {
					done = false
				}
			}
			if done {
				return
			}
		}
	}()
	trials := make([]*virga.Trial, len(ids))
	ms := make([][]virga.Metric, len(ids))
	finished := make([]bool, len(ids))
	deadline := time.Now().Add(timeout)
	for {
		all := true
		for j, id := range ids {
			if finished[j] {
				continue
			}
			ts, err := c.Trials(ctx, id)
			if err != nil {
				return nil, err
			}
			if len(ts) > 0 {
				trials[j] = ts[0]
				if ms[j], err = c.Metrics(ctx, trials[j].ID); err != nil {
					return nil, err
				}
				if len(ms[j]) > steps || trials[j].State.Terminal() {
					finished[j] = true
					// Stop it now: the others of the group go on as the
					// run's trials would, one fewer at a time.
					_, _ = c.Control(context.WithoutCancel(ctx), id, wire.OpStop)
					continue
				}
			}
			all = false
		}
		if all || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	out := make([]measured, len(ids))
	for j := range ids {
		var per []float64
		for i := 1; i < len(ms[j]); i++ {
			a, b := ms[j][i-1], ms[j][i]
			if a.AttemptID == b.AttemptID && b.Step > a.Step {
				per = append(per, float64(b.Time.Sub(a.Time))/float64(b.Step-a.Step))
			}
		}
		if len(per) == 0 {
			state := "no trial"
			if t := trials[j]; t != nil {
				state = fmt.Sprintf("trial %s after %d reports (%s)", t.State, len(ms[j]), t.Message)
			}
			return nil, fmt.Errorf("the profile of %s measured no step time within %s: %s", file, timeout, state)
		}
		slices.Sort(per)
		st := time.Duration(per[len(per)/2])
		up := ms[j][0].Time.Sub(trials[j].CreatedAt) - time.Duration(ms[j][0].Step)*st
		out[j] = measured{stepTime: st, startup: max(up, 0)}
	}
	return out, nil
}
