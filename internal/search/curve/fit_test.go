package curve

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestBasisDerivatives checks every family's derivatives against central
// differences.
func TestBasisDerivatives(t *testing.T) {
	d, _, _ := newData([]float64{1, 2, 5, 10, 20}, []float64{2, 1.5, 1, 0.8, 0.7})
	us := []float64{0.05, 0.3, 1, 2.5, 10}
	lus := make([]float64, len(us))
	for i, u := range us {
		lus[i] = math.Log(u)
	}
	g := make([]float64, len(us))
	dq := [2][]float64{make([]float64, len(us)), make([]float64, len(us))}
	gp, gm := make([]float64, len(us)), make([]float64, len(us))
	r := rand.New(rand.NewPCG(1, 2))
	for _, fam := range families {
		lo, hi, _ := fam.bounds(d)
		for range 20 {
			var q [2]float64
			for k := range fam.nq {
				q[k] = lo[k] + (hi[k]-lo[k])*r.Float64()
			}
			fam.basis(d, q, us, lus, g, dq[0], dq[1])
			for k := range 2 {
				const h = 1e-6
				qp, qm := q, q
				qp[k] += h
				qm[k] -= h
				fam.basis(d, qp, us, lus, gp, nil, nil)
				fam.basis(d, qm, us, lus, gm, nil, nil)
				for i := range us {
					num := (gp[i] - gm[i]) / (2 * h)
					if k >= fam.nq {
						num = 0
					}
					if math.Abs(num-dq[k][i]) > 1e-5*(1+math.Abs(num)) {
						t.Errorf("%s q=%v u=%v: ∂g/∂q%d = %v, central difference %v", fam.name, q, us[i], k, dq[k][i], num)
					}
				}
			}
		}
	}
}

func TestSymEigen(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for m := 1; m <= 4; m++ {
		for range 50 {
			var A [4][4]float64
			for i := range m {
				for j := 0; j <= i; j++ {
					A[i][j] = r.NormFloat64()
					A[j][i] = A[i][j]
				}
			}
			vals, V := symEigen(A, m)
			// A = V diag(vals) Vᵀ and VᵀV = I.
			for i := range m {
				for j := range m {
					var a, id float64
					for k := range m {
						a += V[i][k] * vals[k] * V[j][k]
						id += V[k][i] * V[k][j]
					}
					if math.Abs(a-A[i][j]) > 1e-9 {
						t.Fatalf("m=%d: V·diag·Vᵀ[%d][%d] = %v, want %v", m, i, j, a, A[i][j])
					}
					if want := float64(boolInt(i == j)); math.Abs(id-want) > 1e-9 {
						t.Fatalf("m=%d: VᵀV[%d][%d] = %v, want %v", m, i, j, id, want)
					}
				}
			}
		}
	}
}

func TestCholSolve(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for m := 1; m <= 4; m++ {
		var M, B [4][4]float64
		for i := range m {
			for j := range m {
				M[i][j] = r.NormFloat64()
			}
		}
		for i := range m { // B = MᵀM + I is positive definite
			for j := range m {
				for k := range m {
					B[i][j] += M[k][i] * M[k][j]
				}
			}
			B[i][i]++
		}
		var want, v [4]float64
		for i := range m {
			want[i] = r.NormFloat64()
		}
		for i := range m {
			for j := range m {
				v[i] += B[i][j] * want[j]
			}
		}
		got, ok := cholSolve(B, v, m)
		for i := range m {
			if !ok || math.Abs(got[i]-want[i]) > 1e-9 {
				t.Fatalf("m=%d: cholSolve = %v, %v; want %v", m, got, ok, want)
			}
		}
	}
	if _, ok := cholSolve([4][4]float64{{1, 2}, {2, 1}}, [4]float64{1, 1}, 2); ok {
		t.Error("cholSolve of an indefinite matrix reported success")
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestNextRung checks the variance ladder reaches any horizon in a few
// dozen rungs.
func TestNextRung(t *testing.T) {
	rungs := 0
	for u := 1.0; u < math.MaxFloat64; u = nextRung(u) {
		if next := nextRung(u); !(next > u) {
			t.Fatalf("nextRung(%v) = %v", u, next)
		}
		rungs++
	}
	if rungs > 150 {
		t.Errorf("%d rungs to the largest float64, want a few dozen past 4096", rungs)
	}
}
