package mlp

import "math"

// MLP is a one-hidden-layer perceptron: 64 inputs, ReLU hidden units, 10
// softmax outputs. All parameters live in one slice (W1, b1, W2, b2 in that
// order, weights row-major by output unit) so that the optimizer and the
// checkpoint treat them as one vector.
type MLP struct {
	Hidden   int
	Params   []float64 // the parameters
	Velocity []float64 // SGD momentum buffer, same layout as Params
	grad     []float64 // scratch: the current batch's gradient

	// scratch for one sample
	h, z, p, dh []float64
}

// NumParams is the length of the parameter vector of a network with hidden units.
func NumParams(hidden int) int {
	return hidden*NumInputs + hidden + NumClasses*hidden + NumClasses
}

// NewMLP returns a network with He-uniform weights drawn from rng and zero biases.
func NewMLP(hidden int, rng *SplitMix64) *MLP {
	m := &MLP{
		Hidden:   hidden,
		Params:   make([]float64, NumParams(hidden)),
		Velocity: make([]float64, NumParams(hidden)),
		grad:     make([]float64, NumParams(hidden)),
		h:        make([]float64, hidden),
		z:        make([]float64, NumClasses),
		p:        make([]float64, NumClasses),
		dh:       make([]float64, hidden),
	}
	w1, _, w2, _ := m.views(m.Params)
	a1 := math.Sqrt(6.0 / NumInputs)
	for i := range w1 {
		w1[i] = (2*rng.Float64() - 1) * a1
	}
	a2 := math.Sqrt(6.0 / float64(hidden))
	for i := range w2 {
		w2[i] = (2*rng.Float64() - 1) * a2
	}
	return m
}

// views slices v (Params, Velocity or grad) into W1 [hidden x 64], b1 [hidden],
// W2 [10 x hidden] and b2 [10].
func (m *MLP) views(v []float64) (w1, b1, w2, b2 []float64) {
	n1 := m.Hidden * NumInputs
	n2 := n1 + m.Hidden
	n3 := n2 + NumClasses*m.Hidden
	return v[:n1], v[n1:n2], v[n2:n3], v[n3:]
}

// forward computes the class probabilities of x into m.p (hidden
// activations into m.h) and returns the cross-entropy loss for label y.
func (m *MLP) forward(x []float64, y int) float64 {
	w1, b1, w2, b2 := m.views(m.Params)
	for j := 0; j < m.Hidden; j++ {
		s := b1[j]
		row := w1[j*NumInputs : (j+1)*NumInputs]
		for i, xi := range x {
			if xi != 0 {
				s += row[i] * xi
			}
		}
		if s < 0 {
			s = 0
		}
		m.h[j] = s
	}
	maxZ := math.Inf(-1)
	for k := 0; k < NumClasses; k++ {
		s := b2[k]
		row := w2[k*m.Hidden : (k+1)*m.Hidden]
		for j, hj := range m.h {
			s += row[j] * hj
		}
		m.z[k] = s
		maxZ = max(maxZ, s)
	}
	var sum float64
	for k, zk := range m.z {
		m.p[k] = math.Exp(zk - maxZ)
		sum += m.p[k]
	}
	for k := range m.p {
		m.p[k] /= sum
	}
	// -log softmax(z)[y], computed from the logits for accuracy.
	return math.Log(sum) - (m.z[y] - maxZ)
}

// predict returns the most probable class of the last forward pass.
func (m *MLP) predict() int {
	best := 0
	for k, pk := range m.p {
		if pk > m.p[best] {
			best = k
		}
	}
	return best
}

// backward adds the loss gradient of the last forward pass (sample x, label y) to m.grad.
func (m *MLP) backward(x []float64, y int) {
	_, _, w2, _ := m.views(m.Params)
	gw1, gb1, gw2, gb2 := m.views(m.grad)
	clear(m.dh)
	for k := 0; k < NumClasses; k++ {
		dz := m.p[k]
		if k == y {
			dz--
		}
		gb2[k] += dz
		grow := gw2[k*m.Hidden : (k+1)*m.Hidden]
		wrow := w2[k*m.Hidden : (k+1)*m.Hidden]
		for j, hj := range m.h {
			grow[j] += dz * hj
			m.dh[j] += dz * wrow[j]
		}
	}
	for j, hj := range m.h {
		if hj <= 0 { // ReLU gradient
			continue
		}
		d := m.dh[j]
		gb1[j] += d
		grow := gw1[j*NumInputs : (j+1)*NumInputs]
		for i, xi := range x {
			if xi != 0 {
				grow[i] += d * xi
			}
		}
	}
}

// step applies one SGD-with-momentum update from the gradient summed over n
// samples: g = grad/n + l2*w (weights only, not biases); v = momentum*v + g;
// w -= lr*v (the update rule of torch.optim.SGD). It clears the gradient.
func (m *MLP) step(n int, lr, l2, momentum float64) {
	inv := 1 / float64(n)
	w1, _, w2, _ := m.views(m.Params)
	n1 := len(w1)
	n2 := n1 + m.Hidden
	n3 := n2 + len(w2)
	for i := range m.Params {
		g := m.grad[i] * inv
		if i < n1 || (i >= n2 && i < n3) {
			g += l2 * m.Params[i]
		}
		m.Velocity[i] = momentum*m.Velocity[i] + g
		m.Params[i] -= lr * m.Velocity[i]
		m.grad[i] = 0
	}
}

// Evaluate returns the mean cross-entropy loss and the accuracy on xs, ys.
func (m *MLP) Evaluate(xs [][]float64, ys []int) (loss, accuracy float64) {
	correct := 0
	for i, x := range xs {
		loss += m.forward(x, ys[i])
		if m.predict() == ys[i] {
			correct++
		}
	}
	n := float64(len(xs))
	return loss / n, float64(correct) / n
}
