package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/serve/batch"
	"github.com/virga-ml/virga/internal/serve/engine"
	"github.com/virga-ml/virga/internal/serve/oip"
	"github.com/virga-ml/virga/internal/serve/regsource"
	"github.com/virga-ml/virga/internal/serve/runtime/onnx"
)

type serveFlags struct {
	models     []string
	repository string
	httpAddr   string
	grpcAddr   string
	memory     string
	objective  time.Duration
	batching   []string
	instances  int
	threads    int
	maxQueue   int
	pin        []string
	watch      time.Duration
	library    string
	lru        bool
	cache      string
	maxLoads   int
	profiles   string
}

func newServeCmd(g *globals) *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve models over the Open Inference Protocol (REST and gRPC), many per machine, keeping a latency objective",
		Long: `Serve models from the registry (--models digits@prod,fm-ctr@prod) or from a directory in Triton's layout
(--repository DIR: DIR/MODEL/VERSION/virga-model.json) over the Open Inference Protocol: REST on --http, gRPC on
--grpc, Prometheus metrics at /metrics on the REST port.

Models load on their first request (or at start with --pin), one at a time, within the --memory budget: when
another needs room, the idle models with the fewest recent requests per byte are unloaded if it is asked for
more than twice as often as they are together (else its request is refused at once, 429 NotAdmitted); a
model with requests in flight never is, one requested within the objective only as a last resort (--cache-policy). A reload of the
same files is not profiled again (--profile-cache). Every request
has a deadline (arrival + --objective, or its own timeout parameter); with the default batching policy,
deadline, a request that can no longer meet it is refused at once (429) rather than served late.

An alias served (digits@prod) is checked every --watch: when it moves, the new version is loaded and warmed
while the old one serves, then takes over; a version that fails to load leaves the old one serving.
Off loopback, every request but the health checks needs "Authorization: Bearer TOKEN" with the admin token of
--data-dir (or VIRGA_API_TOKEN).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd.Context(), g, f)
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&f.models, "models", nil, "registry references to serve, comma-separated: NAME (latest version), NAME@ALIAS, NAME:VERSION")
	fl.StringVar(&f.repository, "repository", "", "serve a model repository directory (DIR/MODEL/VERSION/virga-model.json) instead of the registry")
	fl.StringVar(&f.httpAddr, "http", "127.0.0.1:8000", "REST listen address (\"\" for none)")
	fl.StringVar(&f.grpcAddr, "grpc", "127.0.0.1:8001", "gRPC listen address (\"\" for none)")
	fl.StringVar(&f.memory, "memory", "1GiB", "memory budget of the loaded models (e.g. 512MiB, 2GiB)")
	fl.DurationVar(&f.objective, "objective", 100*time.Millisecond, "latency objective: a request's deadline when it sets no timeout")
	fl.StringSliceVar(&f.batching, "batching", []string{batch.NameDeadline}, "batching policy: deadline, fixed (Triton's dynamic batcher; fixed:1ms with a max queue delay), aimd (Clipper's) or none; MODEL=POLICY sets one model's")
	fl.IntVar(&f.instances, "instances", 1, "batches of one model run at once")
	fl.IntVar(&f.threads, "threads", 1, "ONNX Runtime intra-op threads per call")
	fl.IntVar(&f.maxQueue, "max-queue", engine.DefaultMaxQueue, "most requests waiting for one model; one more is refused (429)")
	fl.StringSliceVar(&f.pin, "pin", nil, "models to load at start and never unload")
	fl.StringVar(&f.cache, "cache-policy", "cost", "which model a load may evict: cost (the idle models with the fewest recent requests per byte, weighted by their load time, and only for a model asked for more than twice as often as all of them together; models requested within the objective last), frequency (the least recently used idle model, if asked for less often than the newcomer) or lru (the least recently used idle model); a load not admitted is refused NotAdmitted")
	fl.BoolVar(&f.lru, "lru", false, "plain LRU eviction: the same as --cache-policy lru")
	fl.IntVar(&f.maxLoads, "max-loads", 1, "models loading at once (decode, warm-up, profile), taking CPU from the models serving")
	fl.StringVar(&f.profiles, "profile-cache", "", "directory keeping the models' load-time profiles by their files' digest, so a reload or a restart does not profile again (default: DATA-DIR/serve-cache/profiles with --models; memory only with --repository)")
	fl.DurationVar(&f.watch, "watch", 2*time.Second, "how often served aliases are checked for moves")
	fl.StringVar(&f.library, "onnxruntime", os.Getenv("VIRGA_ONNXRUNTIME"), "path of libonnxruntime.so (env VIRGA_ONNXRUNTIME; default: where scripts/onnxruntime.sh installs it)")
	return cmd
}

// parseBytes reads a size such as 2GiB, 512MiB, 1.5GB or 1000000.
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	t := strings.TrimSpace(s)
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v <= 0 || v*mult > 1<<62 {
		return 0, fmt.Errorf("%q is not a size: want a positive number with an optional unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB), e.g. 2GiB", s)
	}
	return int64(v * mult), nil
}

// batchingPolicies reads --batching: a default policy and per-model ones.
func batchingPolicies(specs []string, objective time.Duration) (func(model, version string) batch.Policy, error) {
	def := batch.NameDeadline
	per := map[string]string{}
	for _, s := range specs {
		name, pol, ok := strings.Cut(s, "=")
		if !ok {
			name, pol = "", s
		}
		if _, err := newPolicy(pol, objective); err != nil {
			return nil, fmt.Errorf("--batching %s: %w", s, err)
		}
		if name == "" {
			def = pol
		} else {
			per[name] = pol
		}
	}
	return func(model, _ string) batch.Policy {
		pol := def
		if p, ok := per[model]; ok {
			pol = p
		}
		p, _ := newPolicy(pol, objective) // checked above
		return p
	}, nil
}

// newPolicy makes a batching policy from its name; fixed:DELAY is Triton's
// dynamic batcher with a max queue delay (fixed alone: no delay, Triton's
// default).
func newPolicy(spec string, objective time.Duration) (batch.Policy, error) {
	name, arg, hasArg := strings.Cut(spec, ":")
	if !hasArg {
		return batch.New(name, objective)
	}
	if name != batch.NameFixed {
		return nil, fmt.Errorf("%q: only fixed takes an argument (fixed:DELAY, e.g. fixed:1ms)", spec)
	}
	delay, err := time.ParseDuration(arg)
	if err != nil || delay < 0 {
		return nil, fmt.Errorf("%q: want fixed:DELAY with a duration such as 500us or 5ms", spec)
	}
	return &batch.Fixed{MaxQueueDelay: delay}, nil
}

// isLoopback reports whether addr (host:port) listens on loopback only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// serveTokenCheck accepts the admin token (compared by SHA-256 digest, in
// constant time).
func serveTokenCheck(admin string) func(context.Context, string) error {
	want := sha256.Sum256([]byte(admin))
	return func(_ context.Context, tok string) error {
		got := sha256.Sum256([]byte(tok))
		if tok == "" || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			return errors.New("a valid bearer token is required (the admin token of the data directory)")
		}
		return nil
	}
}

func runServe(ctx context.Context, g *globals, f serveFlags) error {
	budget, err := parseBytes(f.memory)
	if err != nil {
		return usageError{fmt.Errorf("--memory: %w", err)}
	}
	if f.objective <= 0 {
		return usageError{fmt.Errorf("--objective %s: want a positive duration such as 50ms", f.objective)}
	}
	if f.instances < 1 || f.threads < 1 || f.maxQueue < 1 || f.maxLoads < 1 || f.watch <= 0 {
		return usageError{errors.New("--instances, --threads, --max-queue, --max-loads and --watch must be positive")}
	}
	if f.lru {
		if f.cache != "cost" && f.cache != "lru" {
			return usageError{fmt.Errorf("--lru and --cache-policy %s: give one", f.cache)}
		}
		f.cache = "lru"
	}
	if f.cache != "cost" && f.cache != "frequency" && f.cache != "lru" {
		return usageError{fmt.Errorf("--cache-policy %q: want cost, frequency or lru", f.cache)}
	}
	if f.httpAddr == "" && f.grpcAddr == "" {
		return usageError{errors.New("--http and --grpc are both empty: nothing to listen on")}
	}
	policy, err := batchingPolicies(f.batching, f.objective)
	if err != nil {
		return usageError{err}
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := log.New(g.stderr, "", log.LstdFlags)

	var source engine.Source
	var watcher *regsource.Source
	if f.repository != "" {
		if len(f.models) > 0 {
			return usageError{errors.New("--models and --repository: give one (models from the registry, or a repository directory)")}
		}
		if err := checkDirFlag("--repository", f.repository); err != nil {
			return err
		}
		source = engine.DirSource{Root: f.repository}
	} else {
		var refs []virga.ModelRef
		for _, m := range f.models {
			ref, err := virga.ParseModelRef(m)
			if err != nil {
				return usageError{fmt.Errorf("--models: %w", err)}
			}
			refs = append(refs, ref)
		}
		c, done, err := g.client(ctx)
		if err != nil {
			return err
		}
		defer done()
		watcher, err = regsource.New(c, filepath.Join(g.dataDir, "serve-cache"), refs)
		if err != nil {
			return usageError{err}
		}
		source = watcher
		if f.profiles == "" {
			f.profiles = filepath.Join(g.dataDir, "serve-cache", "profiles")
		}
	}

	eng, err := engine.New(engine.Options{
		Source:       source,
		Runtimes:     engine.DefaultRuntimes(onnx.Settings{IntraOpThreads: f.threads, Library: f.library}),
		MemoryBudget: budget,
		Objective:    f.objective,
		Instances:    f.instances,
		MaxQueue:     f.maxQueue,
		Policy:       policy,
		Pinned:       f.pin,
		Admission:    f.cache == "frequency",
		CostAware:    f.cache == "cost",
		MaxLoads:     f.maxLoads,
		ProfileCache: f.profiles,
		Name:         "virga",
		Version:      version,
	})
	if err != nil {
		return err
	}
	defer eng.Close()

	opts := oip.Options{SharedMemory: oip.NewSharedMemory()} // one set of regions for REST and gRPC
	defer opts.SharedMemory.Close()
	offLoopback := (f.httpAddr != "" && !isLoopback(f.httpAddr)) || (f.grpcAddr != "" && !isLoopback(f.grpcAddr))
	if offLoopback {
		tok := g.tokenFor(g.dataDir)
		if tok == "" {
			return usageError{fmt.Errorf("listening off loopback needs a token: start `virga server` once on %s (it writes admin-token) or set VIRGA_API_TOKEN", g.dataDir)}
		}
		opts.CheckToken = serveTokenCheck(tok)
	}

	errc := make(chan error, 2)
	var httpSrv *http.Server
	if f.httpAddr != "" {
		ln, err := net.Listen("tcp", f.httpAddr)
		if err != nil {
			return fmt.Errorf("--http: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", eng.MetricsHandler())
		mux.Handle("/", oip.NewHandler(eng, opts))
		httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { errc <- httpSrv.Serve(ln) }()
		fmt.Fprintf(g.stdout, "serving REST on http://%s (Open Inference Protocol under /v2, metrics at /metrics)\n", ln.Addr())
	}
	if f.grpcAddr != "" {
		ln, err := net.Listen("tcp", f.grpcAddr)
		if err != nil {
			return fmt.Errorf("--grpc: %w", err)
		}
		gs := oip.NewGRPCServer(eng, opts)
		go func() { errc <- gs.Serve(ln) }()
		defer gs.GracefulStop()
		fmt.Fprintf(g.stdout, "serving gRPC on %s (inference.GRPCInferenceService)\n", ln.Addr())
	}
	if watcher != nil {
		go watcher.Watch(ctx, f.watch, eng.Swap, logger.Printf)
		if len(f.models) == 0 {
			fmt.Fprintln(g.stdout, "serving every registered model by name (its latest version)")
		} else {
			fmt.Fprintf(g.stdout, "serving %s\n", strings.Join(f.models, ", "))
		}
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	if httpSrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = httpSrv.Shutdown(sctx)
	}
	return nil
}
