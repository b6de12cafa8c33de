package agent

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestGangRankEnvironment: every process gets its own rank and the gang's
// rendezvous address, as torch.distributed's env:// initialisation reads them.
func TestGangRankEnvironment(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "ranks")
	g := &Gang{Argv: []string{"sh", "-c", `echo "$RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $NODE_RANK $MASTER_ADDR $MASTER_PORT" >> ` + out},
		Env: os.Environ(), NodeRank: 1, Nodes: 2, ProcessesPerNode: 3, MasterAddr: "n0.example", MasterPort: 29511, Grace: time.Second}
	code, err := g.Run(context.Background())
	if err != nil || code != 0 {
		t.Fatalf("Run = %d, %v; want 0, nil", code, err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	slices.Sort(lines)
	want := []string{"3 0 6 3 1 n0.example 29511", "4 1 6 3 1 n0.example 29511", "5 2 6 3 1 n0.example 29511"}
	if !slices.Equal(lines, want) {
		t.Fatalf("ranks:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

// TestGangOneFailureEndsAll: when one member fails, the others are told to
// stop (SIGTERM) and the gang's status is the failure's.
func TestGangOneFailureEndsAll(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "terminated")
	script := `if [ "$LOCAL_RANK" = 1 ]; then sleep 0.2; exit 3; fi
trap 'echo $LOCAL_RANK >> ` + marker + `; exit 0' TERM
sleep 30 & wait`
	g := &Gang{Argv: []string{"sh", "-c", script}, Env: os.Environ(), Nodes: 1, ProcessesPerNode: 3, MasterAddr: "127.0.0.1", MasterPort: 29512, Grace: 10 * time.Second}
	start := time.Now()
	code, err := g.Run(context.Background())
	if err != nil || code != 3 {
		t.Fatalf("Run = %d, %v; want 3 (the failed member's status)", code, err)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Fatalf("the gang took %v to end after a member failed; want well under its 10s grace", d)
	}
	b, _ := os.ReadFile(marker)
	got := strings.Fields(string(b))
	slices.Sort(got)
	if !slices.Equal(got, []string{"0", "2"}) {
		t.Fatalf("members that got SIGTERM: %v; want [0 2]", got)
	}
}

// TestGangStopKillsAfterGrace: a member that ignores SIGTERM is killed after
// the grace period; the gang reports the kill.
func TestGangStopKillsAfterGrace(t *testing.T) {
	g := &Gang{Argv: []string{"sh", "-c", `trap '' TERM; sleep 30 & wait; sleep 30`}, Env: os.Environ(), Nodes: 1, ProcessesPerNode: 2,
		MasterAddr: "127.0.0.1", MasterPort: 29513, Grace: 300 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	code, err := g.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if code != 128+9 {
		t.Fatalf("status %d; want 137 (killed)", code)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("stopping took %v; want about the 300ms grace", d)
	}
}

func TestGangMainUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"2", "29500", "5", "x", "true"}, {"0", "29500", "5", "--", "true"}, {"2", "p", "5", "--", "true"}} {
		if code := GangMain(args); code != 2 {
			t.Errorf("GangMain(%q) = %d; want 2 (usage)", args, code)
		}
	}
}
