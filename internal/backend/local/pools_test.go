package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
)

// toggles is an Availability that starts up (or down, with startDown) and
// flips at each of its times.
type toggles struct {
	startDown bool
	at        []time.Time
}

var _ backend.Availability = toggles{}

func (s toggles) Up(t time.Time) (bool, time.Time) {
	up := !s.startDown
	for _, x := range s.at {
		if t.Before(x) {
			return up, x
		}
		up = !up
	}
	return up, time.Time{}
}

func TestPoolsConfig(t *testing.T) {
	t.Parallel()
	one := virga.Resources{CPU: 1, MemoryMB: 100}
	bad := []struct {
		name  string
		pools []Pool
		want  string // in the error
	}{
		{"no name", []Pool{{Capacity: one}}, "pool 1 has no name"},
		{"twice", []Pool{{Name: "a", Capacity: one}, {Name: "a", Capacity: one}}, `pool "a" is configured twice`},
		{"no capacity", []Pool{{Name: "a"}}, `pool "a": capacity`},
		{"negative", []Pool{{Name: "a", Capacity: virga.Resources{CPU: -1}}}, `pool "a": capacity`},
		{"negative warning", []Pool{{Name: "a", Capacity: one, Warning: -time.Second}}, "negative warning"},
	}
	for _, tc := range bad {
		if _, err := New(Config{Pools: tc.pools, ShimCommand: []string{os.Args[0]}, WarmShims: -1}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}

	if got := newBackend(t, Config{Capacity: one}).Pools(); got != nil {
		t.Errorf("Pools without pools configured = %+v, want nil", got)
	}

	now := time.Now()
	down := toggles{startDown: true, at: []time.Time{now.Add(time.Hour)}}
	b := newBackend(t, Config{Capacity: virga.Resources{CPU: 99}, Pools: []Pool{
		{Name: "ondemand", Capacity: one},
		{Name: "spot", Capacity: virga.Resources{CPU: 4, GPU: 1}, Availability: down, Warning: 30 * time.Second},
	}})
	want := []backend.PoolStatus{
		{Name: "ondemand", Capacity: one, Free: one, Up: true},
		{Name: "spot", Capacity: virga.Resources{CPU: 4, GPU: 1}, Free: virga.Resources{CPU: 4, GPU: 1},
			Preemptible: true, Up: false, Next: now.Add(time.Hour), Warning: 30 * time.Second},
	}
	if diff := cmp.Diff(want, b.Pools()); diff != "" {
		t.Errorf("Pools (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff(virga.Resources{CPU: 5, MemoryMB: 100, GPU: 1}, b.Capacity()); diff != "" {
		t.Errorf("Capacity, the sum of the pools' (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff(one, b.Free()); diff != "" {
		t.Errorf("Free, of the pools up (-want,+got):\n%s", diff)
	}
}

func TestPoolReservations(t *testing.T) {
	t.Parallel()
	one := virga.Resources{CPU: 1}
	b := newBackend(t, Config{Pools: []Pool{{Name: "a", Capacity: one}, {Name: "b", Capacity: one}}})

	first := shSpec(t, 1, `exec sleep 100`)
	first.Resources = one // no Pool: the default, the first
	if ev := start(t, b, first); ev.Pool != "a" {
		t.Errorf("Started.Pool = %q, want the default pool a", ev.Pool)
	}
	second := shSpec(t, 2, `exit 0`)
	second.Resources, second.Pool = one, "a"
	if err := b.Start(context.Background(), second); !errors.Is(err, virga.ErrNoCapacity) || !strings.Contains(err.Error(), "in pool a") {
		t.Fatalf("Start on the full pool a: %v, want ErrNoCapacity naming the pool", err)
	}
	unknown := shSpec(t, 3, `exit 0`)
	unknown.Pool = "c"
	if err := b.Start(context.Background(), unknown); err == nil || errors.Is(err, virga.ErrNoCapacity) || !strings.Contains(err.Error(), "the pools: a, b") {
		t.Fatalf("Start on an unknown pool: %v, want an error listing the pools", err)
	}
	second.Pool = "b"
	if ev := start(t, b, second); ev.Pool != "b" {
		t.Errorf("Started.Pool = %q, want b", ev.Pool)
	}
	if ev := expect(t, b, 2, backend.Exited); ev.Pool != "b" || ev.Preempted {
		t.Errorf("Exited = %+v, want pool b, not preempted", ev)
	}
	if got := readPoolFile(first.Dir); got != "a" {
		t.Errorf("%s = %q, want a", PoolFile, got)
	}
	if err := b.Stop(1, 0); err != nil {
		t.Fatal(err)
	}
	expect(t, b, 1, backend.Exited)
	if diff := cmp.Diff(virga.Resources{CPU: 2}, b.Free()); diff != "" {
		t.Errorf("Free after both ended (-want,+got):\n%s", diff)
	}
}

// termScript is a trial that records each SIGTERM (the number received, in
// ckpt) and, with exitOnTerm, exits 0 on the first; otherwise it runs on
// until killed.
func termScript(exitOnTerm bool) string {
	onTerm := `n=$((n+1)); echo $n > ckpt`
	if exitOnTerm {
		onTerm += `; exit 0`
	}
	return `n=0; trap '` + onTerm + `' TERM; echo ready; while :; do sleep 0.02; done`
}

// waitFile polls for path and returns when it appeared.
func waitFile(t *testing.T, path string) time.Time {
	t.Helper()
	waitFor(t, path, func() bool { _, err := os.Stat(path); return err == nil })
	return time.Now()
}

// A spot pool's reclaim at T: SIGTERM at T - warning, then SIGKILL at T for
// a trial that runs on; the Exited event says Preempted; while the pool is
// down Start fails with ErrNoCapacity, and it works again once it is back.
func TestSpotReclaim(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		exitOnTerm bool
	}{{"checkpoints and exits", true}, {"ignores SIGTERM", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const warning = 700 * time.Millisecond
			t0 := time.Now()
			reclaim, back := t0.Add(1500*time.Millisecond), t0.Add(2500*time.Millisecond)
			b := newBackend(t, Config{Pools: []Pool{{Name: "spot", Capacity: virga.Resources{CPU: 1},
				Availability: toggles{at: []time.Time{reclaim, back}}, Warning: warning}}})
			s := shSpec(t, 1, termScript(tc.exitOnTerm))
			s.Resources, s.Pool = virga.Resources{CPU: 1}, "spot"
			start(t, b, s)
			waitOutput(t, s.Dir, "ready")
			if time.Now().After(reclaim.Add(-warning)) {
				t.Skip("the trial was not ready before the warning; the machine is too slow for this test")
			}
			termAt := waitFile(t, filepath.Join(s.Workdir, "ckpt"))
			ev := expect(t, b, 1, backend.Exited)
			exitedAt := time.Now()
			if termAt.Before(reclaim.Add(-warning)) {
				t.Errorf("SIGTERM %s before the reclaim, want no earlier than the %s warning", reclaim.Sub(termAt), warning)
			}
			if !ev.Preempted || ev.Pool != "spot" || !strings.Contains(ev.Message, "preempted: pool spot reclaimed its capacity") {
				t.Errorf("Exited = %+v, want Preempted on pool spot with a message saying so", ev)
			}
			if tc.exitOnTerm {
				if ev.ExitCode == nil || *ev.ExitCode != 0 || !exitedAt.Before(reclaim) {
					t.Errorf("Exited = %+v at reclaim%+v, want exit code 0 before the reclaim", ev, exitedAt.Sub(reclaim))
				}
			} else {
				if ev.Signal != "killed" || exitedAt.Before(reclaim) {
					t.Errorf("Exited = %+v at reclaim%+v, want killed at the reclaim", ev, exitedAt.Sub(reclaim))
				}
			}
			if data, _ := os.ReadFile(filepath.Join(s.Workdir, "ckpt")); strings.TrimSpace(string(data)) != "1" {
				t.Errorf("the trial got %s SIGTERMs, want 1", data)
			}
			if _, err := readPreemptRecord(s.Dir); err != nil {
				t.Errorf("no %s: %v", PreemptFile, err)
			}

			// Down until back.
			waitFor(t, "the pool to go down", func() bool { return !b.Pools()[0].Up })
			if st := b.Pools()[0]; !st.Next.Equal(back) || b.Free() != (virga.Resources{}) {
				t.Errorf("Pools = %+v, Free %+v; want down until %v, nothing free", st, b.Free(), back)
			}
			again := shSpec(t, 2, `exit 0`)
			again.Pool = "spot"
			if err := b.Start(context.Background(), again); !errors.Is(err, virga.ErrNoCapacity) || !strings.Contains(err.Error(), "pool spot is down") {
				t.Fatalf("Start on the pool down: %v, want ErrNoCapacity saying it is down", err)
			}
			waitFor(t, "the pool to come back", func() bool { return b.Pools()[0].Up })
			start(t, b, again)
			if ev := expect(t, b, 2, backend.Exited); ev.Preempted || ev.ExitCode == nil || *ev.ExitCode != 0 {
				t.Errorf("Exited after the pool came back = %+v, want exit code 0, not preempted", ev)
			}
		})
	}
}

// An attempt started after its pool's warning began gets SIGTERM at once and
// SIGKILL at the reclaim.
func TestSpotStartDuringWarning(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	reclaim := t0.Add(1500 * time.Millisecond)
	b := newBackend(t, Config{Pools: []Pool{{Name: "spot", Capacity: virga.Resources{CPU: 1},
		Availability: toggles{at: []time.Time{reclaim}}, Warning: time.Hour}}})
	if st := b.Pools()[0]; !st.Up || !st.Reclaiming(time.Now()) {
		t.Fatalf("Pools = %+v, want up and reclaiming", st)
	}
	// SIGTERM may come before the shell sets its trap: then it dies of it at
	// once; else the trap records it and the trial is killed at the reclaim.
	s := shSpec(t, 1, `trap 'echo term > ckpt' TERM; while :; do sleep 0.02; done`)
	s.Pool = "spot"
	start(t, b, s)
	ev := expect(t, b, 1, backend.Exited)
	exitedAt := time.Now()
	switch {
	case !ev.Preempted:
		t.Errorf("Exited = %+v, want preempted", ev)
	case ev.Signal == "terminated":
		if !exitedAt.Before(reclaim) {
			t.Errorf("died of SIGTERM at reclaim%+v, want at once", exitedAt.Sub(reclaim))
		}
	case ev.Signal == "killed":
		fi, err := os.Stat(filepath.Join(s.Workdir, "ckpt"))
		if err != nil || !fi.ModTime().Before(reclaim) || exitedAt.Before(reclaim) {
			t.Errorf("killed at reclaim%+v, SIGTERM trapped: %v; want SIGTERM at once and SIGKILL at the reclaim", exitedAt.Sub(reclaim), err)
		}
	default:
		t.Errorf("Exited = %+v, want terminated at once or killed at the reclaim", ev)
	}
}

// Without a warning, a reclaim kills at once.
func TestSpotReclaimWithoutWarning(t *testing.T) {
	t.Parallel()
	reclaim := time.Now().Add(time.Second)
	b := newBackend(t, Config{Pools: []Pool{{Name: "spot", Capacity: virga.Resources{CPU: 1},
		Availability: toggles{at: []time.Time{reclaim}}}}})
	s := shSpec(t, 1, `trap 'echo term > ckpt' TERM; echo ready; while :; do sleep 0.02; done`)
	s.Pool = "spot"
	start(t, b, s)
	ev := expect(t, b, 1, backend.Exited)
	if !ev.Preempted || ev.Signal != "killed" || time.Now().Before(reclaim) {
		t.Errorf("Exited = %+v at reclaim%+v, want killed at the reclaim, preempted", ev, time.Since(reclaim))
	}
	if _, err := os.Stat(filepath.Join(s.Workdir, "ckpt")); err == nil {
		t.Error("the trial got SIGTERM, want none without a warning")
	}
}

// A server that restarts keeps preemption going: an attempt it adopts is
// warned (if the earlier server had not) and killed at the reclaim, once,
// and its Exited event says Preempted, also for an attempt that ended
// preempted while no server ran.
func TestAdoptPreempted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// warnedBefore: the first server closes after the warning (else before).
		warnedBefore bool
	}{{"warned by the earlier server", true}, {"warned by the adopting server", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const warning = 1200 * time.Millisecond
			reclaim := time.Now().Add(2500 * time.Millisecond)
			cfg := Config{Pools: []Pool{
				{Name: "ondemand", Capacity: virga.Resources{CPU: 1}},
				{Name: "spot", Capacity: virga.Resources{CPU: 1}, Availability: toggles{at: []time.Time{reclaim}}, Warning: warning},
			}}
			a := newBackend(t, cfg)
			s := shSpec(t, 1, termScript(false))
			s.Resources, s.Pool = virga.Resources{CPU: 1}, "spot"
			started := start(t, a, s)
			waitOutput(t, s.Dir, "ready")
			if time.Now().After(reclaim.Add(-warning)) {
				t.Skip("the trial was not ready before the warning; the machine is too slow for this test")
			}
			if tc.warnedBefore {
				waitFile(t, filepath.Join(s.Workdir, "ckpt"))
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}

			b := newBackend(t, cfg)
			// No Pool in the record: the backend finds it in the directory.
			if err := b.Adopt(context.Background(), &virga.Attempt{ID: 1, Dir: s.Dir}, s.Resources); err != nil {
				t.Fatal(err)
			}
			if ev := expect(t, b, 1, backend.Started); ev.PID != started.PID || ev.Pool != "spot" {
				t.Errorf("adopted Started = %+v, want pid %d on pool spot", ev, started.PID)
			}
			if st := b.Pools(); st[1].Free != (virga.Resources{}) || st[0].Free != s.Resources {
				t.Errorf("Pools = %+v, want the adopted attempt reserved in spot", st)
			}
			ev := expect(t, b, 1, backend.Exited)
			if !ev.Preempted || ev.Signal != "killed" || time.Now().Before(reclaim) {
				t.Errorf("Exited = %+v at reclaim%+v, want killed at the reclaim, preempted", ev, time.Since(reclaim))
			}
			if data, _ := os.ReadFile(filepath.Join(s.Workdir, "ckpt")); strings.TrimSpace(string(data)) != "1" {
				t.Errorf("the trial got %q SIGTERMs, want 1", data)
			}
			b.Close()

			// A third server finds the attempt over, and preempted.
			c := newBackend(t, cfg)
			if err := c.Adopt(context.Background(), &virga.Attempt{ID: 1, Dir: s.Dir, Pool: "spot"}, s.Resources); err != nil {
				t.Fatal(err)
			}
			// The lock is free, but a process this test binary forks at that
			// moment (the other subtest's shims run in parallel) holds every
			// open descriptor, the lock's too, until it execs: the adopter
			// may then see the lock held for a moment and report the attempt
			// running (Started) before the next poll finds it over.
			ev = nextEvent(t, c)
			if ev.AttemptID == 1 && ev.Kind == backend.Started {
				ev = nextEvent(t, c)
			}
			if ev.AttemptID != 1 || ev.Kind != backend.Exited || !ev.Preempted || ev.Signal != "killed" {
				t.Errorf("Exited of the ended attempt = %+v, want killed, preempted", ev)
			}
		})
	}
}

// An attempt adopted on a pool that went down while no server ran is killed
// at once.
func TestAdoptOnPoolDown(t *testing.T) {
	t.Parallel()
	s := shSpec(t, 1, termScript(false))
	s.Pool = "spot"
	a := newBackend(t, Config{Pools: []Pool{{Name: "spot", Capacity: virga.Resources{CPU: 1}}}})
	start(t, a, s)
	waitOutput(t, s.Dir, "ready")
	a.Close()

	down := toggles{startDown: true}
	b := newBackend(t, Config{Pools: []Pool{{Name: "spot", Capacity: virga.Resources{CPU: 1}, Availability: down, Warning: time.Minute}}})
	if err := b.Adopt(context.Background(), &virga.Attempt{ID: 1, Dir: s.Dir, Pool: "spot"}, s.Resources); err != nil {
		t.Fatal(err)
	}
	expect(t, b, 1, backend.Started)
	if ev := expect(t, b, 1, backend.Exited); !ev.Preempted || ev.Signal != "killed" {
		t.Errorf("Exited = %+v, want killed at once, preempted", ev)
	}
	rec, err := readPreemptRecord(s.Dir)
	if err != nil || rec.Pool != "spot" {
		t.Errorf("%s = %+v, %v; want pool spot", PreemptFile, rec, err)
	}
}
