package oip

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// Buffer sizes the gRPC server pools: powers of two from 2^minPoolExp to
// 2^maxPoolExp bytes; larger buffers are allocated each time.
const (
	minPoolExp = 8
	maxPoolExp = 26
)

// bufferPool is the gRPC server's buffer pool: buffers of powers of two,
// not cleared when taken. gRPC writes every byte of a buffer it takes
// before it reads one (a message read, framed or marshaled into it), so
// the clearing gRPC's default pool does buys nothing here, and it clears a
// buffer's whole capacity (1 MiB for any message of 32 KiB to 1 MiB, and
// every message larger than that) on every message: for a tensor of a few
// hundred kilobytes as much time as decoding it.
type bufferPool struct {
	tiers [maxPoolExp + 1]sync.Pool // by the buffers' capacity's exponent
}

var _ mem.BufferPool = (*bufferPool)(nil)

// exp is the exponent of the smallest pooled capacity that holds n bytes.
func exp(n int) int {
	if n <= 1<<minPoolExp {
		return minPoolExp
	}
	return bits.Len(uint(n - 1))
}

// Get implements mem.BufferPool: a buffer of length n, its contents
// whatever they were.
func (p *bufferPool) Get(n int) *[]byte {
	e := exp(n)
	if e > maxPoolExp {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.tiers[e].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<e)
	return &b
}

// Put implements mem.BufferPool.
func (p *bufferPool) Put(b *[]byte) {
	c := cap(*b)
	if c < 1<<minPoolExp || c > 1<<maxPoolExp || c&(c-1) != 0 {
		return // not one of the pool's
	}
	*b = (*b)[:0]
	p.tiers[bits.Len(uint(c))-1].Put(b)
}
