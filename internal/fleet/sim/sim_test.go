package sim

import (
	"testing"
	"time"
)

func TestMeasureCapacity(t *testing.T) {
	c, err := MeasureCapacity(2*time.Second, 2, 5*time.Second, 0.999, 2*time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("capacity %.3f/s", c)
	// One replica serves at most slots/service = 1 request/s; meeting the
	// objective for 99.9% of Poisson arrivals leaves it well below that.
	if c <= 0.3 || c >= 1 {
		t.Fatalf("capacity %.3f/s: want between 0.3 and 1", c)
	}
}
