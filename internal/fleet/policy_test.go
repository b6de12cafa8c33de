package fleet

import (
	"math/rand/v2"
	"testing"
	"time"
)

var epoch = time.Date(2023, 2, 15, 0, 0, 0, 0, time.UTC)

// harness feeds a policy snapshots one interval apart, carrying the memo
// and applying starts and stops to its replicas as if they were instant.
type harness struct {
	t     *testing.T
	snap  Snapshot
	next  int
	rng   *rand.Rand
	steps int
}

func newHarness(t *testing.T, pools ...Pool) *harness {
	return &harness{t: t, rng: rand.New(rand.NewPCG(1, 2)), snap: Snapshot{
		Now: epoch, Interval: 10 * time.Second, Pools: pools, Objective: 5 * time.Second,
		Capacity: 1, StartUp: 3 * time.Minute,
	}}
}

// load sets the history to a constant arrival rate and backlog.
func (h *harness) load(rate float64, ongoing int) {
	h.snap.History = nil
	for i := 179; i >= 0; i-- {
		h.snap.History = append(h.snap.History, Sample{At: h.snap.Now.Add(-time.Duration(i) * h.snap.Interval),
			Interval: h.snap.Interval, Arrivals: int(rate * h.snap.Interval.Seconds()), Ongoing: ongoing})
	}
}

func (h *harness) add(pool string, n int, state State) {
	for range n {
		h.snap.Replicas = append(h.snap.Replicas, Replica{ID: h.next, Pool: pool, State: state, Since: h.snap.Now})
		h.next++
	}
}

// step decides once, applies the actions (new replicas ready at once) and
// advances the clock.
func (h *harness) step(p Policy) Decision {
	d := p.Decide(&h.snap, h.rng)
	h.snap.Memo = d.Memo
	h.snap.Events = nil
	for _, a := range d.Actions {
		switch a.Kind {
		case Start:
			h.add(a.Pool, a.N, Ready)
		case Stop:
			for i, r := range h.snap.Replicas {
				if r.ID == a.Replica {
					h.snap.Replicas = append(h.snap.Replicas[:i], h.snap.Replicas[i+1:]...)
					break
				}
			}
		}
	}
	h.snap.Now = h.snap.Now.Add(h.snap.Interval)
	for i := range h.snap.History {
		h.snap.History[i].At = h.snap.History[i].At.Add(h.snap.Interval)
	}
	h.steps++
	return d
}

func (h *harness) count(keep func(Pool) bool) int {
	n := 0
	for _, r := range h.snap.Replicas {
		if p := h.snap.Pool(r.Pool); p != nil && keep(*p) {
			n++
		}
	}
	return n
}

func onDemand(p Pool) bool { return !p.Spot }
func spot(p Pool) bool     { return p.Spot }

func TestReactiveScalesUpOnlyAfterTheDelay(t *testing.T) {
	h := newHarness(t, Pool{Name: "od", Price: 3})
	h.add("od", 1, Ready)
	h.load(1, 20) // 20 ongoing requests: Ray wants 20/2 = 10 replicas
	var upAt int
	for i := 0; i < 10 && upAt == 0; i++ {
		h.step(Reactive{})
		if h.count(onDemand) > 1 {
			upAt = h.steps
		}
	}
	// upscale_delay_s 30 at 10 s decisions: the counter must exceed 3, so
	// the fourth decision scales up.
	if upAt != 4 {
		t.Fatalf("scaled up at decision %d, want 4", upAt)
	}
	if got := h.count(onDemand); got != 10 {
		t.Fatalf("%d replicas after scaling up, want 10", got)
	}
	// Load falls to 4 ongoing (2 replicas): nothing for 600 s, then down.
	h.load(1, 4)
	downAt := 0
	for i := 0; i < 100 && downAt == 0; i++ {
		h.step(Reactive{})
		if h.count(onDemand) < 10 {
			downAt = h.steps - 4
		}
	}
	if downAt != 61 || h.count(onDemand) != 2 {
		t.Fatalf("scaled down to %d after %d decisions, want 2 after 61", h.count(onDemand), downAt)
	}
}

func spotPools() []Pool {
	return []Pool{
		{Name: "spot-a", Zone: "a", Spot: true, Price: 0.9, Available: true},
		{Name: "spot-b", Zone: "b", Spot: true, Price: 0.9, Available: true},
		{Name: "spot-c", Zone: "c", Spot: true, Price: 0.9, Available: true},
		{Name: "od", Price: 3},
	}
}

func TestSpotHedgeOverprovisionsSpreadsAndFallsBack(t *testing.T) {
	h := newHarness(t, spotPools()...)
	h.load(6, 0) // 6 requests/s at capacity 1: N_tar = 6 once the delay passes
	for range 40 {
		h.step(SpotHedge{Extra: 2})
	}
	if got := h.count(spot); got != 8 {
		t.Fatalf("%d spot replicas, want N_tar 6 + N_extra 2", got)
	}
	if got := h.count(onDemand); got != 0 {
		t.Fatalf("%d on-demand replicas with all spot ready, want 0", got)
	}
	perZone := map[string]int{}
	for _, r := range h.snap.Replicas {
		perZone[h.snap.Pool(r.Pool).Zone]++
	}
	for z, n := range perZone {
		if n < 2 || n > 3 {
			t.Fatalf("zone %s holds %d of 8 spot replicas, want them spread (2 or 3 each): %v", z, n, perZone)
		}
	}

	// Every zone is reclaimed: the replicas go, launches fail.
	for _, r := range h.snap.Replicas {
		h.snap.Events = append(h.snap.Events, Event{Kind: Preempted, Pool: r.Pool, Replica: r.ID})
	}
	h.snap.Replicas = nil
	d := h.step(SpotHedge{Extra: 2})
	// The zones are reset to active (fewer than two left), spot is retried
	// and on-demand covers the whole target meanwhile.
	if got := h.count(onDemand); got != 6 {
		t.Fatalf("%d on-demand replicas with no spot ready, want the target 6 (actions %v)", got, d.Actions)
	}
	// Spot launches fail while the zones are down: keep only on-demand.
	for i := range h.snap.Replicas {
		if h.snap.Pool(h.snap.Replicas[i].Pool).Spot {
			h.snap.Events = append(h.snap.Events, Event{Kind: LaunchFailed, Pool: h.snap.Replicas[i].Pool})
		}
	}
	h.snap.Replicas = onlyOnDemand(h.snap)
	h.step(SpotHedge{Extra: 2})
	if got := h.count(onDemand); got != 6 {
		t.Fatalf("%d on-demand replicas while spot is down, want 6", got)
	}

	// Spot comes back: once the spot replicas are ready, on-demand goes.
	for range 3 {
		h.step(SpotHedge{Extra: 2})
	}
	if got, od := h.count(spot), h.count(onDemand); got != 8 || od != 0 {
		t.Fatalf("%d spot and %d on-demand replicas after spot returned, want 8 and 0", got, od)
	}
}

func onlyOnDemand(s Snapshot) []Replica {
	var out []Replica
	for _, r := range s.Replicas {
		if !s.Pool(r.Pool).Spot {
			out = append(out, r)
		}
	}
	return out
}

func TestVirgaFloorSurvivesLosingTheLargestZone(t *testing.T) {
	tests := []struct {
		name      string
		available []bool // zones a, b, c
		wantSpot  int
		wantOD    int
	}{
		// 12 replicas over 3 zones: 18 spot lose at most 6 and keep 12;
		// 18 x 0.9 = 16.2 beats any mix with on-demand at 3.
		{"three zones", []bool{true, true, true}, 18, 0},
		// With one zone, spot cannot survive its loss: all on-demand.
		{"one zone", []bool{true, false, false}, 0, 12},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pools := spotPools()
			for i, a := range tc.available {
				pools[i].Available = a
			}
			h := newHarness(t, pools...)
			h.load(12, 0) // 12 requests/s at capacity 1: 12 replicas
			h.step(Virga{Budget: -1})
			if got, od := h.count(spot), h.count(onDemand); got != tc.wantSpot || od != tc.wantOD {
				t.Fatalf("%d spot, %d on-demand; want %d and %d", got, od, tc.wantSpot, tc.wantOD)
			}
			// Whatever zone is lost, 12 replicas remain.
			perZone := map[string]int{}
			for _, r := range h.snap.Replicas {
				if p := h.snap.Pool(r.Pool); p.Spot {
					perZone[p.Zone]++
				}
			}
			for z, n := range perZone {
				if left := len(h.snap.Replicas) - n; left < 12 {
					t.Fatalf("losing zone %s leaves %d replicas, want at least 12", z, left)
				}
			}
		})
	}
}

func TestVirgaForecastFollowsTheTrend(t *testing.T) {
	h := newHarness(t, spotPools()...)
	// Rate rising by 0.01 requests/s every second, now at 10/s.
	for i := 179; i >= 0; i-- {
		at := h.snap.Now.Add(-time.Duration(i) * h.snap.Interval)
		rate := 10 - 0.01*float64(i)*h.snap.Interval.Seconds()
		h.snap.History = append(h.snap.History, Sample{At: at, Interval: h.snap.Interval, Arrivals: int(rate * 10)})
	}
	f := Virga{}.Forecast(&h.snap)
	// Level: the last minute's mean (~9.75/s); ahead: start-up + interval
	// = 190 s at 0.01/s = +1.9.
	if f < 11.3 || f > 11.9 {
		t.Fatalf("forecast %.2f/s, want about 11.6", f)
	}
}

func TestVirgaFloorCoversTheCurrentLoadNotTheBurst(t *testing.T) {
	h := newHarness(t, spotPools()...)
	h.load(12, 0)
	// A 30 s burst at 20 requests/s three minutes ago: N = 20 covers it,
	// but losing a zone must only leave the 12 the last minute needs.
	n := len(h.snap.History)
	for i := n - 20; i < n-17; i++ {
		h.snap.History[i].Arrivals = 200
	}
	h.step(Virga{Fit: time.Minute, Budget: -1}) // a flat last minute: no trend
	// 20 spot over 3 zones (7, 7, 6): 20 in all, 13 >= 12 after losing 7.
	// Covering the burst after a loss too would take 30 spot replicas.
	if got, od := h.count(spot), h.count(onDemand); got != 20 || od != 0 {
		t.Fatalf("%d spot, %d on-demand; want 20 and 0", got, od)
	}
}

// flap runs Virga for hours of decisions at a constant load, taking zone
// down for one decision every period (0: never).
func flap(h *harness, v Virga, zone string, period time.Duration, hours float64) {
	steps := int(hours * float64(time.Hour) / float64(h.snap.Interval))
	every := int(period / h.snap.Interval)
	for i := range steps {
		for j := range h.snap.Pools {
			if h.snap.Pools[j].Zone == zone {
				h.snap.Pools[j].Available = every == 0 || i%every != every-1
			}
		}
		h.step(v)
	}
}

func TestVirgaLearnsZoneRiskOnline(t *testing.T) {
	h := newHarness(t, spotPools()...)
	h.snap.Warning = 2 * time.Minute
	h.load(12, 0)
	memo := func() virgaMemo { return h.snap.Memo.(virgaMemo) }
	// Zone a is lost every 20 minutes for 6 hours; b and c never.
	flap(h, Virga{}, "a", 20*time.Minute, 6)
	m := memo()
	if m.Zones["a"].Downs != 18 || m.Zones["b"].Downs != 0 {
		t.Fatalf("saw %d losses of a and %d of b; want 18 and 0", m.Zones["a"].Downs, m.Zones["b"].Downs)
	}
	ha, hb := m.hazard("a", 2*time.Hour), m.hazard("b", 2*time.Hour)
	// a: 19 / (6 h + 2 h) ~ 2.4 per hour; b: 1 / 8 h.
	if ha*3600 < 2.2 || ha*3600 > 2.6 || hb*3600 > 0.13 {
		t.Fatalf("hazard a %.3f/h, b %.3f/h; want about 2.4 and 0.125", ha*3600, hb*3600)
	}
	// The load doubles: the new replicas go mostly to the quiet zones.
	old := len(h.snap.Replicas)
	h.load(24, 0)
	h.step(Virga{})
	perZone := map[string]int{}
	for _, r := range h.snap.Replicas[old:] {
		if p := h.snap.Pool(r.Pool); p.Spot {
			perZone[p.Zone]++
		}
	}
	if perZone["b"]+perZone["c"] < 12 || perZone["a"] >= perZone["b"] || perZone["a"] >= perZone["c"] {
		t.Fatalf("new spot replicas per zone %v; want at least 12, fewer in the flapping zone a", perZone)
	}
}

func TestVirgaRiskFloorFollowsTheReclaimRate(t *testing.T) {
	run := func(period time.Duration) (spotN, od int) {
		h := newHarness(t, spotPools()...)
		h.snap.Warning = 2 * time.Minute
		h.load(12, 0)
		// Every zone is lost once per period (staggered), for 12 hours.
		steps := int(12 * time.Hour / h.snap.Interval)
		every := int(period / h.snap.Interval)
		for i := range steps {
			for j := range h.snap.Pools {
				if h.snap.Pools[j].Spot {
					h.snap.Pools[j].Available = every == 0 || (i+j*every/3)%every != every-1
				}
			}
			h.step(Virga{DownHold: 10 * time.Second})
		}
		// Back up everywhere, for the hold to settle.
		for j := range h.snap.Pools {
			h.snap.Pools[j].Available = true
		}
		h.step(Virga{DownHold: 10 * time.Second})
		h.step(Virga{DownHold: 10 * time.Second})
		return h.count(spot), h.count(onDemand)
	}
	// Quiet zones: the 12 replicas the load needs, all spot, no on-demand
	// (the worst-zone rule would run 18 spot here).
	if s, od := run(0); s != 12 || od != 0 {
		t.Fatalf("quiet zones: %d spot, %d on-demand; want 12 and 0", s, od)
	}
	// Zones lost every 20 minutes: spot alone would lose too much, so the
	// fleet holds more than the load needs.
	if s, od := run(20 * time.Minute); s+od <= 12 {
		t.Fatalf("flapping zones: %d spot, %d on-demand; want more than 12 in all", s, od)
	}
}

func TestVirgaLeavesTheMemoItWasGiven(t *testing.T) {
	h := newHarness(t, spotPools()...)
	h.load(12, 0)
	h.step(Virga{})
	before := h.snap.Memo.(virgaMemo)
	up := before.Zones["a"].UpTime
	h.snap.Pools[0].Available = false
	Virga{}.Decide(&h.snap, h.rng)
	if got := before.Zones["a"]; got.UpTime != up || got.Downs != 0 || !got.Up {
		t.Fatalf("Decide changed the memo it was handed: %+v", got)
	}
}

func TestSpotHedgeFallbackExtraCoversTheOverprovision(t *testing.T) {
	for _, tc := range []struct {
		fallbackExtra bool
		want          int
	}{{false, 6}, {true, 8}} {
		h := newHarness(t, spotPools()...)
		h.load(6, 0)
		p := SpotHedge{Extra: 2, FallbackExtra: tc.fallbackExtra}
		for range 40 {
			h.step(p)
		}
		// Every spot replica is reclaimed: on-demand covers N_tar (the
		// paper) or N_tar + N_extra (sky/serve's dynamic fallback).
		h.snap.Replicas = nil
		h.step(p)
		if got := h.count(onDemand); got != tc.want {
			t.Fatalf("FallbackExtra %v: %d on-demand with no spot ready, want %d", tc.fallbackExtra, got, tc.want)
		}
	}
}

func TestVirgaMeetsACorrelatedReclaimWithOnDemand(t *testing.T) {
	h := newHarness(t, spotPools()...)
	h.snap.Warning = 2 * time.Minute
	h.load(12, 0)
	for range 30 {
		h.step(Virga{})
	}
	if od := h.count(onDemand); od != 0 {
		t.Fatalf("%d on-demand replicas with three quiet zones, want 0", od)
	}
	// Zones a and b give notice at once: the spot left would sit in zone c
	// alone, so the replicas under notice are replaced on-demand.
	for i, r := range h.snap.Replicas {
		if z := h.snap.Pool(r.Pool).Zone; z == "a" || z == "b" {
			h.snap.Replicas[i].Preempting = true
		}
	}
	h.step(Virga{})
	inC := 0
	for _, r := range h.snap.Replicas {
		if h.snap.Pool(r.Pool).Zone == "c" && !r.Preempting {
			inC++
		}
	}
	if od := h.count(onDemand); od+inC-12 < 0 || od == 0 {
		t.Fatalf("%d on-demand and %d spot in zone c after notices in a and b; want on-demand covering the 12 the load needs", od, inC)
	}
}
