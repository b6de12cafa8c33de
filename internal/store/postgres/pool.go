package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// closeTimeout bounds the goodbye to the server when a connection is closed.
const closeTimeout = 5 * time.Second

// errClosed is returned by a pool that has been closed.
var errClosed = errors.New("store is closed")

// pool is a small bounded pool of pgx connections. (pgxpool would pull in a
// module Virga does not otherwise need; this is all the store uses of it.)
type pool struct {
	cfg  *pgx.ConnConfig
	sem  chan struct{} // one token per connection in use
	mu   sync.Mutex
	idle []*pgx.Conn
	shut bool
}

func newPool(cfg *pgx.ConnConfig, size int) *pool {
	return &pool{cfg: cfg, sem: make(chan struct{}, size)}
}

// acquire returns an idle connection, or a new one when none is idle, waiting
// while all size connections are in use. Give it back with release.
func (p *pool) acquire(ctx context.Context) (*pgx.Conn, error) {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for a connection: %w", ctx.Err())
	}
	p.mu.Lock()
	if p.shut {
		p.mu.Unlock()
		<-p.sem
		return nil, errClosed
	}
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	c, err := pgx.ConnectConfig(ctx, p.cfg)
	if err != nil {
		<-p.sem
		return nil, fmt.Errorf("connecting: %w", err)
	}
	return c, nil
}

// release gives c back. A connection that is closed, or was left inside a
// transaction (a failed or cancelled statement), is closed instead of reused.
func (p *pool) release(c *pgx.Conn) {
	defer func() { <-p.sem }()
	p.mu.Lock()
	reuse := !p.shut && !c.IsClosed() && c.PgConn().TxStatus() == 'I'
	if reuse {
		p.idle = append(p.idle, c)
	}
	p.mu.Unlock()
	if !reuse {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		c.Close(ctx)
	}
}

// close closes the idle connections; those in use are closed on release.
func (p *pool) close() error {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.shut = nil, true
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	var errs []error
	for _, c := range idle {
		errs = append(errs, c.Close(ctx))
	}
	return errors.Join(errs...)
}
