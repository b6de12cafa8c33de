// Command virga runs experiments: a training job or a hyperparameter search
// described in one YAML file, on this machine by default. Each subcommand has
// its own file; all of them but run and server only call the HTTP API.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/virga-ml/virga/internal/agent"
	"github.com/virga-ml/virga/internal/api"
	"github.com/virga-ml/virga/internal/api/client"
	"github.com/virga-ml/virga/internal/backend/local"
	"github.com/virga-ml/virga/internal/checkpoint"
	"github.com/virga-ml/virga/internal/registry"
	"github.com/virga-ml/virga/internal/server"
	"github.com/virga-ml/virga/internal/spec"
	"github.com/virga-ml/virga/internal/store/storeopen"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // something went wrong, or the experiment failed
	exitUsage   = 2 // bad flags or a bad experiment file
)

// usageError marks an error that exits with code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// globals are the flags every command shares.
type globals struct {
	server  string
	token   string
	dataDir string
	json    bool
	// readOnly is set by client when it serves the data directory's store
	// in-process, with no server running.
	readOnly bool
	// tokenFile is the admin-token file the token sent was read from, when
	// neither --token nor VIRGA_API_TOKEN gave one.
	tokenFile string
	stdout    io.Writer
	stderr    io.Writer
	stdin     io.Reader
}

func init() {
	if len(os.Args) > 1 && os.Args[1] == "shim" {
		local.ShimThread() // main, and the trial's fork, on the main thread
	}
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "shim" {
		os.Exit(local.ShimMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "gang" {
		os.Exit(agent.GangMain(os.Args[2:]))
	}
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes the CLI and returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	g := &globals{stdout: stdout, stderr: stderr, stdin: stdin}
	root := newRoot(g)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetIn(stdin)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	msg := err.Error()
	var local notTheServer
	if errors.Is(err, syscall.ECONNREFUSED) && !errors.As(err, &local) {
		msg += "\n  is `virga server` running? (VIRGA_SERVER / --server)"
	}
	if ce, ok := errors.AsType[*client.Error](err); ok && ce.Status == http.StatusUnauthorized && g.tokenFile != "" {
		msg += fmt.Sprintf("\n  the token sent is the one in %s (read when neither --token nor VIRGA_API_TOKEN is given): "+
			"pass this server's admin token with --token or VIRGA_API_TOKEN, or its data directory with --data-dir", g.tokenFile)
	}
	fmt.Fprintln(stderr, "virga:", msg)
	// A bad flag or argument, a bad file, or a file named that cannot be
	// read: nothing was done, fix the command line.
	var ue usageError
	var se *spec.Error
	var fe *spec.FileError
	if errors.As(err, &ue) || errors.As(err, &se) || errors.As(err, &fe) {
		return exitUsage
	}
	if strings.HasPrefix(err.Error(), "unknown command") || strings.HasPrefix(err.Error(), "unknown flag") ||
		strings.Contains(err.Error(), "accepts ") || strings.Contains(err.Error(), "requires at least") {
		return exitUsage
	}
	return exitFailure
}

// exitError ends the command with a code, its message already printed.
type exitError struct{ code int }

func (e exitError) Error() string { return "exit " + strconv.Itoa(e.code) }

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:           "virga",
		Short:         "Virga runs experiments: training jobs and hyperparameter searches, crash-safe, on cheap capacity",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       versionString(),
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.server, "server", os.Getenv("VIRGA_SERVER"), "URL of a running Virga server (env VIRGA_SERVER); default: the server of --data-dir, or an embedded one")
	pf.StringVar(&g.token, "token", os.Getenv("VIRGA_API_TOKEN"), "API token (env VIRGA_API_TOKEN); default: the admin-token file of --data-dir, with --server too")
	pf.StringVar(&g.dataDir, "data-dir", envOr("VIRGA_DATA_DIR", ".virga"), "data directory of the embedded server (env VIRGA_DATA_DIR)")
	pf.BoolVar(&g.json, "json", false, "print JSON for scripts")
	root.AddCommand(
		newRunCmd(g), newServerCmd(g), newValidateCmd(g), newLsCmd(g), newShowCmd(g), newTrialsCmd(g),
		newLogsCmd(g), newControlCmd(g, "stop"), newControlCmd(g, "pause"), newControlCmd(g, "resume"), newBestCmd(g), newSimCmd(g),
		newEstimateCmd(g), newAgentCmd(g), newAlgoCmd(g), newModelsCmd(g), newServeCmd(g), newBenchCmd(g),
	)
	return root
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// client returns a client of the configured server: --server, else the server
// that owns --data-dir, else a read-only view of the data directory's store
// (writes then fail with a message saying to start a server).
func (g *globals) client(ctx context.Context) (*client.Client, func(), error) {
	if g.server != "" {
		if err := checkServerURL(g.server); err != nil {
			return nil, nil, err
		}
		return client.New(g.server, g.tokenFor(g.dataDir)), func() {}, nil
	}
	info, ok, err := g.runningServer(ctx)
	if err != nil {
		return nil, nil, err
	}
	if ok {
		return client.New(info.URL, g.tokenFor(g.dataDir)), func() {}, nil
	}
	db := filepath.Join(g.dataDir, "virga.db")
	if _, err := os.Stat(db); err != nil {
		return nil, nil, fmt.Errorf("no Virga server is running and %s has no state: run an experiment with `virga run FILE`, start `virga server`, or pass --server URL", g.dataDir)
	}
	st, err := storeopen.Open(ctx, db)
	if err != nil {
		return nil, nil, err
	}
	// Serve in-process without a socket: an HTTP server on in-memory pipes.
	ln := newMemListener()
	// Model files are read in place from the default checkpoint directory
	// (never opened as a checkpoint.Store: that is the server's to own).
	models := registry.New(st, readOnlyFiles{root: filepath.Join(g.dataDir, "checkpoints")}, nil)
	srv := &http.Server{Handler: api.New(api.Config{Store: st, Version: version, Models: models}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	c := client.NewWithHTTP("http://localhost", "", &http.Client{Transport: &http.Transport{DialContext: ln.dial}})
	g.readOnly = true
	return c, func() { _ = srv.Close(); _ = st.Close() }, nil
}

// readOnlyFiles is a data directory's checkpoint directory read in place,
// for the read-only view of a data directory without a server: model files
// can be downloaded, not written.
type readOnlyFiles struct{ root string }

// Path returns the directory of checkpoint id ("" for an invalid ID).
func (f readOnlyFiles) Path(id string) string {
	if !checkpoint.ValidID(id) {
		return ""
	}
	return filepath.Join(f.root, id)
}

func (readOnlyFiles) SaveFor(string, string) (checkpoint.Info, error) {
	return checkpoint.Info{}, registry.ErrNoFiles
}
func (readOnlyFiles) Restore(string, string) error { return registry.ErrNoFiles }
func (readOnlyFiles) Delete(string) error          { return registry.ErrNoFiles }

// runningServer returns the server that owns the data directory and serves,
// if any. While one starts (opening its store, waiting for its database,
// recovering: `virga server &` just before this command), it waits for it,
// saying so after a second, until it serves or exits or ctx ends.
func (g *globals) runningServer(ctx context.Context) (server.Info, bool, error) {
	const poll = 50 * time.Millisecond
	said := time.Now().Add(time.Second)
	for {
		info, st := server.Lookup(g.dataDir)
		if st != server.Starting {
			return info, st == server.Serving, nil
		}
		if !said.IsZero() && time.Now().After(said) {
			fmt.Fprintf(g.stderr, "waiting for the Virga server starting on %s\n", g.dataDir)
			said = time.Time{}
		}
		select {
		case <-ctx.Done():
			return server.Info{}, false, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// checkServerURL refuses a --server value that is not an http(s) URL.
func checkServerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageError{fmt.Errorf("--server %q: want a URL like http://HOST:PORT", s)}
	}
	return nil
}

// withID makes a command body that parses its ID argument (of kind) and calls
// fn with a client of the configured server.
func (g *globals) withID(kind string, fn func(ctx context.Context, c *client.Client, id int64) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		id, err := parseID(kind, args[0])
		if err != nil {
			return err
		}
		c, done, err := g.client(cmd.Context())
		if err != nil {
			return err
		}
		defer done()
		return fn(cmd.Context(), c, id)
	}
}

// tokenFor returns the API token to send: --token (or VIRGA_API_TOKEN), else
// the admin token in dataDir's admin-token file, if it has one. That holds
// for a server given with --server too: on the server's machine, --data-dir
// (or VIRGA_DATA_DIR) names its data directory.
func (g *globals) tokenFor(dataDir string) string {
	if g.token != "" {
		return g.token
	}
	file := filepath.Join(dataDir, "admin-token")
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	g.tokenFile = file
	return strings.TrimSpace(string(b))
}

// memListener is a net.Listener whose connections are in-memory pipes, made
// by its dial: an HTTP server in this process without a socket.
type memListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newMemListener() *memListener {
	return &memListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *memListener) Addr() net.Addr { return memAddr{} }

func (l *memListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
	case <-ctx.Done():
	}
	client.Close()
	server.Close()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, net.ErrClosed
}

type memAddr struct{}

func (memAddr) Network() string { return "memory" }
func (memAddr) String() string  { return "in-process" }

func (g *globals) printJSON(v any) error {
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func parseID(kind, s string) (int64, error) {
	id, err := strconv.ParseInt(strings.TrimPrefix(s, "#"), 10, 64)
	if err != nil || id <= 0 {
		return 0, usageError{fmt.Errorf("%s: want a positive integer ID, got %q", kind, s)}
	}
	return id, nil
}

func newLogger(w io.Writer, quiet bool) *slog.Logger {
	level := slog.LevelInfo
	if quiet {
		level = slog.LevelWarn
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}
