package trace

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"time"
)

// Market is how capacity is bought.
type Market string

const (
	Spot     Market = "spot"
	OnDemand Market = "ondemand"
)

// Key names one price series. Zone is a GCP region, or an AWS availability
// zone (a name such as us-east-1a, or an id such as use1-az4 in the TSV
// format); Product is the AWS product description ("Linux/UNIX", ...) and
// empty for GCP.
type Key struct {
	Provider     string // "gcp" or "aws"
	InstanceType string
	Zone         string
	Product      string
	Market       Market
}

// Price is a step: the price from Time until the next step. A NaN price means
// not offered (or unknown) from Time on.
type Price struct {
	Time       time.Time
	USDPerHour float64
}

// Series is a price step function, steps sorted by time.
type Series struct {
	Key   Key
	Steps []Price
}

// At is the price in force at t: that of the last step at or before t. It is
// NaN before the first step (and where a step is NaN).
func (s *Series) At(t time.Time) float64 {
	i := sort.Search(len(s.Steps), func(i int) bool { return s.Steps[i].Time.After(t) })
	if i == 0 {
		return math.NaN()
	}
	return s.Steps[i-1].USDPerHour
}

// Prices is a set of series by key.
type Prices map[Key]*Series

func (p Prices) add(k Key, step Price) {
	s := p[k]
	if s == nil {
		s = &Series{Key: k}
		p[k] = s
	}
	s.Steps = append(s.Steps, step)
}

// sortSteps orders each series by time (stable, so of two steps at the same
// time the later in the input wins in At) and drops consecutive repeats.
func (p Prices) sortSteps() {
	for _, s := range p {
		slices.SortStableFunc(s.Steps, func(a, b Price) int { return a.Time.Compare(b.Time) })
		out := s.Steps[:0]
		for i, st := range s.Steps {
			if i > 0 && samePrice(out[len(out)-1].USDPerHour, st.USDPerHour) {
				continue
			}
			out = append(out, st)
		}
		s.Steps = out
	}
}

func samePrice(a, b float64) bool { return a == b || (math.IsNaN(a) && math.IsNaN(b)) }

// Keys returns the keys sorted, for deterministic iteration.
func (p Prices) Keys() []Key {
	keys := make([]Key, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b Key) int {
		return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.InstanceType, b.InstanceType),
			cmp.Compare(a.Zone, b.Zone), cmp.Compare(a.Product, b.Product), cmp.Compare(a.Market, b.Market))
	})
	return keys
}
