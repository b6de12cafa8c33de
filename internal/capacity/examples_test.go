package capacity

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/virga-ml/virga/internal/spec"
)

// TestExampleCapacityFiles parses and loads every examples/capacity/*.yaml
// and checks that each pool answers for prices and availability.
func TestExampleCapacityFiles(t *testing.T) {
	files, err := filepath.Glob("../../examples/capacity/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../examples/ddp-torch/slurm.yaml")
	if len(files) < 3 {
		t.Fatalf("found %d example capacity files, want local-spot.yaml and aws-p3.yaml at least", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if c, _, err := spec.LoadCapacity(f); err == nil && slices.ContainsFunc(c.Pools, func(p spec.Pool) bool { return p.FromCluster() }) {
				// Its Slurm pools are read from the cluster first:
				// internal/backend/slurm's TestExampleSlurmCapacity.
				if _, err := Load(c, filepath.Dir(f)); err == nil || !strings.Contains(err.Error(), "only its Slurm partition tells") {
					t.Errorf("loading pools that need the cluster without it: %v", err)
				}
				return
			}
			s, err := LoadFile(f)
			if err != nil {
				t.Fatalf("%v", err)
			}
			for _, p := range s.Pools {
				if price := p.Price(t0); !(price >= 0) {
					t.Errorf("pool %s: price %g", p.Name, price)
				}
				if p.Spot() && !(p.OnDemandPrice(t0) > p.Price(t0)) {
					t.Errorf("pool %s: on-demand price %g not above the spot price %g", p.Name, p.OnDemandPrice(t0), p.Price(t0))
				}
				st := p.Stats()
				if st.Available < 0 || st.Available > 1 {
					t.Errorf("pool %s: stats %+v", p.Name, st)
				}
				tl := p.Timeline(t0, nil)
				changes := 0
				for at := t0; at.Before(t0.Add(24 * time.Hour)); changes++ {
					_, next := tl.Up(at)
					if next.IsZero() {
						break
					}
					at = next
				}
				t.Logf("%s: %s; available %.3f, mean up %v, mean outage %v, %.2f reclaims per hour up; %d changes in a day",
					p.Name, p.Preemption, st.Available, st.MeanUp, st.MeanOutage, st.PreemptionsPerHour, changes)
			}
		})
	}
	s, err := LoadFile("../../examples/capacity/local-spot.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The rehearsal starts at a run of 77 up ticks: up for 77 x 3.25 s.
	p := s.Pool("p3-spot-emulated")
	if p == nil || p.MaxNodes != 2 || !p.Spot() {
		t.Fatalf("p3-spot-emulated: %+v", p)
	}
	up, next := p.Timeline(t0, nil).Up(t0)
	if !up || next.Sub(t0) < 4*time.Minute || next.Sub(t0) > 77*3250*time.Millisecond {
		t.Errorf("local-spot starts up %v until %v, want up for about 4 minutes", up, next.Sub(t0))
	}
}
