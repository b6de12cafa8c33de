package main

import "math"

// mlp is a one-hidden-layer perceptron: 64 inputs, ReLU hidden units, 10
// softmax outputs. All parameters live in one slice (W1, b1, W2, b2 in that
// order, weights row-major by output unit) so that the optimizer and the
// checkpoint treat them as one vector.
type mlp struct {
	hidden   int
	params   []float64 // the parameters
	velocity []float64 // SGD momentum buffer, same layout as params
	grad     []float64 // scratch: the current batch's gradient

	// scratch for one sample
	h, z, p, dh []float64
}

// numParams is the length of the parameter vector of a network with hidden units.
func numParams(hidden int) int {
	return hidden*numInputs + hidden + numClasses*hidden + numClasses
}

// newMLP returns a network with He-uniform weights drawn from rng and zero biases.
func newMLP(hidden int, rng *splitMix64) *mlp {
	m := &mlp{
		hidden:   hidden,
		params:   make([]float64, numParams(hidden)),
		velocity: make([]float64, numParams(hidden)),
		grad:     make([]float64, numParams(hidden)),
		h:        make([]float64, hidden),
		z:        make([]float64, numClasses),
		p:        make([]float64, numClasses),
		dh:       make([]float64, hidden),
	}
	w1, _, w2, _ := m.views(m.params)
	a1 := math.Sqrt(6.0 / numInputs)
	for i := range w1 {
		w1[i] = (2*rng.float64() - 1) * a1
	}
	a2 := math.Sqrt(6.0 / float64(hidden))
	for i := range w2 {
		w2[i] = (2*rng.float64() - 1) * a2
	}
	return m
}

// views slices v (params, velocity or grad) into W1 [hidden x 64], b1 [hidden],
// W2 [10 x hidden] and b2 [10].
func (m *mlp) views(v []float64) (w1, b1, w2, b2 []float64) {
	n1 := m.hidden * numInputs
	n2 := n1 + m.hidden
	n3 := n2 + numClasses*m.hidden
	return v[:n1], v[n1:n2], v[n2:n3], v[n3:]
}

// forward computes the class probabilities of x into m.p (hidden
// activations into m.h) and returns the cross-entropy loss for label y.
func (m *mlp) forward(x []float64, y int) float64 {
	w1, b1, w2, b2 := m.views(m.params)
	for j := 0; j < m.hidden; j++ {
		s := b1[j]
		row := w1[j*numInputs : (j+1)*numInputs]
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
	for k := 0; k < numClasses; k++ {
		s := b2[k]
		row := w2[k*m.hidden : (k+1)*m.hidden]
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
func (m *mlp) predict() int {
	best := 0
	for k, pk := range m.p {
		if pk > m.p[best] {
			best = k
		}
	}
	return best
}

// backward adds the loss gradient of the last forward pass (sample x, label y) to m.grad.
func (m *mlp) backward(x []float64, y int) {
	_, _, w2, _ := m.views(m.params)
	gw1, gb1, gw2, gb2 := m.views(m.grad)
	clear(m.dh)
	for k := 0; k < numClasses; k++ {
		dz := m.p[k]
		if k == y {
			dz--
		}
		gb2[k] += dz
		grow := gw2[k*m.hidden : (k+1)*m.hidden]
		wrow := w2[k*m.hidden : (k+1)*m.hidden]
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
		grow := gw1[j*numInputs : (j+1)*numInputs]
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
func (m *mlp) step(n int, lr, l2, momentum float64) {
	inv := 1 / float64(n)
	w1, _, w2, _ := m.views(m.params)
	n1 := len(w1)
	n2 := n1 + m.hidden
	n3 := n2 + len(w2)
	for i := range m.params {
		g := m.grad[i] * inv
		if i < n1 || (i >= n2 && i < n3) {
			g += l2 * m.params[i]
		}
		m.velocity[i] = momentum*m.velocity[i] + g
		m.params[i] -= lr * m.velocity[i]
		m.grad[i] = 0
	}
}

// evaluate returns the mean cross-entropy loss and the accuracy on xs, ys.
func (m *mlp) evaluate(xs [][]float64, ys []int) (loss, accuracy float64) {
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
