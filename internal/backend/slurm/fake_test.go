package slurm

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/clock"
)

// fakeSlurm writes sbatch, squeue and scancel scripts into a directory:
// sbatch answers job 42 after a delay, squeue prints the file "queue" (in
// QueueFormat), and scancel and scontrol append their arguments to the
// files "scancel.log" and "scontrol.log".
func fakeSlurm(t *testing.T, sbatchDelay string) (dir string, cfg Config) {
	t.Helper()
	dir = t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg = Config{
		Pools:        []Pool{{Name: "p", Partition: "p", Node: virga.Resources{CPU: 2, MemoryMB: 1000}, Nodes: 1}},
		AgentPath:    "/bin/true",
		PollInterval: 20 * time.Millisecond,
		Sbatch:       write("sbatch", "cat >/dev/null; sleep "+sbatchDelay+"; echo 42\n"),
		Squeue:       write("squeue", "cat "+dir+"/queue 2>/dev/null\n"),
		Scancel:      write("scancel", "echo \"$*\" >>"+dir+"/scancel.log\n"),
		Scontrol:     write("scontrol", "echo \"$*\" >>"+dir+"/scontrol.log\n"),
		Location:     time.UTC,
	}
	return dir, cfg
}

func setQueue(t *testing.T, dir, lines string) {
	t.Helper()
	tmp := filepath.Join(dir, "queue.tmp")
	if err := os.WriteFile(tmp, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "queue")); err != nil {
		t.Fatal(err)
	}
}

func nextEvent(t *testing.T, b *Backend) backend.Event {
	t.Helper()
	select {
	case ev := <-b.Events():
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
	return backend.Event{}
}

func noEvent(t *testing.T, b *Backend, d time.Duration) {
	t.Helper()
	select {
	case ev := <-b.Events():
		t.Fatalf("unexpected event %+v", ev)
	case <-time.After(d):
	}
}

// A Stop that comes while sbatch runs cancels the job once it exists and
// its state is known: a waiting job is cancelled outright, and gets Exited
// without Started.
func TestStopWhileSubmitting(t *testing.T) {
	dir, cfg := fakeSlurm(t, "0.3")
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := &backend.StartSpec{AttemptID: 7, TrialID: 1, Argv: []string{"x"}, Dir: dir, Resources: virga.Resources{CPU: 1}}
	errc := make(chan error, 1)
	go func() { errc <- b.Start(t.Context(), s) }()
	time.Sleep(100 * time.Millisecond)
	if err := b.Stop(7, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	setQueue(t, dir, "42|PENDING|Priority|0|0|N/A|N/A|N/A|(null)|virga-a7|\n")
	for range 200 {
		if b, _ := os.ReadFile(filepath.Join(dir, "scancel.log")); len(b) > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "scancel.log"))
	if strings.TrimSpace(string(got)) != "42" {
		t.Fatalf("scancel calls %q, want one plain scancel of job 42", got)
	}
	setQueue(t, dir, "42|CANCELLED|None|0|0|N/A|2026-11-22T05:00:00|2026-11-22T05:00:00|(null)|virga-a7|\n")
	ev := nextEvent(t, b)
	if ev.Kind != backend.Exited || ev.AttemptID != 7 || ev.Preempted || ev.Lost || ev.Signal != "killed" {
		t.Fatalf("event %+v, want Exited (cancelled) without Started", ev)
	}
	if f := b.Free(); f.CPU != 2 {
		t.Fatalf("free %+v after the exit", f)
	}
}

// A running job that is stopped gets SIGTERM on its steps, then SIGKILL
// and a cancellation when the grace has passed on the backend's clock; a
// job that vanishes from squeue is lost, but only once a query begun after
// its submission misses it.
func TestStopAndLost(t *testing.T) {
	dir, cfg := fakeSlurm(t, "0")
	clk := clock.NewFake(time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC))
	cfg.Clock = clk
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	setQueue(t, dir, "42|RUNNING|None|0|0|N/A|2026-11-22T05:00:00|NONE|(null)|virga-a8|\n")
	s := &backend.StartSpec{AttemptID: 8, TrialID: 1, Argv: []string{"x"}, Dir: dir, Resources: virga.Resources{CPU: 1}, Pool: "p"}
	if err := b.Start(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, b); ev.Kind != backend.Started || ev.Pool != "p" || !ev.Time.Equal(time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC)) {
		t.Fatalf("event %+v, want Started at the job's start", ev)
	}
	_ = b.Stop(8, time.Hour)
	waitLog(t, dir, "scancel.log", "--signal=TERM 42\n")
	clk.Advance(time.Hour - time.Millisecond)
	if got, _ := os.ReadFile(filepath.Join(dir, "scancel.log")); string(got) != "--signal=TERM 42\n" {
		t.Fatalf("scancel calls %q before the grace ended, want the SIGTERM only", got)
	}
	clk.Advance(time.Millisecond)
	waitLog(t, dir, "scancel.log", "--signal=TERM 42\n--signal=KILL --full 42\n42\n")
	noEvent(t, b, 100*time.Millisecond)

	// Gone from squeue: lost.
	setQueue(t, dir, "")
	ev := nextEvent(t, b)
	if ev.Kind != backend.Exited || !ev.Lost || ev.AttemptID != 8 || ev.LastSeen.IsZero() || ev.LastSeen.After(ev.Time) {
		t.Fatalf("event %+v, want Exited Lost, last seen by an earlier poll", ev)
	}
	noEvent(t, b, 100*time.Millisecond)
}

// waitLog waits until the file name in dir holds want.
func waitLog(t *testing.T, dir, name, want string) {
	t.Helper()
	var got []byte
	for range 300 {
		if got, _ = os.ReadFile(filepath.Join(dir, name)); string(got) == want {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: %q, want %q", name, got, want)
}

// Jobs are submitted held and released once their ID is known; a restarted
// server releases the held job of an attempt it adopts, and once it has
// adopted all cancels the jobs with its prefix that no attempt watches,
// leaving other servers' jobs and ended ones alone.
func TestHeldAndOrphans(t *testing.T) {
	dir, cfg := fakeSlurm(t, "0")
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := &backend.StartSpec{AttemptID: 4, TrialID: 1, Argv: []string{"x"}, Dir: dir, Resources: virga.Resources{CPU: 1}}
	if err := b.Start(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	waitLog(t, dir, "scontrol.log", "release 42\n")

	setQueue(t, dir, `42|RUNNING|None|0|0|N/A|2026-11-22T05:00:00|NONE|(null)|virga-a4|
50|PENDING|JobHeldUser|0|0|N/A|N/A|N/A|(null)|virga-a5|
51|RUNNING|None|0|0|N/A|2026-11-22T05:00:00|NONE|(null)|virga-a6|
52|PENDING|JobHeldUser|0|0|N/A|N/A|N/A|(null)|other-a6|
53|COMPLETED|None|0|0|N/A|2026-11-22T05:00:00|2026-11-22T05:00:01|(null)|virga-a9|
`)
	if err := b.Adopt(t.Context(), &virga.Attempt{ID: 5}, virga.Resources{CPU: 1}); err != nil {
		t.Fatal(err)
	}
	waitLog(t, dir, "scontrol.log", "release 42\nrelease 50\n")
	if ev := nextEvent(t, b); ev.AttemptID != 4 || ev.Kind != backend.Started {
		t.Fatalf("event %+v, want attempt 4 Started", ev)
	}
	noEvent(t, b, 100*time.Millisecond) // nothing of attempt 5 until its job runs
	time.Sleep(5 * cfg.PollInterval)    // polls with attempt 6 not adopted yet
	if got, _ := os.ReadFile(filepath.Join(dir, "scancel.log")); len(got) > 0 {
		t.Fatalf("scancel %q before AdoptedAll, want none", got)
	}
	b.AdoptedAll()
	var got []byte
	for range 300 {
		if got, _ = os.ReadFile(filepath.Join(dir, "scancel.log")); len(got) > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(5 * cfg.PollInterval) // more polls while job 51 is still listed
	got, _ = os.ReadFile(filepath.Join(dir, "scancel.log"))
	lines := strings.Fields(string(got))
	if len(lines) == 0 || slices.ContainsFunc(lines, func(l string) bool { return l != "51" }) {
		t.Fatalf("scancel %q, want job 51 (the orphan) and nothing else", got)
	}
	waitLog(t, dir, "scontrol.log", "release 42\nrelease 50\n")
	if st := b.Stats(); st.Orphans < 1 || st.Releases != 2 {
		t.Fatalf("stats %+v, want the orphan cancelled and two releases", st)
	}
}

// A job that reaches Slurm after its attempt was found lost (its sbatch,
// run by a server that died, was still under way) is cancelled though no
// attempt is left to watch: the poll goes on for OrphanWatch.
func TestLateOrphanWithoutAttempts(t *testing.T) {
	dir, cfg := fakeSlurm(t, "0")
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	setQueue(t, dir, "")
	if err := b.Adopt(t.Context(), &virga.Attempt{ID: 7}, virga.Resources{CPU: 1}); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, b); ev.Kind != backend.Exited || !ev.Lost || !ev.LastSeen.IsZero() {
		t.Fatalf("event %+v, want Exited Lost, never seen", ev)
	}
	setQueue(t, dir, "60|PENDING|JobHeldUser|0|0|N/A|N/A|N/A|(null)|virga-a7|\n")
	var got []byte
	for range 300 {
		if got, _ = os.ReadFile(filepath.Join(dir, "scancel.log")); len(got) > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if f := strings.Fields(string(got)); len(f) == 0 || f[0] != "60" {
		t.Fatalf("scancel %q, want the late job 60 cancelled", got)
	}
}
