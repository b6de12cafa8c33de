// Package server assembles a Virga server from its parts (store, local
// backend, checkpoints, control loop, API) over one data directory, for
// `virga server` and for the server `virga run` embeds. It owns start-up and
// shutdown order and the data directory's lock; it holds no logic of its own.
package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/backend/local"
	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/checkpoint"
	"github.com/virga-ml/virga/internal/control"
	"github.com/virga-ml/virga/internal/registry"
	"github.com/virga-ml/virga/internal/schedule"
	"github.com/virga-ml/virga/internal/spec"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/storeopen"
)

// Config describes a server.
type Config struct {
	// Listen is the address to listen on. Empty: the address this data
	// directory's last server used, or 127.0.0.1 on a free port.
	Listen string
	// DataDir holds the database (by default), logs and checkpoints.
	DataDir string
	// DB is the store URL; empty means SQLite at DataDir/virga.db.
	DB string
	// DBWait is how long Start waits for a database that cannot be reached
	// yet or is starting up or recovering (store.ErrUnavailable), retrying
	// with capped exponential backoff and saying what it waits for; 0
	// means DefaultDBWait, negative not at all.
	DBWait time.Duration
	// Capacity is the local backend's capacity; zero means this machine's.
	Capacity virga.Resources
	// ShimCommand runs the trial shim; nil means this executable's "shim" subcommand.
	ShimCommand []string
	// WarmShims is how many shims the local backend keeps started ahead of
	// need (0: 4; negative: none). More make bursts of starts faster.
	WarmShims int
	// Pricer prices attempts (see control.Pricer): the control loop records
	// each one's cost when it ends, the API prices running ones as they are
	// read. Nil means everything costs 0.
	Pricer control.Pricer
	// CapacityFile, if set, is a capacity file (docs/capacity.md): its pools,
	// all of backend local, become the local backend's pools (spot ones
	// emulated: reclaimed on their trace or rate model, from when the server
	// starts), and its prices price the attempts unless Pricer is set. The
	// trials of experiments with a deadline are then placed and moved by
	// Virga's experiment policy (schedule.ExpPlanned), as in virga sim.
	CapacityFile string
	// Advertise is the server's base URL as trials on other machines reach
	// it (Slurm and Kubernetes pools), e.g. http://virga.example:7070;
	// default the URL it listens on.
	Advertise string
	// Checkpoints is where checkpoints are stored: a directory, or an object
	// store URL (file:///shared/virga, s3://bucket?region=..., gs://bucket,
	// azblob://container) of a scheme in CheckpointSchemes (see
	// checkpoint.OpenURL). Default DATA-DIR/checkpoints.
	Checkpoints string
	// CheckpointSchemes opens the URLs Checkpoints may name: the binary
	// links the object-store drivers it wants (package blobstore and its
	// cloud drivers) and passes them here. Nil: directories only.
	CheckpointSchemes checkpoint.Schemes
	// Backends builds the backend of a capacity file's pools for the
	// backends beyond local and slurm (kubernetes): the binary links the
	// drivers it wants and passes them here. A capacity file whose pools
	// name a backend not here is refused.
	Backends map[spec.PoolBackend]BackendFactory
	// Agent is the `virga` executable as Slurm nodes see it (default: this
	// one); KubeImage, KubeNamespace and Kubeconfig configure pools of
	// backend kubernetes.
	Agent         string
	KubeImage     string
	KubeNamespace string
	Kubeconfig    string
	// Backend, if set, runs the trials instead of the backend the capacity
	// file's pools name (for embedding Virga, and for tests). The server
	// closes it.
	Backend backend.Backend
	Version string
	Logger  *slog.Logger

	// clock times the wait for the database; the zero value is the real
	// clock (set by tests only).
	clock clock
}

// DefaultDBWait is how long a server waits for its database by default.
const DefaultDBWait = 2 * time.Minute

// Backoff between attempts to open a database that is unavailable.
const (
	dbFirstBackoff = 250 * time.Millisecond
	dbMaxBackoff   = 5 * time.Second
)

// clock is the time of Start's waits. Its zero value is the real clock.
type clock struct {
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
}

func (c clock) Now() time.Time {
	if c.now == nil {
		return time.Now()
	}
	return c.now()
}

// Sleep waits for d, or until ctx ends (then it returns ctx's error).
func (c clock) Sleep(ctx context.Context, d time.Duration) error {
	if c.sleep != nil {
		return c.sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Server is a running Virga server.
type Server struct {
	URL       string // base URL, e.g. http://127.0.0.1:7070
	TokenFile string // where the admin token is stored
	Token     string // the admin token

	cfg     Config
	ctl     *control.Controller
	st      store.Store
	be      backend.Backend
	cks     checkpoint.Storage
	httpSrv *http.Server
	lock    *os.File
	cancel  context.CancelFunc
	runErr  chan error
}

// Info is what server.json records about the server that owns a data directory.
type Info struct {
	URL string `json:"url"`
	PID int    `json:"pid"`
}

// ErrBusy means another server owns the data directory.
var ErrBusy = errors.New("another Virga server owns this data directory")

// State says whether a server owns a data directory, and whether it serves.
type State int

const (
	// NotRunning: no server owns the data directory.
	NotRunning State = iota
	// Starting: a server owns it but does not serve yet (it is opening its
	// store, waiting for its database, or recovering); it will serve, or
	// exit and release the directory.
	Starting
	// Serving: a server owns it and serves at the URL of its Info.
	Serving
)

// Running returns the server that owns dataDir and serves now, if any.
func Running(dataDir string) (Info, bool) {
	info, st := Lookup(dataDir)
	return info, st == Serving
}

// Lookup says whether a server owns dataDir and, if it serves, where. A
// server that owns the directory writes server.json only once it serves
// (and removes the one of the server before it first), so a server starting
// is never taken for the one before it.
func Lookup(dataDir string) (Info, State) {
	f, err := os.OpenFile(filepath.Join(dataDir, "server.lock"), os.O_RDWR, 0)
	if err != nil {
		return Info{}, NotRunning
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return Info{}, NotRunning
	}
	var info Info
	b, err := os.ReadFile(filepath.Join(dataDir, "server.json"))
	if err != nil || json.Unmarshal(b, &info) != nil || info.URL == "" {
		return Info{}, Starting
	}
	return info, Serving
}

// Start opens everything, recovers the state and starts serving.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	cfg.DataDir = dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating data directory: %w", err)
	}
	s := &Server{cfg: cfg, runErr: make(chan error, 1)}
	ok := false
	defer func() {
		if !ok {
			s.closeParts()
		}
	}()
	// 1. Own the data directory.
	s.lock, err = os.OpenFile(filepath.Join(dir, "server.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(s.lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if info, running := Running(dir); running {
			return nil, fmt.Errorf("%s: %w (pid %d at %s)", dir, ErrBusy, info.PID, info.URL)
		}
		return nil, fmt.Errorf("%s: %w", dir, ErrBusy)
	}
	// The server before this one is no longer: until this one serves, no
	// server.json may send clients to its address. Its address is kept for
	// this one to reuse (step 3).
	var previous Info
	if b, err := os.ReadFile(filepath.Join(dir, "server.json")); err == nil {
		_ = json.Unmarshal(b, &previous)
	}
	if err := os.Remove(filepath.Join(dir, "server.json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("removing the previous server's server.json: %w", err)
	}
	// 2. Store, secrets, checkpoints, backend.
	dbURL := cfg.DB
	if dbURL == "" {
		dbURL = filepath.Join(dir, "virga.db")
	}
	if err := sqliteParent(dbURL, dir); err != nil {
		return nil, err
	}
	if s.st, err = openStore(ctx, dbURL, cfg.DBWait, cfg.clock, cfg.Logger, storeopen.Open); err != nil {
		return nil, fmt.Errorf("opening store: %w", err)
	}
	secret, err := readOrCreate(filepath.Join(dir, "secret"), 32)
	if err != nil {
		return nil, err
	}
	s.TokenFile = filepath.Join(dir, "admin-token")
	if s.Token, err = s.adminToken(ctx); err != nil {
		return nil, err
	}
	var cks checkpoint.Storage
	if cfg.Checkpoints == "" {
		cks, err = checkpoint.Open(filepath.Join(dir, "checkpoints"))
	} else {
		cks, err = checkpoint.OpenURL(ctx, cfg.Checkpoints, cfg.CheckpointSchemes)
	}
	if err != nil {
		return nil, err
	}
	s.cks = cks
	warm := cfg.WarmShims
	if warm == 0 {
		warm = 4
	}
	var pools []local.Pool
	var policy schedule.ExperimentPolicy
	var poolInfo map[string]control.PoolInfo
	if cfg.CapacityFile != "" {
		file, _, err := spec.LoadCapacity(cfg.CapacityFile)
		if err != nil {
			return nil, err
		}
		kind, err := poolBackend(cfg.CapacityFile, file)
		if err != nil {
			return nil, err
		}
		// Slurm pools take what they leave out from their partitions, and
		// are checked against them before anything is submitted.
		if err := resolveSlurm(ctx, file, kind == spec.BackendSlurm && cfg.Backend == nil); err != nil {
			return nil, err
		}
		set, err := capacity.Load(file, filepath.Dir(cfg.CapacityFile))
		if err != nil {
			return nil, err
		}
		switch {
		case cfg.Backend != nil:
		case kind == spec.BackendSlurm:
			cfg.Backend, err = slurmBackend(&cfg, dir, file, cfg.Logger)
		case kind != "" && kind != spec.BackendLocal:
			cfg.Backend, err = driverBackend(&cfg, file, kind)
		default:
			now := time.Now()
			pools, err = LocalPools(cfg.CapacityFile, set, now, mrand.New(mrand.NewPCG(uint64(now.UnixNano()), 0x90015)))
		}
		if err != nil {
			return nil, err
		}
		if cfg.Pricer == nil {
			cfg.Pricer = set.Pricer()
		}
		// Experiments with a deadline are placed by Virga's policy, as in
		// virga sim.
		policy, poolInfo = &schedule.ExpPlanned{}, PoolInfo(set)
	}
	if s.be = cfg.Backend; s.be == nil {
		if s.be, err = local.New(local.Config{Capacity: cfg.Capacity, ShimCommand: cfg.ShimCommand, WarmShims: warm, Pools: pools}); err != nil {
			return nil, err
		}
	}
	// 3. Listen (the report URL must be known before trials start).
	var ln net.Listener
	listen := cfg.Listen
	if listen == "" {
		listen = "127.0.0.1:0"
		if strings.HasPrefix(previous.URL, "http://127.0.0.1:") {
			// Keep the address trials already know, if it is free.
			ln, _ = net.Listen("tcp", strings.TrimPrefix(previous.URL, "http://"))
		}
	}
	if ln == nil {
		if ln, err = net.Listen("tcp", listen); err != nil {
			return nil, fmt.Errorf("listening on %s: %w", listen, err)
		}
	}
	addr := ln.Addr().(*net.TCPAddr)
	host := addr.IP.String()
	if addr.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	s.URL = "http://" + net.JoinHostPort(host, fmt.Sprint(addr.Port))
	reportBase := s.URL
	if cfg.Advertise != "" {
		reportBase = strings.TrimRight(cfg.Advertise, "/")
	}
	s.ctl, err = control.New(control.Config{Store: s.st, Backend: s.be, Checkpoints: cks, DataDir: dir,
		ReportBase: reportBase, Secret: secret, Logger: cfg.Logger, Pricer: cfg.Pricer, Policy: policy, PoolInfo: poolInfo})
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	apiSrv := api.New(api.Config{Control: s.ctl, Store: s.st, RequireAuth: !addr.IP.IsLoopback(), Version: cfg.Version,
		Pricer: cfg.Pricer, Models: registry.New(s.st, cks, nil)})
	s.httpSrv = &http.Server{Handler: apiSrv, ReadHeaderTimeout: 10 * time.Second}
	// 4. Recover and run the control loop, then serve.
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() { s.runErr <- s.ctl.Run(runCtx) }()
	// Serve only once recovery is done: before that no attempt is known, and a
	// report would be refused as superseded.
	select {
	case <-s.ctl.Ready():
	case <-s.ctl.Done():
		_ = ln.Close()
		return nil, fmt.Errorf("recovering state: %w", <-s.runErr)
	}
	go func() { _ = s.httpSrv.Serve(ln) }()
	info, _ := json.Marshal(Info{URL: s.URL, PID: os.Getpid()})
	if err := writeFileAtomic(filepath.Join(dir, "server.json"), info, 0o644); err != nil {
		ok = true // Close releases everything
		_ = s.Close()
		return nil, err
	}
	ok = true
	return s, nil
}

// openStore opens the store at url with open. While its database is
// unavailable (store.ErrUnavailable: nothing listens yet, it is starting up
// or recovering) it tries again after a backoff that doubles from
// dbFirstBackoff up to dbMaxBackoff, logging each time what it waits for,
// until wait (0: DefaultDBWait; negative: no waiting) has passed. Any
// other error ends it at once.
func openStore(ctx context.Context, url string, wait time.Duration, clk clock, log *slog.Logger,
	open func(context.Context, string) (store.Store, error)) (store.Store, error) {
	if wait == 0 {
		wait = DefaultDBWait
	}
	start := clk.Now()
	backoff := dbFirstBackoff
	for tries := 1; ; tries++ {
		st, err := open(ctx, url)
		if err == nil {
			if tries > 1 {
				log.Info("the database is available", "waited", clk.Now().Sub(start).Round(time.Millisecond), "attempts", tries)
			}
			return st, nil
		}
		if !errors.Is(err, store.ErrUnavailable) || wait < 0 {
			return nil, err
		}
		waited := clk.Now().Sub(start)
		if waited >= wait {
			return nil, fmt.Errorf("gave up waiting for the database after %s and %d attempts (--db-wait): %w", wait.Round(time.Millisecond), tries, err)
		}
		d := min(backoff, wait-waited)
		log.Warn("waiting for the database: it cannot be reached yet, or is starting up or recovering",
			"retry_in", d.Round(time.Millisecond), "waited", waited.Round(time.Millisecond), "gives_up_after", wait, "err", err)
		if err := clk.Sleep(ctx, d); err != nil {
			return nil, fmt.Errorf("waiting for the database: %w", err)
		}
		backoff = min(2*backoff, dbMaxBackoff)
	}
}

// sqliteParent refuses an SQLite store whose directory does not exist, rather
// than create an empty database somewhere unexpected; a directory inside the
// data directory is created.
func sqliteParent(dbURL, dataDir string) error {
	kind, target, err := storeopen.Parse(dbURL)
	if err != nil || kind != "sqlite" {
		return nil // storeopen.Open says what is wrong
	}
	abs, err := filepath.Abs(target)
	if err != nil {
		return err
	}
	parent := filepath.Dir(abs)
	if rel, err := filepath.Rel(dataDir, parent); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return fmt.Errorf("store %s: %w", target, err)
		}
		return nil
	}
	if fi, err := os.Stat(parent); err != nil || !fi.IsDir() {
		return fmt.Errorf("store %s: the directory %s does not exist (create it, or give a path in an existing directory)", target, parent)
	}
	return nil
}

// Controller returns the server's control loop (for embedding and tests).
func (s *Server) Controller() *control.Controller { return s.ctl }

// Store returns the server's store.
func (s *Server) Store() store.Store { return s.st }

// Done is closed if the control loop stops on its own (a failed commit).
func (s *Server) Done() <-chan struct{} { return s.ctl.Done() }

// Close stops serving and closes everything. Running trials keep running and
// are adopted by the next server on this data directory.
func (s *Server) Close() error {
	// Stop the loop first: open watch streams end with it, so Shutdown does
	// not wait for them; reports in flight get 503 and are retried by trials.
	var err error
	if s.cancel != nil {
		s.cancel()
		err = <-s.runErr
	}
	if s.httpSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_ = s.httpSrv.Shutdown(ctx)
		cancel()
	}
	s.closeParts()
	return err
}

func (s *Server) closeParts() {
	if s.be != nil {
		_ = s.be.Close()
	}
	if s.st != nil {
		_ = s.st.Close()
	}
	if s.cks != nil {
		_ = s.cks.Close()
	}
	if s.lock != nil {
		_ = s.lock.Close()
	}
}

// adminToken reads the admin token file, creating the token on first start,
// and makes sure the store knows its hash.
func (s *Server) adminToken(ctx context.Context) (string, error) {
	raw, err := readOrCreate(s.TokenFile, 24)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(raw))
	sum := sha256.Sum256([]byte(tok))
	if _, err := s.st.TokenByHash(ctx, sum[:]); errors.Is(err, virga.ErrNotFound) {
		if err := s.st.PutToken(ctx, &store.Token{Name: "admin", Hash: sum[:], CreatedAt: time.Now()}); err != nil {
			return "", fmt.Errorf("storing the admin token: %w", err)
		}
		s.cfg.Logger.Info("created the admin API token", "file", s.TokenFile)
	} else if err != nil {
		return "", err
	}
	return tok, nil
}

// readOrCreate returns a file's content, creating it with n random bytes
// (hex-encoded) if it does not exist.
func readOrCreate(path string, n int) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return []byte(strings.TrimSpace(string(b))), nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	buf := make([]byte, n)
	if _, err := rand.Read(buf); err != nil {
		return nil, err
	}
	v := []byte(hex.EncodeToString(buf))
	if err := writeFileAtomic(path, append(v, '\n'), 0o600); err != nil {
		return nil, err
	}
	return v, nil
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// PoolInfo is what the experiment policy knows of a capacity file's pools,
// by name, as virga sim gives it: market, price, node, restart overhead,
// billing minimum and reliability.
func PoolInfo(set *capacity.Set) map[string]control.PoolInfo {
	out := make(map[string]control.PoolInfo, len(set.Pools))
	for _, p := range set.Pools {
		st := p.Stats()
		stats := schedule.StatsOfPool(st)
		out[p.Name] = control.PoolInfo{Spot: p.Spot(), Node: p.Node, Price: p.Price, RestartOverhead: p.RestartOverhead,
			MinBilled: p.Billing.Billed(max(p.RestartOverhead, 1)), Stats: stats}
	}
	return out
}

// LocalPools turns a capacity file's pools into the local backend's: each
// hands out its node shape times its most nodes, and a spot pool is
// reclaimed on its preemption model's timeline from start. Pools of other
// backends are refused: they are for virga sim and virga estimate.
func LocalPools(file string, set *capacity.Set, start time.Time, rng *mrand.Rand) ([]local.Pool, error) {
	var out []local.Pool
	for _, p := range set.Pools {
		if p.Backend != spec.BackendLocal {
			return nil, fmt.Errorf("%s: pool %q is for backend %s; a Virga server runs local pools only (the others are for virga sim and virga estimate)", file, p.Name, p.Backend)
		}
		n := max(p.MaxNodes, 1)
		lp := local.Pool{Name: p.Name, Capacity: virga.Resources{CPU: p.Node.CPU * float64(n), MemoryMB: p.Node.MemoryMB * int64(n), GPU: p.Node.GPU * n}}
		if p.Spot() && p.Preemption != nil {
			lp.Availability = p.Timeline(start, rng)
			lp.Warning = p.Warning
		}
		out = append(out, lp)
	}
	return out, nil
}
