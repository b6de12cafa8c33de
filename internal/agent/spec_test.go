package agent

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
)

func TestSpecRoundTrip(t *testing.T) {
	st := &backend.StartSpec{AttemptID: 41, TrialID: 7, ExperimentID: 2, Argv: []string{"python3", "train.py"},
		Env:       map[string]string{"VIRGA_TOKEN": "vt7.x", "VIRGA_CHECKPOINT_DIR": "/srv/trials/7", "VIRGA_REPORT_URL": "http://h:7070/api/v1/attempts/41/report", "LR": "0.1"},
		ReportURL: "http://h:7070/api/v1/attempts/41/report", Token: "vt7.x", Checkpoint: "abc", Nodes: 2, ProcessesPerNode: 4,
		Resources: virga.Resources{CPU: 8}, StopGrace: 30 * time.Second}
	s := FromStart(st)
	if s.Server != "http://h:7070" {
		t.Errorf("Server = %q; want the report URL's base", s.Server)
	}
	if _, ok := s.Env["VIRGA_CHECKPOINT_DIR"]; ok {
		t.Error("the server's checkpoint directory must not reach the node; the agent sets its own")
	}
	got, err := Decode(s.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, s)
	}
	if p := MasterPort(41); p != MasterPort(20041) || p < 10000 || p >= 30000 || MasterPort(42) == p {
		t.Errorf("MasterPort(41) = %d", p)
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "is not set"},
		{"%%%", "not base64"},
		{"bm90IGpzb24=", "VIRGA_AGENT_SPEC"},
		{(&Spec{AttemptID: 1, TrialID: 1, Server: "http://x", Token: "t", Nodes: 1, ProcessesPerNode: 1}).Encode(), "argv"},
		{(&Spec{AttemptID: 1, TrialID: 1, Argv: []string{"x"}, Token: "t", Nodes: 1, ProcessesPerNode: 1}).Encode(), "server"},
		{(&Spec{AttemptID: 1, TrialID: 1, Argv: []string{"x"}, Server: "http://x", Token: "t"}).Encode(), "nodes"},
	} {
		if _, err := Decode(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Decode(%q) = %v; want an error about %s", c.in, err, c.want)
		}
	}
}

// TestRendezvous: the rank and first node come from the backend's
// variables, else from Slurm's; a gang with neither is refused.
func TestRendezvous(t *testing.T) {
	gang := &Spec{Nodes: 3}
	hosts := func(_ context.Context, nl string) ([]string, error) {
		if nl != "gpu[07-09]" {
			return nil, errors.New("unexpected node list " + nl)
		}
		return []string{"gpu07", "gpu08", "gpu09"}, nil
	}
	for _, c := range []struct {
		env        map[string]string
		rank       int
		master     string
		wantErrSub string
	}{
		{map[string]string{EnvNodeRank: "2", EnvMasterAddr: "virga-41-0.virga-41"}, 2, "virga-41-0.virga-41", ""},
		{map[string]string{"SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "gpu[07-09]"}, 1, "gpu07", ""},
		{map[string]string{"SLURM_NODEID": "3", "SLURM_JOB_NODELIST": "gpu[07-09]"}, 0, "", "node rank"},
		{map[string]string{}, 0, "", "needs"},
	} {
		rank, master, err := rendezvous(context.Background(), gang, c.env, hosts)
		if c.wantErrSub != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErrSub) {
				t.Errorf("%v: err %v; want one about %q", c.env, err, c.wantErrSub)
			}
			continue
		}
		if err != nil || rank != c.rank || master != c.master {
			t.Errorf("%v: rank %d master %q err %v; want %d %q", c.env, rank, master, err, c.rank, c.master)
		}
	}
	if r, m, err := rendezvous(context.Background(), &Spec{Nodes: 1}, nil, hosts); err != nil || r != 0 || m != "127.0.0.1" {
		t.Errorf("a single node alone: %d %q %v; want rank 0 on 127.0.0.1", r, m, err)
	}
}

// FuzzDecode: whatever the environment holds, Decode returns a valid spec
// or an error, and a valid spec survives a round trip.
func FuzzDecode(f *testing.F) {
	f.Add((&Spec{AttemptID: 1, TrialID: 2, Argv: []string{"x"}, Server: "http://s", Token: "t", Nodes: 1, ProcessesPerNode: 1}).Encode())
	f.Add("")
	f.Add("e30=")
	f.Fuzz(func(t *testing.T, in string) {
		s, err := Decode(in)
		if err != nil {
			return
		}
		if s.AttemptID <= 0 || len(s.Argv) == 0 || s.Nodes < 1 || s.ProcessesPerNode < 1 {
			t.Fatalf("Decode accepted an invalid spec %+v", s)
		}
		again, err := Decode(s.Encode())
		if err != nil || !reflect.DeepEqual(again, s) {
			t.Fatalf("round trip of %+v: %+v, %v", s, again, err)
		}
	})
}
