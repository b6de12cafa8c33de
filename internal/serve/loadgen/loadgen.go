package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"sync"
	"time"
)

// Clock is the time as the load generator sees it: the zero Config uses
// the real one.
type Clock interface {
	Now() time.Time
	// SleepUntil returns at t, or early with ctx's error.
	SleepUntil(ctx context.Context, t time.Time) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
func (realClock) SleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Config is one open-loop run against an Open Inference Protocol REST
// endpoint.
type Config struct {
	// URL is the server's base URL, e.g. http://localhost:8080.
	URL string
	// Model and Version (optional) name the model: requests go to
	// POST {URL}/v2/models/{Model}[/versions/{Version}]/infer.
	Model   string
	Version string
	// Body is the JSON inference request every request sends.
	Body []byte
	// Arrivals are when to send each request, from the start of the run.
	Arrivals Arrivals
	// Objective is the latency objective: an answer later than that after
	// the request's arrival time is late.
	Objective time.Duration
	// MaxInFlight bounds the requests waiting for an answer (default
	// 10000); one due while that many wait is not sent and counts as a
	// client error, so the arrivals stay open-loop.
	MaxInFlight int
	// Client sends the requests (default: a client with no timeout beyond
	// Objective x 10 + 10 s).
	Client *http.Client
	// Clock is the time (default the real clock).
	Clock Clock
}

// Outcome of one request.
type Outcome int

// The outcomes a request can have.
const (
	OnTime  Outcome = iota // 200 within the objective
	Late                   // 200 after it
	Refused                // 429: refused rather than served late
	Failed                 // any other status, or no answer
)

func (o Outcome) String() string { return [...]string{"on time", "late", "refused", "error"}[o] }

// Sample is one request's measurement: its latency counts from when it was
// due to be sent, so a slow sender cannot hide queueing (no coordinated
// omission).
type Sample struct {
	Due     time.Duration // its arrival time in the run
	Latency time.Duration
	Status  int // HTTP status, 0 if there was no answer
	Outcome Outcome
	Err     string // the error or the body of a failed answer, shortened
}

// Report is a run's measurements.
type Report struct {
	Samples   []Sample
	Objective time.Duration
	Elapsed   time.Duration
}

// Run sends the requests at their arrival times, each on its own, without
// waiting for answers, and measures each one's latency and outcome.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.URL == "" || cfg.Model == "" {
		return nil, fmt.Errorf("loadgen: a URL and a model are needed")
	}
	if cfg.Objective <= 0 {
		return nil, fmt.Errorf("loadgen: objective %v: want a latency objective above 0", cfg.Objective)
	}
	endpoint := cfg.URL + "/v2/models/" + url.PathEscape(cfg.Model)
	if cfg.Version != "" {
		endpoint += "/versions/" + url.PathEscape(cfg.Version)
	}
	endpoint += "/infer"
	client := cfg.Client
	if client == nil {
		// Keep as many idle connections as requests may be in flight: with
		// http.DefaultTransport's 2 per host, a burst opens a new TCP
		// connection for nearly every request, and the load generator, not
		// the server, becomes what is measured.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = 0
		tr.MaxIdleConnsPerHost = 4096
		client = &http.Client{Timeout: 10*cfg.Objective + 10*time.Second, Transport: tr}
	}
	clock := cfg.Clock
	if clock == nil {
		clock = realClock{}
	}
	limit := cfg.MaxInFlight
	if limit <= 0 {
		limit = 10000
	}
	rep := &Report{Samples: make([]Sample, len(cfg.Arrivals)), Objective: cfg.Objective}
	slots := make(chan struct{}, limit)
	var wg sync.WaitGroup
	start := clock.Now()
	for i, due := range cfg.Arrivals {
		at := start.Add(due)
		if err := clock.SleepUntil(ctx, at); err != nil {
			wg.Wait()
			return nil, err
		}
		rep.Samples[i] = Sample{Due: due}
		select {
		case slots <- struct{}{}:
		default:
			rep.Samples[i].Outcome = Failed
			rep.Samples[i].Err = fmt.Sprintf("not sent: %d requests in flight", limit)
			continue
		}
		wg.Add(1)
		go func(s *Sample) {
			defer wg.Done()
			defer func() { <-slots }()
			send(ctx, client, clock, endpoint, cfg.Body, at, cfg.Objective, s)
		}(&rep.Samples[i])
	}
	wg.Wait()
	rep.Elapsed = clock.Now().Sub(start)
	return rep, nil
}

func send(ctx context.Context, client *http.Client, clock Clock, endpoint string, body []byte, due time.Time, objective time.Duration, s *Sample) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		s.Outcome, s.Err = Failed, err.Error()
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		s.Latency = clock.Now().Sub(due)
		s.Outcome, s.Err = Failed, shorten(err.Error())
		return
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	s.Latency = clock.Now().Sub(due)
	s.Status = resp.StatusCode
	switch {
	case resp.StatusCode == http.StatusOK && s.Latency <= objective:
		s.Outcome = OnTime
	case resp.StatusCode == http.StatusOK:
		s.Outcome = Late
	case resp.StatusCode == http.StatusTooManyRequests:
		s.Outcome = Refused
	default:
		s.Outcome, s.Err = Failed, shorten(string(msg))
	}
}

func shorten(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// Count returns how many requests had outcome o.
func (r *Report) Count(o Outcome) int {
	n := 0
	for _, s := range r.Samples {
		if s.Outcome == o {
			n++
		}
	}
	return n
}

// Percentile returns the q-th quantile (0 to 1) of the latencies of the
// answered (200) requests, 0 if there are none.
func (r *Report) Percentile(q float64) time.Duration {
	var l []time.Duration
	for _, s := range r.Samples {
		if s.Status == http.StatusOK {
			l = append(l, s.Latency)
		}
	}
	if len(l) == 0 {
		return 0
	}
	slices.Sort(l)
	i := int(q*float64(len(l)) + 0.5)
	return l[min(max(i-1, 0), len(l)-1)]
}

// Print writes the report as a table: the outcomes, the goodput and the
// latency of the answered requests, and the errors seen by status.
func (r *Report) Print(w io.Writer) {
	n := len(r.Samples)
	pct := func(k int) float64 {
		if n == 0 {
			return 0
		}
		return 100 * float64(k) / float64(n)
	}
	secs := r.Elapsed.Seconds()
	rate := func(k int) float64 {
		if secs <= 0 {
			return 0
		}
		return float64(k) / secs
	}
	fmt.Fprintf(w, "%-10s %8s %8s %10s\n", "outcome", "requests", "share", "per second")
	fmt.Fprintf(w, "%-10s %8d %7.2f%% %10.1f\n", "sent", n, 100.0, rate(n))
	for _, o := range []Outcome{OnTime, Late, Refused, Failed} {
		k := r.Count(o)
		fmt.Fprintf(w, "%-10s %8d %7.2f%% %10.1f\n", o, k, pct(k), rate(k))
	}
	fmt.Fprintf(w, "objective %v; goodput %.1f/s over %v; answered latency p50 %v p90 %v p99 %v max %v\n",
		r.Objective, rate(r.Count(OnTime)), r.Elapsed.Round(time.Millisecond),
		r.Percentile(0.5), r.Percentile(0.9), r.Percentile(0.99), r.Percentile(1))
	errs := map[string]int{}
	for _, s := range r.Samples {
		if s.Outcome == Failed {
			errs[fmt.Sprintf("%d %s", s.Status, s.Err)]++
		}
	}
	keys := make([]string, 0, len(errs))
	for k := range errs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "error x%d: %s\n", errs[k], k)
	}
}
