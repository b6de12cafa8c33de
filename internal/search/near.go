package search

import "math"

// nearIndex holds the places of the configurations proposed (space.unit)
// and finds whether one lies within tol of a point in every numeric
// parameter and equals it in the others (adaptive.tried). A search of
// thousands of trials asks at every proposal, and a visit of every place
// grew with the square of the trials: the places are kept in a grid of
// cells a little wider than tol over the first nearDims numeric
// parameters, so that a place within tol of a point is in the point's cell
// or a neighbouring one, and only those are visited (each place found is
// still checked in every parameter).
type nearIndex struct {
	tol    float64
	cell   float64 // the cells' width: a place within tol is at most one cell away
	points []unitPoint
	cells  map[nearKey][]int32 // indices into points
	// odd holds the places the grid cannot hold (a coordinate that is not
	// a finite number of cells): they are always visited.
	odd []int32
}

// nearDims is how many numeric parameters the grid spans: 3^nearDims
// cells are visited per question.
const nearDims = 3

// nearKey is a cell of the grid, within the configurations equal in their
// other parameters.
type nearKey struct {
	cat string
	c   [nearDims]int32
}

func newNearIndex(tol float64) *nearIndex {
	return &nearIndex{tol: tol, cell: tol * (1 + 1e-6), cells: map[nearKey][]int32{}}
}

// key returns the cell of x, false when x has a coordinate the grid cannot
// hold.
func (n *nearIndex) key(x []float64, cat string) (nearKey, bool) {
	k := nearKey{cat: cat}
	for i := 0; i < len(x) && i < nearDims; i++ {
		q := math.Floor(x[i] / n.cell)
		if !(q > -1e9 && q < 1e9) { // NaN, infinite, or too far out
			return k, false
		}
		k.c[i] = int32(q)
	}
	return k, true
}

// add records a configuration's place.
func (n *nearIndex) add(u unitPoint) {
	i := int32(len(n.points))
	n.points = append(n.points, u)
	k, ok := n.key(u.x, u.cat)
	if !ok {
		n.odd = append(n.odd, i)
		return
	}
	n.cells[k] = append(n.cells[k], i)
}

// near reports whether a place recorded is within tol of x in every
// coordinate, with the same cat.
func (n *nearIndex) near(x []float64, cat string) bool {
	for _, i := range n.odd {
		if n.within(i, x, cat) {
			return true
		}
	}
	k, ok := n.key(x, cat)
	if !ok {
		// x itself is off the grid: visit every place.
		for i := range n.points {
			if n.within(int32(i), x, cat) {
				return true
			}
		}
		return false
	}
	dims := min(len(x), nearDims)
	cells := 1
	for range dims {
		cells *= 3
	}
	for o := range cells {
		c := k
		for d, r := 0, o; d < dims; d, r = d+1, r/3 {
			c.c[d] += int32(r%3) - 1
		}
		for _, i := range n.cells[c] {
			if n.within(i, x, cat) {
				return true
			}
		}
	}
	return false
}

// within reports whether place i is within tol of x in every coordinate,
// with the same cat.
func (n *nearIndex) within(i int32, x []float64, cat string) bool {
	u := &n.points[i]
	if u.cat != cat {
		return false
	}
	for j, v := range u.x {
		if math.Abs(v-x[j]) > n.tol {
			return false
		}
	}
	return true
}
