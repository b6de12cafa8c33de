package local

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/virga-ml/virga"
)

// Backoff between attempts to deliver one report.
const (
	relayFirstBackoff = 50 * time.Millisecond
	relayMaxBackoff   = 2 * time.Second
	// relayMaxQueue bounds the reports waiting while the server is away;
	// newer ones are dropped (and counted) beyond it.
	relayMaxQueue = 10000
)

// handleMetric validates one VIRGA_METRIC payload, as the API validates a
// report (virga.CheckMetricLine), and queues it on rel.
func handleMetric(payload []byte, log *shimLog, rel *relay) {
	if err := virga.CheckMetricLine(payload); err != nil {
		log.printf("ignoring VIRGA_METRIC line: %v", err)
		return
	}
	if rel != nil {
		rel.enqueue(bytes.Clone(payload))
	}
}

// relay posts reports in order, one at a time, on the trial's behalf.
// Connection errors and 5xx are retried with backoff for up to retryFor per
// report; other failures are logged and the report dropped.
type relay struct {
	url      string
	token    string
	retryFor time.Duration
	log      *shimLog
	client   *http.Client

	ctx    context.Context // cancelled when the flush time is up
	cancel context.CancelFunc

	mu      sync.Mutex
	cond    *sync.Cond
	queue   [][]byte
	closed  bool
	dropped int
	done    chan struct{}
}

func newRelay(url, token string, retryFor time.Duration, log *shimLog) *relay {
	ctx, cancel := context.WithCancel(context.Background())
	r := &relay{
		url: url, token: token, retryFor: retryFor, log: log,
		// Direct: the report URL is the Virga server, whatever proxies the
		// trial's environment names.
		client: &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConns: 1, IdleConnTimeout: 30 * time.Second}},
		ctx:    ctx, cancel: cancel,
		done: make(chan struct{}),
	}
	r.cond = sync.NewCond(&r.mu)
	go r.run()
	return r
}

func (r *relay) enqueue(body []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if len(r.queue) >= relayMaxQueue {
		r.dropped++
		return
	}
	r.queue = append(r.queue, body)
	r.cond.Signal()
}

func (r *relay) run() {
	defer close(r.done)
	for {
		r.mu.Lock()
		for len(r.queue) == 0 && !r.closed {
			r.cond.Wait()
		}
		if len(r.queue) == 0 {
			r.mu.Unlock()
			return
		}
		body := r.queue[0]
		r.queue = r.queue[1:]
		r.mu.Unlock()
		if !r.post(body) {
			r.mu.Lock()
			r.dropped++
			r.mu.Unlock()
		}
	}
}

// post delivers one report; false means it was not acknowledged.
func (r *relay) post(body []byte) bool {
	ctx, cancel := context.WithTimeout(r.ctx, r.retryFor)
	defer cancel()
	backoff := relayFirstBackoff
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(body))
		if err != nil {
			r.log.printf("report: %v", err)
			return false
		}
		req.Header.Set("Content-Type", "application/json")
		if r.token != "" {
			req.Header.Set("Authorization", "Bearer "+r.token)
		}
		var lastErr error
		resp, err := r.client.Do(req)
		if err != nil {
			lastErr = err
		} else {
			reply, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
			resp.Body.Close()
			switch {
			case resp.StatusCode >= 200 && resp.StatusCode < 300:
				return true
			case resp.StatusCode >= 500:
				lastErr = fmt.Errorf("server replied %s", resp.Status)
			default:
				r.log.printf("report %s rejected: %s: %s", body, resp.Status, strings.TrimSpace(string(reply)))
				return false
			}
		}
		if ctx.Err() != nil || time.Until(deadlineOf(ctx)) < backoff {
			if r.ctx.Err() == nil {
				r.log.printf("report %s not delivered after %s: %v", body, r.retryFor, lastErr)
			}
			return false
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
		backoff = min(backoff*2, relayMaxBackoff)
	}
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// close stops taking reports and waits up to timeout for the queued ones to be
// delivered; the rest are dropped and counted in the log.
func (r *relay) close(timeout time.Duration) {
	r.mu.Lock()
	r.closed = true
	r.cond.Broadcast()
	r.mu.Unlock()
	select {
	case <-r.done:
	case <-time.After(timeout):
		r.cancel()
		<-r.done
	}
	r.cancel()
	r.mu.Lock()
	dropped := r.dropped
	r.mu.Unlock()
	if dropped > 0 {
		r.log.printf("%d VIRGA_METRIC report(s) were not delivered", dropped)
	}
}
