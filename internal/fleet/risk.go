package fleet

import (
	"maps"
	"math"
	"time"
)

// zoneStats is what Virga has seen of one spot zone's availability.
type zoneStats struct {
	Up       bool      // available at the previous decision
	UpTime   float64   // seconds seen available
	Downs    int       // times seen going from available to not
	LastDown time.Time // when it last went
}

// observe updates the zone history in m from s's pools: up-time and losses
// per zone, and how many losses came within window of another zone's
// (zones lost together). A zone counts as lost from the first preemption
// notice of a replica in it (the notice is the earliest sign) or, holding
// none, when it stops being available. It returns a new memo, m's maps
// untouched, and how many zones were lost at this decision.
func (m virgaMemo) observe(s *Snapshot, window time.Duration) (virgaMemo, int) {
	noticed := map[string]bool{}
	for _, r := range s.Replicas {
		if p := s.Pool(r.Pool); r.Preempting && p != nil {
			noticed[p.Zone] = true
		}
	}
	zs := make(map[string]zoneStats, len(m.Zones))
	maps.Copy(zs, m.Zones)
	dt := 0.0
	if !m.Seen.IsZero() && s.Now.After(m.Seen) {
		dt = s.Now.Sub(m.Seen).Seconds()
	}
	seen := map[string]bool{}
	var lost []string
	for _, p := range s.Pools {
		if !p.Spot || seen[p.Zone] {
			continue
		}
		seen[p.Zone] = true
		st, known := zs[p.Zone]
		up := p.Available && !noticed[p.Zone]
		switch {
		case known && st.Up && up:
			st.UpTime += dt
		case known && st.Up && !up:
			// Went some time in the last interval: count half of it.
			st.UpTime += dt / 2
			st.Downs++
			st.LastDown = s.Now
			lost = append(lost, p.Zone)
		}
		st.Up = up
		zs[p.Zone] = st
	}
	for _, z := range lost {
		m.Downs++
		for o, st := range zs {
			if o != z && !st.LastDown.IsZero() && s.Now.Sub(st.LastDown) <= window {
				m.Joint++
				break
			}
		}
	}
	m.Zones, m.Seen = zs, s.Now
	return m, len(lost)
}

// hazard is zone's reclaim rate per second of up-time: (losses seen + 1) /
// (seconds seen up + prior), i.e. a prior of one loss per prior of up-time
// that the zone's own history outweighs as it accumulates.
func (m virgaMemo) hazard(zone string, prior time.Duration) float64 {
	st := m.Zones[zone]
	return float64(st.Downs+1) / (st.UpTime + prior.Seconds())
}

// joint is the chance that a zone's loss comes with another's within one
// start-up: losses seen together over losses seen, with a prior of 0.1.
func (m virgaMemo) joint() float64 { return (float64(m.Joint) + 0.1) / float64(m.Downs+1) }

// riskModel estimates the share of the load's capacity a placement loses to
// reclaims: each zone z is lost at rate hz[z]; a loss leaves its replicas
// missing for gap (start-up plus one interval, less the notice, on which the
// replacements start), and what the fleet holds above the load (headroom h)
// absorbs that many of them. With probability rho a loss takes a second
// zone (the largest other one) with it.
type riskModel struct {
	hz   map[string]float64
	gap  float64 // seconds
	rho  float64
	load float64 // replicas the current load needs (at least 1)
	even bool    // place by count first, rate second
}

// lost is the expected share of the load's replica-seconds missing, for
// per-zone spot counts c and headroom h replicas.
func (r riskModel) lost(c map[string]int, h int) float64 {
	// The two largest zones, for "the largest other one".
	z1, z2 := "", ""
	for z, n := range c {
		switch {
		case z1 == "" || n > c[z1] || n == c[z1] && z < z1:
			z1, z2 = z, z1
		case z2 == "" || n > c[z2] || n == c[z2] && z < z2:
			z2 = z
		}
	}
	sum := 0.0
	for z, n := range c {
		if n == 0 {
			continue
		}
		other := c[z1]
		if z == z1 {
			other = 0
			if z2 != "" {
				other = c[z2]
			}
		}
		single := float64(max(0, n-h))
		pair := float64(max(0, n+other-h))
		sum += r.hz[z] * r.gap * ((1-r.rho)*single + r.rho*pair)
	}
	return sum / r.load
}

// floor is the fewest on-demand replicas f >= max(0, n - spot) for which the
// expected share lost with c spot replicas per zone and headroom
// spot + f - survive is within budget.
func (r riskModel) floor(n, survive, spot int, c map[string]int, budget float64) int {
	lo := max(0, n-spot)
	hi := max(lo, survive) // headroom spot + survive - survive >= every zone's count
	if r.lost(c, spot+lo-survive) <= budget {
		return lo
	}
	for lo < hi { // lost is non-increasing in f
		mid := (lo + hi) / 2
		if r.lost(c, spot+mid-survive) <= budget {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// place returns the zone among zones where one more spot replica adds the
// least risk: the lowest hz x (count + 1), then the fewest, then by name.
func (r riskModel) place(zones []string, c map[string]int) string {
	best, bestW := "", math.Inf(1)
	if r.even {
		for _, z := range zones {
			if best == "" || c[z] < c[best] || c[z] == c[best] && (r.hz[z] < r.hz[best] || r.hz[z] == r.hz[best] && z < best) {
				best = z
			}
		}
		return best
	}
	for _, z := range zones {
		w := r.hz[z] * float64(c[z]+1)
		if best == "" || w < bestW-1e-12 || math.Abs(w-bestW) <= 1e-12 && (c[z] < c[best] || c[z] == c[best] && z < best) {
			best, bestW = z, w
		}
	}
	return best
}
