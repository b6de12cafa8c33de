// Command slurm measures Virga's Slurm backend (internal/backend/slurm) on a
// real cluster, by default the single-host test cluster of scripts/slurm.sh,
// and prints its figures:
//
//   - trials: N short trials (`true` through the real `virga agent`), as many
//     at once as the pool holds (the control loop starts no more than fit):
//     trials per second, and per trial the time from the start request to
//     sbatch's answer, to the Started event, and to the Exited event;
//     squeue calls per second (the backend's counter) and every RPC that
//     slurmctld served meanwhile by type (sdiag; sbatch, srun and the agents
//     count too).
//   - watch: W attempts held in the queue (--hold), watched for a while:
//     still one squeue per poll, and how long one takes with W jobs listed.
//
// Run from the module root (root for sdiag): scripts/slurm.sh start; go run
// ./bench/slurm [flags]. See bench/README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/backend/slurm"
)

type options struct {
	trials    int
	watch     int
	watchFor  time.Duration
	poll      time.Duration
	virga     string
	partition string
	nodes     int
	nodeCPU   float64
	nodeMem   int64
	cpu       float64
	mem       int64
	timeout   time.Duration
	jsonOut   bool
}

type dist struct {
	P50, P90, P99, Max time.Duration
}

type trialsResult struct {
	Trials        int              `json:"trials"`
	Failed        int              `json:"failed"`
	Concurrency   int              `json:"concurrency"`
	Poll          time.Duration    `json:"poll"`
	Elapsed       time.Duration    `json:"elapsed"`
	TrialsPerSec  float64          `json:"trials_per_sec"`
	Submit        dist             `json:"submit"`          // start request -> sbatch answered
	ToStarted     dist             `json:"to_started"`      // start request -> Started event
	ToExited      dist             `json:"to_exited"`       // start request -> Exited event
	SlurmStart    dist             `json:"slurm_start"`     // sbatch answered -> the job's StartTime (+-0.5 s)
	PollLag       dist             `json:"poll_lag"`        // the job's StartTime -> Started event (+-0.5 s)
	Queries       int64            `json:"queries"`         // squeue calls
	QueriesPerSec float64          `json:"queries_per_sec"` // squeue calls per second
	QueryAvg      time.Duration    `json:"query_avg"`
	Cancels       int64            `json:"cancels"`
	RPCs          map[string]int64 `json:"rpcs"` // slurmctld's RPCs meanwhile, by type (sdiag)
	RPCsPerSec    float64          `json:"rpcs_per_sec"`
	RPCsPerPoll   float64          `json:"squeue_rpcs_per_poll"` // job and partition info RPCs per squeue
}

type watchResult struct {
	Attempts      int              `json:"attempts"`
	For           time.Duration    `json:"for"`
	Poll          time.Duration    `json:"poll"`
	Queries       int64            `json:"queries"`
	QueriesPerSec float64          `json:"queries_per_sec"`
	QueryAvg      time.Duration    `json:"query_avg"`
	RPCs          map[string]int64 `json:"rpcs"`
}

func main() {
	var o options
	flag.IntVar(&o.trials, "trials", 500, "short trials to run (0: skip)")
	flag.IntVar(&o.watch, "watch", 500, "held attempts to watch (0: skip)")
	flag.DurationVar(&o.watchFor, "watch-for", 10*time.Second, "how long to watch the held attempts")
	flag.DurationVar(&o.poll, "poll", time.Second, "the backend's PollInterval")
	flag.StringVar(&o.virga, "virga", "", "the virga binary the nodes run (default: built from ./cmd/virga)")
	flag.StringVar(&o.partition, "partition", "ondemand", "the partition")
	flag.IntVar(&o.nodes, "nodes", 2, "the partition's nodes Virga may use")
	flag.Float64Var(&o.nodeCPU, "node-cpu", 2, "CPUs per node")
	flag.Int64Var(&o.nodeMem, "node-memory", 4000, "memory per node, MB")
	flag.Float64Var(&o.cpu, "cpu", 1, "CPUs per trial")
	flag.Int64Var(&o.mem, "memory", 100, "memory per trial, MB")
	flag.DurationVar(&o.timeout, "timeout", 15*time.Minute, "give up after")
	flag.BoolVar(&o.jsonOut, "json", false, "print the results as JSON")
	flag.Parse()
	if err := run(&o); err != nil {
		fmt.Fprintln(os.Stderr, "bench/slurm:", err)
		os.Exit(1)
	}
}

func run(o *options) error {
	tmp, err := os.MkdirTemp("", "virga-bench-slurm-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if o.virga == "" {
		o.virga = filepath.Join(tmp, "virga")
		if out, err := exec.Command("go", "build", "-o", o.virga, "./cmd/virga").CombinedOutput(); err != nil {
			return fmt.Errorf("building virga (run from the module root, or give --virga): %v\n%s", err, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	out := map[string]any{}
	if o.trials > 0 {
		r, err := benchTrials(ctx, o, tmp)
		if err != nil {
			return err
		}
		out["trials"] = r
		if !o.jsonOut {
			printTrials(r)
		}
	}
	if o.watch > 0 {
		r, err := benchWatch(ctx, o, tmp)
		if err != nil {
			return err
		}
		out["watch"] = r
		if !o.jsonOut {
			printWatch(r)
		}
	}
	if o.jsonOut {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	return nil
}

func newBackend(o *options, prefix string, pool slurm.Pool) (*slurm.Backend, error) {
	return slurm.New(slurm.Config{Pools: []slurm.Pool{pool}, AgentPath: o.virga, JobPrefix: prefix, PollInterval: o.poll})
}

func spec(o *options, tmp string, id int64) (*backend.StartSpec, error) {
	dir := filepath.Join(tmp, "attempts", strconv.FormatInt(id, 10))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &backend.StartSpec{AttemptID: id, TrialID: id, ExperimentID: 1, Argv: []string{"true"},
		Resources: virga.Resources{CPU: o.cpu, MemoryMB: o.mem}, Nodes: 1, ProcessesPerNode: 1, Dir: dir,
		ReportURL: "http://127.0.0.1:9/api/v1/attempts/1/report", Token: "bench", StopGrace: 5 * time.Second}, nil
}

// benchTrials runs o.trials short trials, as many at once as the pool holds.
func benchTrials(ctx context.Context, o *options, tmp string) (*trialsResult, error) {
	prefix := "vb" + time.Now().Format("150405")
	pool := slurm.Pool{Name: "bench", Partition: o.partition, Node: virga.Resources{CPU: o.nodeCPU, MemoryMB: o.nodeMem}, Nodes: o.nodes}
	b, err := newBackend(o, prefix, pool)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	defer cancelPrefix(prefix)
	type times struct{ req, submitted, slurmStart, started, exited time.Time }
	tt := make([]times, o.trials+1)
	rpc0 := sdiag()
	began := time.Now()
	next, done, failed, conc := int64(1), 0, 0, 0
	capacity := b.Capacity().CPU
	for done < o.trials {
		for next <= int64(o.trials) {
			s, err := spec(o, tmp, next)
			if err != nil {
				return nil, err
			}
			tt[next].req = time.Now()
			err = b.Start(ctx, s)
			if errors.Is(err, virga.ErrNoCapacity) {
				break
			}
			if err != nil {
				return nil, err
			}
			tt[next].submitted = time.Now()
			next++
			// What Virga's attempts hold now (the events not read yet
			// may have freed some already).
			conc = max(conc, int((capacity-b.Free().CPU)/o.cpu+0.5))
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%d of %d trials done: %w", done, o.trials, ctx.Err())
		case ev := <-b.Events():
			switch ev.Kind {
			case backend.Started:
				tt[ev.AttemptID].started = time.Now()
				tt[ev.AttemptID].slurmStart = ev.Time
			case backend.Exited:
				tt[ev.AttemptID].exited = time.Now()
				done++
				if ev.ExitCode == nil || *ev.ExitCode != 0 {
					failed++
					if failed <= 3 {
						fmt.Fprintf(os.Stderr, "trial %d: %+v\n", ev.AttemptID, ev)
					}
				}
			}
		}
	}
	elapsed := time.Since(began)
	st := b.Stats()
	rpc := diff(sdiag(), rpc0)
	var sub, toStart, toExit, lag, sched []time.Duration
	for _, t := range tt[1:] {
		sub = append(sub, t.submitted.Sub(t.req))
		if !t.started.IsZero() {
			toStart = append(toStart, t.started.Sub(t.req))
			// Slurm's StartTime has whole seconds: add half a second.
			st := t.slurmStart.Add(500 * time.Millisecond)
			lag = append(lag, max(t.started.Sub(st), 0))
			sched = append(sched, max(st.Sub(t.submitted), 0))
		}
		toExit = append(toExit, t.exited.Sub(t.req))
	}
	r := &trialsResult{Trials: o.trials, Failed: failed, Concurrency: conc, Poll: o.poll, Elapsed: elapsed,
		TrialsPerSec: float64(o.trials) / elapsed.Seconds(), Submit: distOf(sub), ToStarted: distOf(toStart),
		ToExited: distOf(toExit), SlurmStart: distOf(sched), PollLag: distOf(lag), Queries: st.Queries, QueriesPerSec: float64(st.Queries) / elapsed.Seconds(),
		Cancels: st.Cancels, RPCs: rpc}
	if st.Queries > 0 {
		r.QueryAvg = st.QueryTime / time.Duration(st.Queries)
		r.RPCsPerPoll = float64(rpc["REQUEST_JOB_USER_INFO"]+rpc["REQUEST_JOB_INFO"]+rpc["REQUEST_PARTITION_INFO"]) / float64(st.Queries)
	}
	var total int64
	for _, n := range rpc {
		total += n
	}
	r.RPCsPerSec = float64(total) / elapsed.Seconds()
	return r, nil
}

// benchWatch holds o.watch attempts in the queue and watches them.
func benchWatch(ctx context.Context, o *options, tmp string) (*watchResult, error) {
	prefix := "vw" + time.Now().Format("150405")
	pool := slurm.Pool{Name: "held", Partition: o.partition, Node: virga.Resources{CPU: o.cpu, MemoryMB: o.mem},
		Nodes: o.watch, Args: []string{"--hold"}}
	b, err := newBackend(o, prefix, pool)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	defer cancelPrefix(prefix)
	go func() { // drain
		for range b.Events() {
		}
	}()
	for id := int64(100001); id < 100001+int64(o.watch); id++ {
		s, err := spec(o, tmp, id)
		if err != nil {
			return nil, err
		}
		if err := b.Start(ctx, s); err != nil {
			return nil, err
		}
	}
	st0, rpc0 := b.Stats(), sdiag()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(o.watchFor):
	}
	st, rpc := b.Stats(), diff(sdiag(), rpc0)
	r := &watchResult{Attempts: o.watch, For: o.watchFor, Poll: o.poll, Queries: st.Queries - st0.Queries, RPCs: rpc}
	r.QueriesPerSec = float64(r.Queries) / o.watchFor.Seconds()
	if r.Queries > 0 {
		r.QueryAvg = (st.QueryTime - st0.QueryTime) / time.Duration(r.Queries)
	}
	return r, nil
}

// cancelPrefix cancels, in one scancel, the jobs left whose name starts
// with prefix.
func cancelPrefix(prefix string) {
	out, _ := exec.Command("squeue", "--me", "-h", "-o", "%i %j").Output()
	var ids []string
	for line := range strings.Lines(string(out)) {
		if id, name, ok := strings.Cut(strings.TrimSpace(line), " "); ok && strings.HasPrefix(name, prefix+"-a") {
			ids = append(ids, id)
		}
	}
	if len(ids) > 0 {
		_ = exec.Command("scancel", ids...).Run()
	}
}

var rpcLine = regexp.MustCompile(`^\s*((?:REQUEST|MESSAGE|RESPONSE)_[A-Z0-9_]+)\s+\(\s*\d+\)\s+count:(\d+)`)

// sdiag returns slurmctld's RPC counts by type (empty if sdiag fails).
func sdiag() map[string]int64 {
	out, err := exec.Command("sdiag").Output()
	m := map[string]int64{}
	if err != nil {
		return m
	}
	for line := range strings.Lines(string(out)) {
		if g := rpcLine.FindStringSubmatch(line); g != nil {
			n, _ := strconv.ParseInt(g[2], 10, 64)
			m[g[1]] += n
		}
	}
	return m
}

func diff(after, before map[string]int64) map[string]int64 {
	d := map[string]int64{}
	for k, v := range after {
		if v -= before[k]; v != 0 {
			d[k] = v
		}
	}
	return d
}

func distOf(ds []time.Duration) dist {
	if len(ds) == 0 {
		return dist{}
	}
	slices.Sort(ds)
	q := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	return dist{P50: q(0.5), P90: q(0.9), P99: q(0.99), Max: ds[len(ds)-1]}
}

func (d dist) String() string {
	r := func(x time.Duration) time.Duration { return x.Round(time.Millisecond) }
	return fmt.Sprintf("p50 %s  p90 %s  p99 %s  max %s", r(d.P50), r(d.P90), r(d.P99), r(d.Max))
}

func printRPCs(rpc map[string]int64, secs float64) {
	type kv struct {
		k string
		v int64
	}
	var l []kv
	for k, v := range rpc {
		l = append(l, kv{k, v})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].v > l[j].v || l[i].v == l[j].v && l[i].k < l[j].k })
	for _, e := range l {
		fmt.Printf("    %-34s %7d  %8.2f/s\n", e.k, e.v, float64(e.v)/secs)
	}
}

func printTrials(r *trialsResult) {
	fmt.Printf("trials: %d short trials (%d failed), up to %d at once, poll %s\n", r.Trials, r.Failed, r.Concurrency, r.Poll)
	fmt.Printf("  %.2f trials/s (%s)\n", r.TrialsPerSec, r.Elapsed.Round(time.Millisecond))
	fmt.Printf("  start request -> sbatch answered  %s\n", r.Submit)
	fmt.Printf("  start request -> Started          %s\n", r.ToStarted)
	fmt.Printf("  start request -> Exited           %s\n", r.ToExited)
	fmt.Printf("  of which Slurm: sbatch -> job runs %s  (StartTime has whole seconds: +-0.5 s)\n", r.SlurmStart)
	fmt.Printf("  and Virga: job runs -> Started     %s  (the poll's lag, +-0.5 s)\n", r.PollLag)
	fmt.Printf("  squeue: %d calls, %.2f/s, %s each on average; %d scancel\n", r.Queries, r.QueriesPerSec,
		r.QueryAvg.Round(time.Millisecond/10), r.Cancels)
	fmt.Printf("  slurmctld RPCs meanwhile (sdiag), %.1f/s; job and partition info RPCs per squeue %.2f:\n", r.RPCsPerSec, r.RPCsPerPoll)
	printRPCs(r.RPCs, r.Elapsed.Seconds())
}

func printWatch(r *watchResult) {
	fmt.Printf("watch: %d held attempts for %s, poll %s\n", r.Attempts, r.For, r.Poll)
	fmt.Printf("  squeue: %d calls, %.2f/s, %s each on average\n", r.Queries, r.QueriesPerSec, r.QueryAvg.Round(time.Millisecond/10))
	fmt.Println("  slurmctld RPCs meanwhile (sdiag):")
	printRPCs(r.RPCs, r.For.Seconds())
}
