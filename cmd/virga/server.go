package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/server"
	"github.com/virga-ml/virga/internal/spec"
)

func newServerCmd(g *globals) *cobra.Command {
	var listen, db, memory, capacityFile string
	var rc remoteFlags
	var cpu float64
	var gpu int
	var dbWait time.Duration
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run a Virga server: the API, the control loop and the local backend",
		Long: `Server runs until SIGINT or SIGTERM. On start it recovers every unfinished
experiment of its store: trials whose processes still run are adopted, the
others restart from their latest checkpoint. On stop, running trials go on and
the next server adopts them.

Token auth is required when listening on a non-loopback address; the admin
token is created on first start in DATA-DIR/admin-token.

A PostgreSQL store that cannot be reached yet, or is starting up or
recovering, is waited for (--db-wait, with backoff, saying so); a wrong
password or URL ends the server at once. Once running, the server exits if
a commit fails: run it under a supervisor that restarts it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			capacity := virga.Resources{CPU: cpu, GPU: gpu}
			if memory != "" {
				mb, err := spec.ParseMemory(memory)
				if err != nil {
					return usageError{fmt.Errorf("--memory: %w", err)}
				}
				capacity.MemoryMB = mb
			}
			if dbWait < 0 {
				return usageError{fmt.Errorf("--db-wait %s: want a duration >= 0 (0: do not wait)", dbWait)}
			}
			if dbWait == 0 {
				dbWait = -1 // server.Config: negative is no waiting
			}
			if cpu < 0 || gpu < 0 || (memory != "" && capacity.MemoryMB <= 0) {
				return usageError{fmt.Errorf("--cpu, --memory and --gpu must not be negative")}
			}
			if capacity != (virga.Resources{}) {
				// What is not declared is this machine's.
				if capacity.CPU == 0 {
					capacity.CPU = float64(runtime.NumCPU())
				}
				if capacity.MemoryMB == 0 {
					mb, err := machineMemoryMB()
					if err != nil {
						return fmt.Errorf("--memory not given and %w", err)
					}
					capacity.MemoryMB = mb
				}
			}
			log := newLogger(g.stderr, false)
			s, err := server.Start(cmd.Context(), withDrivers(server.Config{Listen: listen, DataDir: g.dataDir, DB: db, DBWait: dbWait,
				Capacity: capacity, Version: version, Logger: log, CapacityFile: capacityFile,
				Advertise: rc.advertise, Checkpoints: rc.checkpoints, Agent: rc.agent, KubeImage: rc.kubeImage,
				KubeNamespace: rc.kubeNamespace, Kubeconfig: rc.kubeconfig}))
			if err != nil {
				if _, bad := errors.AsType[*spec.Error](err); bad {
					return usageError{err}
				}
				return notTheServer{err} // a refused connection is the database's, not a Virga server's
			}
			log.Info("virga server ready", "url", s.URL, "data_dir", g.dataDir, "admin_token_file", s.TokenFile)
			if g.json {
				_ = g.printJSON(map[string]string{"url": s.URL, "token_file": s.TokenFile})
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			select {
			case <-ctx.Done():
				log.Info("shutting down; running trials go on and will be adopted by the next server")
			case <-s.Done():
			}
			return s.Close()
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", envOr("VIRGA_LISTEN", ""), "address to listen on (default: 127.0.0.1 on the port this data directory used last, or a free one)")
	f.StringVar(&db, "db", os.Getenv("VIRGA_DB"), "store URL: postgres://... for PostgreSQL; default SQLite in the data directory")
	f.DurationVar(&dbWait, "db-wait", server.DefaultDBWait, "how long to wait at start for a database that cannot be reached yet or is starting up or recovering, retrying with backoff (0: do not wait)")
	f.Float64Var(&cpu, "cpu", 0, "CPU cores trials may use (default: this machine's)")
	f.StringVar(&memory, "memory", "", "memory trials may use, e.g. 16GiB (default: this machine's)")
	f.IntVar(&gpu, "gpu", 0, "GPUs trials may use")
	f.StringVar(&capacityFile, "capacity", os.Getenv("VIRGA_CAPACITY"), "capacity file: pools for the trials (local ones, spot ones emulated; or Slurm partitions; or Kubernetes nodes) and their prices (docs/capacity.md; env VIRGA_CAPACITY)")
	rc.register(f)
	return cmd
}

// remoteFlags configure checkpoint storage and the pools that run on other
// machines (docs/cluster.md).
type remoteFlags struct {
	advertise, checkpoints, agent, kubeImage, kubeNamespace, kubeconfig string
}

func (r *remoteFlags) register(f *pflag.FlagSet) {
	f.StringVar(&r.advertise, "advertise", os.Getenv("VIRGA_ADVERTISE"), "the server's URL as trials on other machines reach it, e.g. http://head:7070 (env VIRGA_ADVERTISE; default the listen address)")
	f.StringVar(&r.checkpoints, "checkpoints", os.Getenv("VIRGA_CHECKPOINTS"), "checkpoint storage: a directory or file:///..., s3://bucket?region=..., gs://bucket, azblob://container (the last three in a build with -tags cloud; env VIRGA_CHECKPOINTS; default DATA-DIR/checkpoints)")
	f.StringVar(&r.agent, "agent", os.Getenv("VIRGA_AGENT"), "the virga executable as Slurm nodes see it (env VIRGA_AGENT; default this one)")
	f.StringVar(&r.kubeImage, "kube-image", os.Getenv("VIRGA_KUBE_IMAGE"), "container image of trial pods, with virga and the trainer (env VIRGA_KUBE_IMAGE)")
	f.StringVar(&r.kubeNamespace, "kube-namespace", envOr("VIRGA_KUBE_NAMESPACE", ""), "namespace of trial pods (env VIRGA_KUBE_NAMESPACE; default the server's own, or default)")
	f.StringVar(&r.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file (env KUBECONFIG; default the in-cluster service account)")
}

// machineMemoryMB reads this machine's MemTotal from /proc/meminfo, in MiB.
func machineMemoryMB() (int64, error) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("this machine's memory is unknown: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest) // "16318412 kB"
			if len(f) == 2 && f[1] == "kB" {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil && kb > 0 {
					return kb / 1024, nil
				}
			}
			return 0, fmt.Errorf("this machine's memory is unknown: /proc/meminfo: unexpected line %q", line)
		}
	}
	return 0, errors.New("this machine's memory is unknown: /proc/meminfo has no MemTotal")
}
