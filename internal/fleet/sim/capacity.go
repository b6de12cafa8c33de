package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/virga-ml/virga/internal/fleet"
	"github.com/virga-ml/virga/internal/serve/loadgen"
)

// MeasureCapacity finds, by bisection, the highest Poisson arrival rate one
// replica (slots requests at once, service each) serves with at least share
// of the requests answered within objective, over span of simulated time.
// It is the Capacity the policies are given: measured with this simulator's
// own replica model rather than assumed.
func MeasureCapacity(service time.Duration, slots int, objective time.Duration, share float64, span time.Duration, seed uint64) (float64, error) {
	lo, hi := 0.0, float64(slots)/service.Seconds()
	for range 20 {
		mid := (lo + hi) / 2
		rng := rand.New(rand.NewPCG(seed, 0xca9a))
		arr := loadgen.Poisson(rng, mid, int(mid*span.Seconds())+1)
		res, err := Run(Config{
			Arrivals:  arr,
			Duration:  span,
			Pools:     []fleet.Pool{{Name: "one", Price: 1}},
			Service:   service,
			Slots:     slots,
			Objective: objective,
			Policy:    fleet.Fixed{N: 1},
			Seed:      seed,
		})
		if err != nil {
			return 0, fmt.Errorf("measuring capacity: %w", err)
		}
		if res.Share() >= share {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}
