package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/client"
	"github.com/virga-ml/virga/internal/server"
)

// agentTrial is the trial of TestKWOKAgentExperiment, speaking the trial
// protocol: it resumes from the step in its checkpoint directory, takes
// $STEPS steps of 0.2 s, each one written to the checkpoint directory (beside
// it first, then moved in whole) and then reported on a VIRGA_METRIC line,
// and ends once $RELEASE exists (or after a minute).
const agentTrial = `n=$(cat "$VIRGA_CHECKPOINT_DIR/step" 2>/dev/null || echo 0)
while [ "$n" -lt "$STEPS" ]; do
  sleep 0.2; n=$((n+1))
  f=$(mktemp -p "$(dirname "$VIRGA_CHECKPOINT_DIR")"); echo "$n" >"$f"; mv "$f" "$VIRGA_CHECKPOINT_DIR/step"
  echo "VIRGA_METRIC {\"step\":$n,\"metrics\":{\"loss\":$((STEPS - n))}}"
done
i=0; until [ -e "$RELEASE" ] || [ $((i += 1)) -gt 600 ]; do sleep 0.1; done`

// TestKWOKAgentExperiment runs an experiment through a real Virga server
// (control loop, API, SQLite store) whose backend is this one, on the spot
// pool of scripts/kube.sh's cluster, with the trial protocol followed end to
// end: the kubelet of the test (newKWOKAgentKubelet) runs each pod's
// container as a local process, the real `virga agent` built from
// cmd/virga with the pod's command and environment, which fetches the
// checkpoint to resume from, runs the trial, and relays its reports and
// checkpoints to the server. Once every trial reported a few steps, the node
// of one is reclaimed (a NoExecute taint): the taint manager evicts its pod,
// the kubelet sends the agent SIGTERM (SIGKILL after the grace), the agent
// stops the trial, and the control loop, told of the preemption, starts the
// trial again, on another node, from its last checkpoint. The experiment
// completes; every trial's steps and checkpoints reached the server; the
// preempted trial's next attempt restored its first attempt's checkpoint and
// went on from its step (the steps before it keep the first attempt's
// reports); each attempt ran one process, never two of a trial at once.
func TestKWOKAgentExperiment(t *testing.T) {
	admin, ns := kwokNamespace(t)
	roleClient := asServiceAccount(t, admin, ns)
	k := newKWOKAgentKubelet(t, admin, ns, buildVirga(t))
	// Virga counts 4 spot nodes of 1 CPU; the scheduler has the cluster's 100.
	pools := karpenterPools(t, virga.Resources{CPU: 1, MemoryMB: 256}, 0, 4)
	b, err := New(roleClient, Config{Namespace: ns, Image: "virga:kwok", Instance: "agent", Pools: pools,
		FinishedTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logPath := filepath.Join(dir, "server.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	ctx := context.Background()
	srv, err := server.Start(ctx, server.Config{DataDir: filepath.Join(dir, "data"), Backend: b,
		Logger: slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		_ = b.Close()
		t.Fatal(err)
	}
	defer func() { _ = srv.Close() }() // closes b
	t.Cleanup(func() {
		if t.Failed() {
			showFile(t, "the server's log", logPath)
			for _, r := range k.ran() {
				showFile(t, fmt.Sprintf("the log of attempt %s (trial %s) on %s", r.attempt, r.trial, r.node), r.log)
			}
		}
	})
	c := client.New(srv.URL, srv.Token)

	const trials, steps = 3, 10
	release := filepath.Join(dir, "release")
	y := fmt.Sprintf(`name: kwok-agent
entrypoint:
  command: [sh, -c, %q]
  env: {STEPS: "%d", RELEASE: %q}
hyperparameters:
  x: {type: float, min: 0, max: 1}
searcher: random
objective: {metric: loss, direction: minimize}
resources: {cpu: 1}
max_trials: %d
max_concurrent: %d
stop_grace: 5s
checkpoints: {keep_last: %d}
`, agentTrial, steps, release, trials, trials, 2*steps)
	exp, err := c.Submit(ctx, "kwok-agent.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}

	// 1. Every trial runs and has reported 3 steps through its agent.
	var ts []*virga.Trial
	eventually(t, "every trial to report 3 steps", time.Minute, func() bool {
		if ts, err = c.Trials(ctx, exp.ID); err != nil {
			t.Fatal(err)
		}
		ok := len(ts) == trials
		for _, tr := range ts {
			ok = ok && tr.State == virga.TrialRunning && tr.Step >= 3
		}
		return ok
	})

	// 2. The provider reclaims the node where the first trial runs.
	victim := ts[0].ID
	first := runOf(t, k, victim)
	if err := taint(ctx, admin, first.node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { untaint(t, admin, first.node, reclaimTaint.Key) })
	eventually(t, "the reclaimed trial to run again", time.Minute, func() bool {
		tv, err := c.Trial(ctx, victim)
		if err != nil {
			t.Fatal(err)
		}
		n := len(tv.AttemptList)
		return n >= 2 && tv.AttemptList[n-1].State == virga.AttemptRunning
	})
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	// 3. The experiment completes.
	eventually(t, "the experiment to end", time.Minute, func() bool {
		v, err := c.Experiment(ctx, exp.ID)
		if err != nil {
			t.Fatal(err)
		}
		return v.State.Terminal()
	})
	if v, _ := c.Experiment(ctx, exp.ID); v.State != virga.ExperimentCompleted {
		t.Fatalf("experiment ended %s, want %s", v.State, virga.ExperimentCompleted)
	}

	// Every trial completed; its steps and checkpoints reached the server.
	runs := k.ran()
	attempts := map[string]*virga.Attempt{}
	preempted := 0
	for _, tr := range ts {
		tv, err := c.Trial(ctx, tr.ID)
		if err != nil {
			t.Fatal(err)
		}
		if tv.State != virga.TrialCompleted || tv.Step != steps {
			t.Errorf("trial %d: %s at step %d, want %s at step %d", tr.ID, tv.State, tv.Step, virga.TrialCompleted, steps)
		}
		own := map[int64]bool{}
		for i, a := range tv.AttemptList {
			attempts[strconv.FormatInt(a.ID, 10)] = a
			own[a.ID] = true
			last := i == len(tv.AttemptList)-1
			switch {
			case last && a.Outcome != virga.OutcomeSucceeded:
				t.Errorf("trial %d: its last attempt %d ended %s, want %s", tr.ID, a.ID, a.Outcome, virga.OutcomeSucceeded)
			case !last && a.Outcome != virga.OutcomePreempted:
				t.Errorf("trial %d: attempt %d ended %s, want %s", tr.ID, a.ID, a.Outcome, virga.OutcomePreempted)
			case !last:
				preempted++
			}
		}
		ms, err := c.Metrics(ctx, tr.ID)
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, m := range ms {
			got = append(got, m.Step)
			if !own[m.AttemptID] {
				t.Errorf("trial %d: step %d reported by attempt %d, not one of its own", tr.ID, m.Step, m.AttemptID)
			}
		}
		slices.Sort(got)
		if len(got) != steps || got[0] != 1 || got[len(got)-1] != steps {
			t.Errorf("trial %d: steps %v reported, want 1 to %d", tr.ID, got, steps)
		}
		cks, err := c.Checkpoints(ctx, tr.ID)
		if err != nil {
			t.Fatal(err)
		}
		// The agent uploaded the checkpoint directory with each report
		// after it changed: once a step.
		var ckSteps []int64
		for _, ck := range cks {
			ckSteps = append(ckSteps, ck.Step)
			if !own[ck.AttemptID] {
				t.Errorf("trial %d: checkpoint %s uploaded by attempt %d, not one of its own", tr.ID, ck.ID, ck.AttemptID)
			}
		}
		slices.Sort(ckSteps)
		if !slices.Equal(ckSteps, got) {
			t.Errorf("trial %d: checkpoints of steps %v, want one at each step reported, %v", tr.ID, ckSteps, got)
		}
		latest := slices.IndexFunc(cks, func(ck virga.Checkpoint) bool { return ck.ID == tv.Checkpoint })
		if latest < 0 || cks[latest].Step != steps {
			t.Errorf("trial %d: latest checkpoint %q, want the one of step %d (%+v)", tr.ID, tv.Checkpoint, steps, cks)
		}
		if tr.ID != victim {
			continue
		}
		// The preempted trial went on from its checkpoint, on another node.
		if len(tv.AttemptList) < 2 {
			t.Fatalf("trial %d: %d attempts, want a second after the reclaim", tr.ID, len(tv.AttemptList))
		}
		a1, a2 := tv.AttemptList[0], tv.AttemptList[1]
		i := slices.IndexFunc(cks, func(ck virga.Checkpoint) bool { return ck.ID == a2.Restored })
		if i < 0 || cks[i].AttemptID != a1.ID || cks[i].Step < 3 {
			t.Fatalf("trial %d: attempt %d restored %q, want a checkpoint of attempt %d at step 3 or later (checkpoints %+v)",
				tr.ID, a2.ID, a2.Restored, a1.ID, cks)
		}
		from := cks[i].Step
		// The kubelet's SIGTERM reached the agent, which stopped the trial
		// (SIGTERM, which it does not trap) within the grace and exited
		// with its status, 128+15: the backend reads it as SIGTERM, where
		// the kubelet's SIGKILL would have been 137, "killed".
		if a1.Signal != syscall.SIGTERM.String() {
			t.Errorf("trial %d: attempt %d ended with exit code %v, signal %q, want signal %q: the trial's SIGTERM through the agent",
				tr.ID, a1.ID, a1.ExitCode, a1.Signal, syscall.SIGTERM.String())
		}
		// A step reported again replaces its first report: a resumed
		// attempt that started over would own the steps before from.
		for _, m := range ms {
			switch {
			case m.Step <= from && m.AttemptID != a1.ID:
				t.Errorf("trial %d: step %d reported by attempt %d, want %d: the resumed attempt started over instead of going on from step %d",
					tr.ID, m.Step, m.AttemptID, a1.ID, from)
			case m.Step > from && m.AttemptID == a1.ID:
				t.Errorf("trial %d: step %d reported by attempt %d, past the checkpoint of step %d its next attempt resumed from",
					tr.ID, m.Step, m.AttemptID, from)
			}
		}
		r2 := runOfAttempt(t, runs, a2.ID)
		if r2.node == first.node {
			t.Errorf("trial %d: attempt %d ran on the reclaimed node %s", tr.ID, a2.ID, r2.node)
		}
		if data, _ := os.ReadFile(r2.log); !strings.Contains(string(data), "restored checkpoint") {
			t.Errorf("trial %d: the agent of attempt %d did not say it restored a checkpoint:\n%s", tr.ID, a2.ID, data)
		}
		t.Logf("trial %d: attempt %d on %s preempted at step %d; attempt %d on %s resumed from the checkpoint of step %d",
			tr.ID, a1.ID, first.node, stepOf(ms, a1.ID), a2.ID, r2.node, from)
	}
	if preempted == 0 {
		t.Error("no attempt was preempted")
	}

	// The processes: the real agent, one per attempt, one at a time per trial.
	if len(runs) != len(attempts) {
		t.Errorf("%d processes ran for %d attempts", len(runs), len(attempts))
	}
	seen := map[string]bool{}
	last := map[string]kwokRun{}
	for _, r := range runs {
		if attempts[r.attempt] == nil {
			t.Errorf("a process ran for attempt %s, which the server does not know", r.attempt)
		}
		if seen[r.attempt] {
			t.Errorf("attempt %s: a second process", r.attempt)
		}
		seen[r.attempt] = true
		if len(r.argv) != 2 || r.argv[0] != filepath.Join(k.image, "virga") || r.argv[1] != "agent" {
			t.Errorf("attempt %s ran %q, want the pod's command: %s agent", r.attempt, r.argv, filepath.Join(k.image, "virga"))
		}
		if prev, ok := last[r.trial]; ok && (prev.end.IsZero() || r.start.Before(prev.end)) {
			t.Errorf("trial %s: attempt %s started at %s, while attempt %s ran (until %s)", r.trial, r.attempt,
				r.start.Format(time.StampMicro), prev.attempt, prev.end.Format(time.StampMicro))
		}
		last[r.trial] = r
	}
}

// buildVirga builds cmd/virga into a directory of its own (the stand-in for
// the container image's /usr/local/bin) and returns the directory.
func buildVirga(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "virga"), "github.com/virga-ml/virga/cmd/virga")
	build.Dir = "../../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building virga: %v\n%s", err, out)
	}
	return dir
}

// newKWOKAgentKubelet is a kwokKubelet that runs each pod's container (its
// command, args and environment, see containerCommand) in an image whose
// binaries are those in the directory image: the pods of the backend run
// `virga agent` there, which runs the trial.
func newKWOKAgentKubelet(t *testing.T, client *Client, ns, image string) *kwokKubelet {
	return startKWOKKubelet(t, &kwokKubelet{t: t, client: client, ns: ns, image: image, root: t.TempDir(),
		procs: map[types.UID]*kwokProc{}})
}

// containerCommand builds the process of a pod's container as the kubelet
// starts it: its command and args ($(VAR) references expanded), in the
// environment of the image (PATH beginning with k.image; HOME and TMPDIR a
// scratch directory of the pod's own, its working directory unless the
// container names one; HOSTNAME the pod's host name) followed by the
// container's variables, each resolved as the kubelet does (a value with
// $(VAR) references to the variables before it, or the downward API's field
// or resource, a config map's or a secret's key); its output goes to a log
// file, whose path it returns too.
func (k *kwokKubelet) containerCommand(pod *corev1.Pod) (*exec.Cmd, string, error) {
	if len(pod.Spec.Containers) != 1 {
		return nil, "", fmt.Errorf("%d containers: the test's kubelet runs pods of one", len(pod.Spec.Containers))
	}
	ctr := &pod.Spec.Containers[0]
	if len(ctr.EnvFrom) > 0 {
		return nil, "", errors.New("envFrom: the test's kubelet does not resolve it")
	}
	dir := filepath.Join(k.root, pod.Name+"-"+string(pod.UID))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	host := pod.Name
	if pod.Spec.Hostname != "" {
		host = pod.Spec.Hostname
	}
	vars := map[string]string{}
	var env []string
	set := func(name, v string) {
		vars[name] = v
		env = append(env, name+"="+v)
	}
	set("PATH", k.image+string(os.PathListSeparator)+os.Getenv("PATH"))
	set("HOME", dir)
	set("TMPDIR", dir)
	set("HOSTNAME", host)
	for _, e := range ctr.Env {
		v, err := k.envValue(pod, ctr, &e, vars)
		if err != nil {
			return nil, "", fmt.Errorf("env %s: %w", e.Name, err)
		}
		set(e.Name, v)
	}
	var argv []string
	for _, a := range append(slices.Clone(ctr.Command), ctr.Args...) {
		argv = append(argv, expandVars(a, vars))
	}
	if len(argv) == 0 {
		return nil, "", errors.New("no command: the test's kubelet has no image entrypoint to fall back on")
	}
	path, err := lookPath(argv[0], vars["PATH"])
	if err != nil {
		return nil, "", err
	}
	logPath := filepath.Join(dir, "container.log")
	out, err := os.Create(logPath)
	if err != nil {
		return nil, "", err
	}
	cmd := &exec.Cmd{Path: path, Args: append([]string{path}, argv[1:]...), Env: env, Dir: dir, Stdout: out, Stderr: out}
	if ctr.WorkingDir != "" {
		cmd.Dir = ctr.WorkingDir
	}
	return cmd, logPath, nil
}

// envValue resolves a container's variable as the kubelet does.
func (k *kwokKubelet) envValue(pod *corev1.Pod, ctr *corev1.Container, e *corev1.EnvVar, vars map[string]string) (string, error) {
	from := e.ValueFrom
	switch {
	case from == nil:
		return expandVars(e.Value, vars), nil
	case from.FieldRef != nil:
		return fieldValue(pod, from.FieldRef.FieldPath)
	case from.ResourceFieldRef != nil:
		return resourceValue(ctr, from.ResourceFieldRef)
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		cm, err := k.client.CoreV1().ConfigMaps(pod.Namespace).Get(context.Background(), ref.Name, metav1.GetOptions{})
		if err != nil {
			if ref.Optional != nil && *ref.Optional {
				return "", nil
			}
			return "", err
		}
		v, ok := cm.Data[ref.Key]
		if !ok && (ref.Optional == nil || !*ref.Optional) {
			return "", fmt.Errorf("config map %s has no key %q", ref.Name, ref.Key)
		}
		return v, nil
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		s, err := k.client.CoreV1().Secrets(pod.Namespace).Get(context.Background(), ref.Name, metav1.GetOptions{})
		if err != nil {
			if ref.Optional != nil && *ref.Optional {
				return "", nil
			}
			return "", err
		}
		v, ok := s.Data[ref.Key]
		if !ok && (ref.Optional == nil || !*ref.Optional) {
			return "", fmt.Errorf("secret %s has no key %q", ref.Name, ref.Key)
		}
		return string(v), nil
	}
	return "", errors.New("valueFrom names no source")
}

// fieldValue is the downward API's value of a pod's field.
func fieldValue(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		return pod.Status.HostIP, nil
	case "status.podIP":
		return pod.Status.PodIP, nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": pod.Labels, "metadata.annotations": pod.Annotations} {
		if key, ok := strings.CutPrefix(path, prefix+"['"); ok && strings.HasSuffix(key, "']") {
			return m[strings.TrimSuffix(key, "']")], nil
		}
	}
	return "", fmt.Errorf("fieldRef %q: not a field the test's kubelet resolves", path)
}

// resourceValue is the downward API's value of a container's limit (or,
// without one, request) in units of the divisor, rounded up.
func resourceValue(ctr *corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok || kind != "limits" && kind != "requests" {
		return "", fmt.Errorf("resourceFieldRef %q: want limits.<name> or requests.<name>", ref.Resource)
	}
	q, found := ctr.Resources.Limits[corev1.ResourceName(name)]
	if kind == "requests" || !found {
		q, found = ctr.Resources.Requests[corev1.ResourceName(name)]
	}
	if !found {
		return "", fmt.Errorf("resourceFieldRef %q: the container sets none (the node's allocatable is not played)", ref.Resource)
	}
	div := ref.Divisor
	if div.IsZero() {
		div = resource.MustParse("1")
	}
	if name == "cpu" {
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(div.MilliValue()))), 10), nil
	}
	return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(div.Value()))), 10), nil
}

// expandVars expands the $(NAME) references of s to the variables in vars,
// as the kubelet does in commands, args and values: $$ is a $, and a
// reference to an unknown variable stays as it is.
func expandVars(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteByte('$')
				continue
			}
			ref := s[i : i+3+end]
			if v, ok := vars[s[i+2:i+2+end]]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(ref)
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// lookPath finds an executable name on the search path path.
func lookPath(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, d := range filepath.SplitList(path) {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: executable file not found in the image's PATH %s", name, path)
}

// killTree sends SIGKILL to every descendant of pid, as the end of a
// container kills all its processes (the agent runs the trial's processes
// in process groups of their own).
func killTree(pid int) {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(stat), ')')
		f := strings.Fields(string(stat[i+1:]))
		if i < 0 || len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	for todo := children[pid]; len(todo) > 0; {
		p := todo[0]
		todo = append(todo[1:], children[p]...)
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// runOf returns the process running for trial id now.
func runOf(t *testing.T, k *kwokKubelet, id int64) kwokRun {
	t.Helper()
	for _, r := range k.ran() {
		if r.trial == strconv.FormatInt(id, 10) && r.end.IsZero() {
			return r
		}
	}
	t.Fatalf("no process runs for trial %d", id)
	return kwokRun{}
}

// runOfAttempt returns the process of attempt id.
func runOfAttempt(t *testing.T, runs []kwokRun, id int64) kwokRun {
	t.Helper()
	for _, r := range runs {
		if r.attempt == strconv.FormatInt(id, 10) {
			return r
		}
	}
	t.Fatalf("no process ran for attempt %d", id)
	return kwokRun{}
}

// stepOf returns the last step attempt id reported.
func stepOf(ms []virga.Metric, id int64) int64 {
	var n int64
	for _, m := range ms {
		if m.AttemptID == id {
			n = max(n, m.Step)
		}
	}
	return n
}

// eventually waits until cond holds, for at most d.
func eventually(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// showFile logs a file's last 4 KiB.
func showFile(t *testing.T, what, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Logf("%s: %v", what, err)
		return
	}
	if len(data) > 4096 {
		data = data[len(data)-4096:]
	}
	t.Logf("%s (%s):\n%s", what, path, data)
}

// TestKWOKKubeletContainerCommand checks how the test's kubelet builds a
// pod's container process (it needs no cluster): the command found on the
// image's PATH, $(VAR) references expanded in args and values, the
// downward API's fields and resources resolved, envFrom refused.
func TestKWOKKubeletContainerCommand(t *testing.T) {
	image := t.TempDir()
	if err := os.WriteFile(filepath.Join(image, "virga"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	k := &kwokKubelet{t: t, image: image, root: t.TempDir()}
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	res := func(r, div string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: r, Divisor: resource.MustParse(div)}}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "virga-7-0", Namespace: "ns", UID: "u1", Labels: map[string]string{LabelTrial: "3"}},
		Spec: corev1.PodSpec{NodeName: "kwok-spot-001", Containers: []corev1.Container{{
			Name: ContainerName, Command: []string{"virga", "agent"}, Args: []string{"--pod=$(POD)", "$$(POD)", "$(NOPE)"},
			Env: []corev1.EnvVar{
				{Name: "A", Value: "1"},
				{Name: "B", Value: "$(A)-$$(A)-$(NOPE)-$(C)"},
				{Name: "C", Value: "3"},
				{Name: "POD", ValueFrom: field("metadata.name")},
				{Name: "NODE", ValueFrom: field("spec.nodeName")},
				{Name: "TRIAL", ValueFrom: field("metadata.labels['" + LabelTrial + "']")},
				{Name: "CPU", ValueFrom: res("limits.cpu", "1")},
				{Name: "MEM", ValueFrom: res("requests.memory", "1Mi")},
			},
			Resources: corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m")},
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			},
		}}},
	}
	cmd, logPath, err := k.containerCommand(pod)
	if err != nil {
		t.Fatal(err)
	}
	defer cmd.Stdout.(*os.File).Close()
	want := []string{filepath.Join(image, "virga"), "agent", "--pod=virga-7-0", "$(POD)", "$(NOPE)"}
	if cmd.Path != want[0] || !slices.Equal(cmd.Args, want) {
		t.Errorf("command %s %q, want %q", cmd.Path, cmd.Args, want)
	}
	for _, kv := range []string{"A=1", "B=1-$(A)-$(NOPE)-$(C)", "POD=virga-7-0", "NODE=kwok-spot-001", "TRIAL=3", "CPU=2", "MEM=64",
		"HOSTNAME=virga-7-0", "HOME=" + cmd.Dir, "PATH=" + image + ":" + os.Getenv("PATH")} {
		if !slices.Contains(cmd.Env, kv) {
			t.Errorf("environment lacks %s: %q", kv, cmd.Env)
		}
	}
	if filepath.Dir(logPath) != cmd.Dir {
		t.Errorf("log %s, want it in the pod's directory %s", logPath, cmd.Dir)
	}
	pod.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{}}}
	if _, _, err := k.containerCommand(pod); err == nil || !strings.Contains(err.Error(), "envFrom") {
		t.Errorf("a container with envFrom: %v, want an error naming envFrom", err)
	}
}
