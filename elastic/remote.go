package elastic

// The network runtime: one coordinator holds the parameter state and serves
// it over HTTP; worker processes use it through RemoteState.
//
// Why HTTP and not gRPC: the state's operations are a few small
// request/response calls (pull, push, commit, barrier) whose payload is
// dense vectors, sent as raw little-endian float64s; net/http gives
// keep-alive connections, TLS and the bearer tokens the rest of Virga uses,
// without a code generator in the build or another protocol stack on the
// nodes. A push is one round trip of 8 bytes per element plus headers; a
// worker sends all of a batch's pushes and its shard position in one
// commit call, which the coordinator applies at once.
//
// Membership: a worker joins (it gets an ID, the coordinator's instance and
// the lease) and every call it makes renews its lease, as does a heartbeat
// it sends every third of a lease while it lives (a batch may take longer
// than a lease to read); a worker not heard from for the lease time (it was
// preempted, killed) leaves, so a barrier never waits for it, and its later
// calls are refused (410: it must join again). A worker that leaves tells
// the coordinator at once. A coordinator restarted from a checkpoint is a
// new instance: calls of workers that joined the old one are refused, so
// their IDs cannot be mistaken for new workers'.
//
// Shards: a coordinator that knows the number of shards (Coordinator.Shards)
// hands them out: a worker claims one, reads it, claims the next, and so on
// (RemoteState.Work). A shard is held by one live worker at a time; the
// shards of a worker that leaves or whose lease runs out go to the next
// worker that claims, and it reads on from the position the state records.
// With more shards than workers, workers that join late take a share of
// the input and workers that leave early lose only their current shard's
// unrecorded batch. The number of shards and of passes over each are the
// coordinator's (Claim tells them), so workers cannot disagree on them.
//
// The end: a coordinator whose state is checkpointed (Durable) tells its
// workers that a shard is done only once a checkpoint records it (Saved):
// until then a worker that finished waits, as for a shard another holds.
// A coordinator that dies between a worker's last commit and its next
// checkpoint resumes from a state in which the shard is not done, and only
// a worker still there can read the rest of it; a worker that left on the
// dead instance's word would leave the new one waiting for ever.

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/virga-ml/virga/internal/clock"
)

// Coordinator serves a MemState to remote workers.
type Coordinator struct {
	State *MemState
	// Lease is how long a silent worker stays a member; default 10 s.
	Lease time.Duration
	// Token, if set, must be sent by workers as a bearer token.
	Token string
	// Clock is the time leases are kept by (Run's ticker too); nil means
	// the real clock.
	Clock clock.Clock
	// Shards, if positive, is the number of shards of the input, which
	// workers claim one at a time (POST /claim); Passes is the number of
	// passes over each (default 1).
	Shards, Passes int
	// Algorithm, if set, is the name of the algorithm whose state this is:
	// a worker that joins saying it runs another is refused (409).
	Algorithm string
	// Durable, if set, means the state is checkpointed (a restarted
	// coordinator resumes from the last checkpoint): a shard is done for
	// the workers (Claim: Done, and no Wait once all are) only once Saved
	// has been given a state that marks it done. Without it, a shard is
	// done once the state in memory marks it.
	Durable bool

	instance string // this coordinator's lifetime, in every worker's calls
	mu       sync.Mutex
	next     int64
	workers  map[int64]time.Time // last heard from
	claims   map[int]int64       // shard -> the worker reading it
	left     int                 // workers that left or whose lease ran out
	saved    map[string]bool     // the done marks (doneKey) of the last saved state

	routes sync.Once
	mux    *http.ServeMux
}

// NewCoordinator returns a coordinator of st with no members yet (st's
// membership follows the workers that join).
// The shards st marks done are taken as saved: a coordinator starts from a
// fresh state or from a checkpoint.
func NewCoordinator(st *MemState) *Coordinator {
	st.mu.Lock()
	st.members = 0
	saved := doneMarks(st.tensors)
	st.mu.Unlock()
	return &Coordinator{State: st, workers: map[int64]time.Time{}, claims: map[int]int64{},
		saved: saved, instance: strconv.FormatInt(time.Now().UnixNano(), 36)}
}

// Saved tells a Durable coordinator that snapshot (a Snapshot of its
// state) is checkpointed: the shards it marks done are done for the
// workers, which may then leave.
func (c *Coordinator) Saved(snapshot map[string]Tensor) {
	marks := doneMarks(snapshot)
	c.mu.Lock()
	c.saved = marks
	c.mu.Unlock()
}

// doneMarks is the set of done marks (doneKey) that tensors hold.
func doneMarks(tensors map[string]Tensor) map[string]bool {
	marks := map[string]bool{}
	for k, t := range tensors {
		if strings.HasPrefix(k, "shard/") && strings.HasSuffix(k, "/done") && len(t) == 1 && t[0] > 0 {
			marks[k] = true
		}
	}
	return marks
}

// Left is the number of workers that have left, or whose lease ran out,
// since the coordinator started.
func (c *Coordinator) Left() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.left
}

func (c *Coordinator) passes() int { return max(c.Passes, 1) }

func (c *Coordinator) now() time.Time { return clock.Or(c.Clock).Now() }

func (c *Coordinator) lease() time.Duration {
	if c.Lease > 0 {
		return c.Lease
	}
	return 10 * time.Second
}

// Members is the number of current workers.
func (c *Coordinator) Members() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.workers)
}

// Expire removes the workers whose lease ran out; ServeHTTP calls it, and
// Run calls it on a ticker so that a barrier opens when a silent worker's
// lease ends.
func (c *Coordinator) Expire() {
	now := c.now()
	c.mu.Lock()
	var gone int
	for id, seen := range c.workers {
		if now.Sub(seen) > c.lease() {
			delete(c.workers, id)
			gone++
		}
	}
	c.left += gone
	c.mu.Unlock()
	for range gone {
		c.State.Leave()
	}
}

// Run expires silent workers until ctx ends.
func (c *Coordinator) Run(ctx context.Context) {
	t := clock.Or(c.Clock).NewTicker(c.lease() / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			c.Expire()
		}
	}
}

// renew marks a worker as heard from; false if it is not a member (its
// lease ran out: it must join again).
func (c *Coordinator) renew(id int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.workers[id]; !ok {
		return false
	}
	c.workers[id] = c.now()
	return true
}

// ServeHTTP implements the protocol:
//
//	POST /join[?algorithm=NAME]     -> {"worker": ID, "instance": I, "lease_ms": L};
//	                                   409 if the coordinator's algorithm is another
//	POST /leave?worker=ID&instance=I
//	POST /renew?worker=ID&instance=I (a heartbeat)
//	POST /pull?worker=ID&instance=I&key=K -> float64s (little-endian); 204 if no such key
//	POST /push?worker=ID&instance=I&key=K <- float64s
//	POST /commit?worker=ID&instance=I <- deltas (see encodeDeltas), applied as one
//	POST /barrier?worker=ID&instance=I
//	POST /claim?worker=ID&instance=I[&shard=K] -> {"shard": K, "shards": N, "passes": P};
//	                                   K = -1: none to claim, and "wait": true if other live
//	                                   workers hold some or some are done but not saved
//	                                   yet; with shard=K: that shard ("done": true if it is
//	                                   done and saved), or 409 if another live worker holds it
//	GET  /snapshot                  -> {"tensors": {...}} (a checkpoint of the state)
//
// A call of a worker that is not a member, or that joined another instance
// of the coordinator, is answered 410 Gone.
func (c *Coordinator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c.Token != "" && !validBearer(r.Header.Get("Authorization"), c.Token) {
		http.Error(w, "a bearer token is required", http.StatusUnauthorized)
		return
	}
	c.routes.Do(func() {
		m := http.NewServeMux()
		m.HandleFunc("GET /snapshot", c.serveSnapshot)
		m.HandleFunc("POST /join", c.serveJoin)
		m.HandleFunc("POST /leave", c.member(c.serveLeave, false))
		m.HandleFunc("POST /renew", c.member(func(http.ResponseWriter, *http.Request, int64) {}, true))
		m.HandleFunc("POST /pull", c.member(c.servePull, true))
		m.HandleFunc("POST /push", c.member(c.servePush, true))
		m.HandleFunc("POST /commit", c.member(c.servePush, true))
		m.HandleFunc("POST /claim", c.member(c.serveClaim, true))
		m.HandleFunc("POST /barrier", c.member(c.serveBarrier, true))
		c.mux = m
	})
	c.mux.ServeHTTP(w, r)
}

// validBearer reports whether an Authorization header carries token, in
// time that does not depend on how much of it matches.
func validBearer(header, token string) bool {
	got, ok := strings.CutPrefix(header, "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

func (c *Coordinator) serveSnapshot(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"tensors": c.State.Snapshot()})
}

func (c *Coordinator) serveJoin(w http.ResponseWriter, r *http.Request) {
	if a := r.URL.Query().Get("algorithm"); a != "" && c.Algorithm != "" && a != c.Algorithm {
		http.Error(w, fmt.Sprintf("this coordinator holds the state of %s; a worker of %s cannot join it", c.Algorithm, a), http.StatusConflict)
		return
	}
	c.mu.Lock()
	c.next++
	id := c.next
	c.workers[id] = c.now()
	c.mu.Unlock()
	c.State.Join()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(joined{Worker: id, Instance: c.instance, LeaseMS: c.lease().Milliseconds()})
}

// member wraps a call of a joined worker: it checks the worker's ID and
// instance (410 if it joined another instance of the coordinator), expires
// silent workers, and with renew also renews the caller's lease (410 if it
// is no longer a member).
func (c *Coordinator) member(h func(http.ResponseWriter, *http.Request, int64), renew bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		id, err := strconv.ParseInt(q.Get("worker"), 10, 64)
		if err != nil {
			http.Error(w, "worker: want the ID that /join gave", http.StatusBadRequest)
			return
		}
		if q.Get("instance") != c.instance {
			http.Error(w, fmt.Sprintf("worker %d joined another instance of the coordinator (it restarted); join again", id), http.StatusGone)
			return
		}
		c.Expire()
		if renew && !c.renew(id) {
			http.Error(w, fmt.Sprintf("worker %d is not a member (its lease ran out); join again", id), http.StatusGone)
			return
		}
		h(w, r, id)
	}
}

func (c *Coordinator) serveLeave(_ http.ResponseWriter, _ *http.Request, id int64) {
	c.mu.Lock()
	_, ok := c.workers[id]
	delete(c.workers, id)
	if ok {
		c.left++
	}
	c.mu.Unlock()
	if ok {
		c.State.Leave()
	}
}

func (c *Coordinator) servePull(w http.ResponseWriter, r *http.Request, _ int64) {
	t, err := c.State.Pull(r.Context(), r.URL.Query().Get("key"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if t == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(encodeTensor(t))
}

// servePush serves /push (one tensor of the key in the query) and /commit
// (many deltas, applied as one).
//
// The deltas are applied only if the worker is still a member once its
// body has arrived, checked and applied under the membership lock: a
// worker whose lease ran out while its commit was on the way may have lost
// its shard to another worker, which reads on from the position the state
// records, so applying the late commit too would count its batch twice.
// Such a commit is answered 410, like any call of a worker that is no
// longer a member; the worker joins again and reads from the recorded
// position.
func (c *Coordinator) servePush(w http.ResponseWriter, r *http.Request, id int64) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<31))
	var deltas []Delta
	if err == nil && r.URL.Path == "/push" {
		var t Tensor
		t, err = decodeTensor(body)
		deltas = []Delta{{Key: r.URL.Query().Get("key"), Delta: t}}
	} else if err == nil {
		deltas, err = decodeDeltas(body)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	seen, ok := c.workers[id]
	now := c.now()
	if !ok || now.Sub(seen) > c.lease() {
		http.Error(w, fmt.Sprintf("worker %d is not a member (its lease ran out while its commit arrived); join again", id), http.StatusGone)
		return
	}
	c.workers[id] = now
	if err := c.State.PushAll(r.Context(), deltas); err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
	}
}

func (c *Coordinator) serveClaim(w http.ResponseWriter, r *http.Request, id int64) {
	want := -1
	if v := r.URL.Query().Get("shard"); v != "" {
		var err error
		if want, err = strconv.Atoi(v); err != nil || want < 0 {
			http.Error(w, fmt.Sprintf("shard %q: want a shard number", v), http.StatusBadRequest)
			return
		}
	}
	k, wait, done, err := c.claim(r.Context(), id, want)
	if err != nil {
		code := http.StatusBadRequest
		if errors.Is(err, ErrHeld) {
			code = http.StatusConflict
		}
		http.Error(w, err.Error(), code)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(Claim{Shard: k, Shards: c.Shards, Passes: c.passes(), Wait: wait, Done: done})
}

// serveBarrier waits for the barrier; the wait renews the caller's lease
// (a worker waiting is alive).
func (c *Coordinator) serveBarrier(w http.ResponseWriter, r *http.Request, id int64) {
	done := make(chan error, 1)
	go func() { done <- c.State.Barrier(r.Context()) }()
	tick := time.NewTicker(c.lease() / 4)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
			}
			return
		case <-tick.C:
			c.renew(id)
			c.Expire()
		}
	}
}

// joined is the answer to /join.
type joined struct {
	Worker   int64  `json:"worker"`
	Instance string `json:"instance"`
	LeaseMS  int64  `json:"lease_ms"`
}

// Claim is the coordinator's answer to a claim: the shard the worker now
// holds (of Shards, to be read Passes times over), or -1 if none is free;
// Wait then tells that other live workers hold shards not yet done (one
// may leave), or that shards are done but not yet saved (see
// Coordinator.Durable): the coordinator may still restart from a state in
// which they are not. Done, for a claim of a given shard, tells that the
// shard is done and saved: its worker may leave.
type Claim struct {
	Shard  int  `json:"shard"`
	Shards int  `json:"shards"`
	Passes int  `json:"passes"`
	Wait   bool `json:"wait,omitempty"`
	Done   bool `json:"done,omitempty"`
}

// ErrHeld means a claimed shard is held by another live worker (which may
// have died: its lease has not run out yet).
var ErrHeld = errors.New("held by another live worker")

// claim gives worker id shard want (-1: the first shard that is neither
// done nor held by a live worker), releasing the one it held; done tells
// whether shard want is done and saved.
func (c *Coordinator) claim(ctx context.Context, id int64, want int) (shard int, wait, done bool, err error) {
	if c.Shards <= 0 {
		return -1, false, false, errors.New("this coordinator hands out no shards (start it with the number of shards)")
	}
	if want >= c.Shards {
		return -1, false, false, fmt.Errorf("shard %d: the coordinator's input has %d shards (0 to %d)", want, c.Shards, c.Shards-1)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if want >= 0 {
		if holder, ok := c.claims[want]; ok && holder != id {
			if _, live := c.workers[holder]; live {
				return -1, false, false, fmt.Errorf("shard %d: %w (worker %d)", want, ErrHeld, holder)
			}
		}
	}
	for k, holder := range c.claims {
		if holder == id {
			delete(c.claims, k)
		}
	}
	if want >= 0 {
		c.claims[want] = id
		done, _, err := c.done(ctx, want)
		return want, false, done, err
	}
	for k := range c.Shards {
		done, unsaved, err := c.done(ctx, k)
		if err != nil {
			return -1, false, false, err
		}
		if done || unsaved {
			// An unsaved shard is no one's to read, but its end is not
			// certain yet: the workers wait for the checkpoint.
			delete(c.claims, k)
			wait = wait || unsaved
			continue
		}
		if holder, ok := c.claims[k]; ok {
			if _, live := c.workers[holder]; live {
				wait = true
				continue
			}
		}
		c.claims[k] = id
		return k, false, false, nil
	}
	return -1, wait, false, nil
}

// done tells whether shard k is done for the workers, and whether it is
// done in memory only (not saved yet; see Durable). c.mu is held.
func (c *Coordinator) done(ctx context.Context, k int) (done, unsaved bool, err error) {
	mark, err := c.State.Pull(ctx, doneKey(k))
	if err != nil {
		return false, false, err
	}
	inMemory := len(mark) == 1 && mark[0] > 0
	if !c.Durable {
		return inMemory, false, nil
	}
	saved := c.saved[doneKey(k)]
	return saved, inMemory && !saved, nil
}

func encodeTensor(t Tensor) []byte {
	b := make([]byte, 8*len(t))
	for i, v := range t {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
	}
	return b
}

func decodeTensor(b []byte) (Tensor, error) {
	if len(b)%8 != 0 {
		return nil, fmt.Errorf("a tensor is a whole number of float64s (got %d bytes)", len(b))
	}
	t := make(Tensor, len(b)/8)
	for i := range t {
		v := math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("element %d is %v", i, v)
		}
		t[i] = v
	}
	return t, nil
}

// workerTransport carries the calls of the workers that join from now on
// (nil: http.DefaultTransport); tests pause workers with it.
var workerTransport http.RoundTripper

// RemoteState is a worker's State on a coordinator.
type RemoteState struct {
	base     string
	token    string
	client   *http.Client
	worker   int64
	instance string
	lease    time.Duration
	stop     context.CancelFunc // ends the heartbeat

	// Traffic counts the bytes of tensors pulled and pushed.
	mu             sync.Mutex
	pulled, pushed int64
	pulls, pushes  int64
}

// Join joins the coordinator at base (e.g. http://head:7071) as a new
// worker. Until ctx ends, Leave or Close, it sends a heartbeat every third
// of the coordinator's lease, so that the worker stays a member while a
// batch takes long to read.
func Join(ctx context.Context, base, token string) (*RemoteState, error) {
	return JoinAs(ctx, base, token, "")
}

// JoinAs joins as Join does, as a worker of the named algorithm: a
// coordinator of another algorithm's state refuses it (ErrOtherAlgorithm).
func JoinAs(ctx context.Context, base, token, algorithm string) (*RemoteState, error) {
	r := &RemoteState{base: base, token: token, client: &http.Client{Transport: workerTransport}}
	var out joined
	path := "/join"
	if algorithm != "" {
		path += "?algorithm=" + url.QueryEscape(algorithm)
	}
	body, err := r.call(ctx, path, nil)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(body, &out); err != nil || out.Worker <= 0 || out.Instance == "" || out.LeaseMS <= 0 {
		return nil, fmt.Errorf("joining %s: unreadable answer %q", base, body)
	}
	r.worker, r.instance, r.lease = out.Worker, out.Instance, time.Duration(out.LeaseMS)*time.Millisecond
	hctx, stop := context.WithCancel(ctx)
	r.stop = stop
	go r.heartbeat(hctx, time.Duration(out.LeaseMS)*time.Millisecond/3)
	return r, nil
}

func (r *RemoteState) heartbeat(ctx context.Context, every time.Duration) {
	t := time.NewTicker(max(every, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := r.call(ctx, r.op("renew", ""), nil); errors.Is(err, ErrNotMember) {
				return // the worker's next call learns it
			}
		}
	}
}

// Worker is this worker's ID.
func (r *RemoteState) Worker() int64 { return r.worker }

// Lease is how long the coordinator keeps a silent worker.
func (r *RemoteState) Lease() time.Duration { return r.lease }

// Leave leaves the membership (and ends the heartbeat).
func (r *RemoteState) Leave(ctx context.Context) error {
	r.Close()
	_, err := r.call(ctx, r.op("leave", ""), nil)
	return err
}

// Close ends the heartbeat without leaving: the coordinator drops the
// worker when its lease runs out.
func (r *RemoteState) Close() {
	if r.stop != nil {
		r.stop()
	}
}

// Traffic returns the tensor bytes and calls pulled and pushed so far.
func (r *RemoteState) Traffic() (pulledBytes, pushedBytes, pulls, pushes int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pulled, r.pushed, r.pulls, r.pushes
}

// ErrNotMember means the coordinator dropped this worker (its lease ran
// out, or the coordinator restarted); it must join again.
var ErrNotMember = errors.New("not a member of the coordinator any more")

// ErrOtherAlgorithm means the coordinator holds another algorithm's state.
var ErrOtherAlgorithm = errors.New("the coordinator runs another algorithm")

// ErrUnreachable wraps the failures to reach the coordinator at all (it is
// down or restarting), as opposed to its answers.
var ErrUnreachable = errors.New("the coordinator cannot be reached")

func (r *RemoteState) call(ctx context.Context, path string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	switch {
	case resp.StatusCode == http.StatusGone:
		return nil, fmt.Errorf("%w: %s", ErrNotMember, bytes.TrimSpace(out))
	case resp.StatusCode == http.StatusConflict && strings.HasPrefix(path, "/claim"):
		return nil, fmt.Errorf("%w: %s", ErrHeld, bytes.TrimSpace(out))
	case resp.StatusCode == http.StatusConflict && strings.HasPrefix(path, "/join"):
		return nil, fmt.Errorf("%w: %s", ErrOtherAlgorithm, bytes.TrimSpace(out))
	case resp.StatusCode == http.StatusUnauthorized:
		return nil, fmt.Errorf("%s: %s: %s (the coordinator's token is wrong or missing)", path, resp.Status, bytes.TrimSpace(out))
	case resp.StatusCode >= 300:
		return nil, fmt.Errorf("%s: %s: %s", path, resp.Status, bytes.TrimSpace(out))
	case resp.StatusCode == http.StatusNoContent:
		return nil, nil
	}
	return out, nil
}

func (r *RemoteState) op(name, key string) string {
	p := "/" + name + "?worker=" + strconv.FormatInt(r.worker, 10) + "&instance=" + url.QueryEscape(r.instance)
	if key != "" {
		p += "&key=" + url.QueryEscape(key)
	}
	return p
}

// Pull implements State.
func (r *RemoteState) Pull(ctx context.Context, key string) (Tensor, error) {
	b, err := r.call(ctx, r.op("pull", key), nil)
	if err != nil || b == nil {
		return nil, err
	}
	r.mu.Lock()
	r.pulled += int64(len(b))
	r.pulls++
	r.mu.Unlock()
	return decodeTensor(b)
}

// Push implements State.
func (r *RemoteState) Push(ctx context.Context, key string, delta Tensor) error {
	b := encodeTensor(delta)
	if _, err := r.call(ctx, r.op("push", key), b); err != nil {
		return err
	}
	r.mu.Lock()
	r.pushed += int64(len(b))
	r.pushes++
	r.mu.Unlock()
	return nil
}

// PushAll implements Committer: one call, applied by the coordinator as
// one commit.
func (r *RemoteState) PushAll(ctx context.Context, deltas []Delta) error {
	b := encodeDeltas(deltas)
	if _, err := r.call(ctx, r.op("commit", ""), b); err != nil {
		return err
	}
	var n int64
	for _, d := range deltas {
		n += 8 * int64(len(d.Delta))
	}
	r.mu.Lock()
	r.pushed += n
	r.pushes++
	r.mu.Unlock()
	return nil
}

// Barrier implements State.
func (r *RemoteState) Barrier(ctx context.Context) error {
	_, err := r.call(ctx, r.op("barrier", ""), nil)
	return err
}

// Claim asks the coordinator for a shard to read (see Coordinator.Shards).
func (r *RemoteState) Claim(ctx context.Context) (Claim, error) {
	return r.claim(ctx, r.op("claim", ""))
}

// ClaimShard claims shard k; it fails if another live worker holds it.
func (r *RemoteState) ClaimShard(ctx context.Context, k int) (Claim, error) {
	return r.claim(ctx, r.op("claim", "")+"&shard="+strconv.Itoa(k))
}

func (r *RemoteState) claim(ctx context.Context, path string) (Claim, error) {
	b, err := r.call(ctx, path, nil)
	if err != nil {
		return Claim{}, err
	}
	var c Claim
	if err := json.Unmarshal(b, &c); err != nil || c.Shards <= 0 || c.Passes <= 0 || c.Shard < -1 || c.Shard >= c.Shards {
		return Claim{}, fmt.Errorf("claim: unreadable answer %q", b)
	}
	return c, nil
}

// ShardOpener opens shard k of n at row pos (see Opener).
type ShardOpener func(ctx context.Context, shard, shards int, pos int64) (Source, error)

// Work claims shards from the coordinator one at a time and runs alg over
// each (RunShardPasses, as many passes as the coordinator says), until
// every shard is done. While other live workers hold the shards left it
// waits, polling every poll, so that it takes over the shard of one that
// leaves or dies.
func (r *RemoteState) Work(ctx context.Context, alg Algorithm, poll time.Duration, open ShardOpener) error {
	for {
		c, err := r.Claim(ctx)
		if err != nil {
			return err
		}
		if c.Shard < 0 {
			if !c.Wait {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(poll):
			}
			continue
		}
		n := c.Shards
		err = RunShardPasses(ctx, alg, r, c.Shard, c.Passes, func(ctx context.Context, k int, pos int64) (Source, error) {
			return open(ctx, k, n, pos)
		})
		if err != nil {
			return fmt.Errorf("shard %d of %d: %w", c.Shard, n, err)
		}
	}
}
