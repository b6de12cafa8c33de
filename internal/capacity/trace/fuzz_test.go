package trace

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

func addFile(f *testing.F, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
}

// checkErr asserts a failure is a *ParseError naming the file.
func checkErr(t *testing.T, err error) {
	var pe *ParseError
	if err != nil && (!errors.As(err, &pe) || pe.File != "fuzz") {
		t.Fatalf("error %v is not a ParseError naming the file", err)
	}
}

func FuzzAvailability(f *testing.F) {
	addFile(f, "testdata/skypilot/availability/16-node/aws-08-27-2023/us-east-2b_v100_1.json")
	f.Add([]byte(`{"metadata": {"gap_seconds": 60}, "data": [1, 0, -1]}`))
	f.Add([]byte(`{"metadata": {"gap_seconds": 1e300}, "data": []}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ParseAvailability("fuzz", bytes.NewReader(b))
		checkErr(t, err)
		if err != nil {
			return
		}
		if fr := a.Fraction(); fr < 0 || fr > 1 || a.Tick <= 0 || a.MeanUpRun() < 0 || a.Preemptions() > len(a.Count) {
			t.Fatalf("fraction %v tick %v", fr, a.Tick)
		}
		a.UpAt(a.Duration() / 2)
	})
}

func FuzzGCPPrices(f *testing.F) {
	addFile(f, "testdata/gcp_spot_price_changes_gpu_a2_a3_g2_g4.csv")
	addFile(f, "testdata/gcp_spot_price_changes_c2.csv")
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseGCPPrices("fuzz", bytes.NewReader(b))
		checkErr(t, err)
		checkPrices(t, p)
	})
}

func FuzzAWSPrices(f *testing.F) {
	addFile(f, "testdata/aws-describe-spot-price-history.json")
	addFile(f, "testdata/aws-2022-05.tsv")
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseAWSPrices("fuzz", bytes.NewReader(b))
		checkErr(t, err)
		checkPrices(t, p)
		p, err = ParseAWSPricesTSV("fuzz", bytes.NewReader(b))
		checkErr(t, err)
		checkPrices(t, p)
	})
}

func checkPrices(t *testing.T, p Prices) {
	for _, k := range p.Keys() {
		s := p[k]
		for i, st := range s.Steps {
			if i > 0 && st.Time.Before(s.Steps[i-1].Time) {
				t.Fatalf("%v: steps out of order", k)
			}
			if got := s.At(st.Time); got != st.USDPerHour && !(got != got && st.USDPerHour != st.USDPerHour) && (i+1 == len(s.Steps) || !s.Steps[i+1].Time.Equal(st.Time)) {
				t.Fatalf("%v: At(step %d) = %v, want %v", k, i, got, st.USDPerHour)
			}
		}
	}
}
