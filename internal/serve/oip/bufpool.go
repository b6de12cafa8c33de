package oip

import (
	"fmt"
	"math/bits"
	"sync"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
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

// codec is gRPC's proto codec with the server's buffer pool instead of
// gRPC's default one (which the default codec uses whatever the server's
// pool): the messages a request is read into and its answer is marshaled
// into are not cleared first.
type codec struct{ pool mem.BufferPool }

var _ encoding.CodecV2 = codec{}

// Marshal implements encoding.CodecV2.
func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("proto: marshaling a %T, want a proto.Message", v)
	}
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true} // the size just computed
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	b := c.pool.Get(size)
	if _, err := opts.MarshalAppend((*b)[:0], m); err != nil {
		c.pool.Put(b)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(b, c.pool)}, nil
}

// Unmarshal implements encoding.CodecV2.
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("proto: unmarshaling into a %T, want a proto.Message", v)
	}
	b := data.MaterializeToBuffer(c.pool)
	defer b.Free()
	return proto.Unmarshal(b.ReadOnlyData(), m)
}

// Name implements encoding.CodecV2.
func (codec) Name() string { return "proto" }
