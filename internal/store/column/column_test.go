package column_test

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store/column"
)

func TestPrediction(t *testing.T) {
	tests := []struct {
		name string
		p    *virga.Prediction
		// wantCol is the column value Encoder.Prediction returns.
		wantCol any
	}{
		{"nil is NULL", nil, nil},
		{"finite", &virga.Prediction{Step: 8, Horizon: 20, Mean: 0.125, Std: 0.5, ProbBetter: 0.04},
			`{"step":8,"horizon":20,"mean":0.125,"std":0.5,"prob_better":0.04}`},
		{"NaN and infinities", &virga.Prediction{Step: 1, Horizon: 2, Mean: math.NaN(), Std: math.Inf(1), ProbBetter: math.Inf(-1)},
			`{"step":1,"horizon":2,"mean":"NaN","std":"+Inf","prob_better":"-Inf"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var enc column.Encoder
			col := enc.Prediction(tc.p)
			if enc.Err != nil {
				t.Fatalf("Prediction: %v", enc.Err)
			}
			if col != tc.wantCol {
				t.Fatalf("Prediction = %#v, want %#v", col, tc.wantCol)
			}
			var s *string
			if str, ok := col.(string); ok {
				s = &str
			}
			got, err := column.DecPrediction(s)
			if err != nil {
				t.Fatalf("DecPrediction: %v", err)
			}
			if d := cmp.Diff(tc.p, got, cmpopts.EquateNaNs()); d != "" {
				t.Errorf("round trip (-want +got):\n%s", d)
			}
		})
	}
	bad := `{"mean":"lots"}`
	if _, err := column.DecPrediction(&bad); err == nil {
		t.Errorf("DecPrediction(%s) succeeded", bad)
	}
}
