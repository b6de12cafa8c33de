package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/virga-ml/virga/internal/agent"
)

func newAgentCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "agent",
		Short: "Run one attempt on a compute node (started by the Slurm and Kubernetes backends)",
		Long: `Run one attempt of a trial on a compute node. The Slurm and Kubernetes backends start it
with the attempt in the environment (` + agent.EnvSpec + `); it fetches the checkpoint to resume from the
server, starts the node's trial processes with the trial protocol's variables and PyTorch's
rendezvous variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), and relays the
trial's reports to the server, uploading its checkpoint directory whenever it changed, with the
trial's token. SIGTERM stops the trial: SIGTERM to its processes, SIGKILL after the stop grace.
The exit status is the trial's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := agent.Decode(os.Getenv(agent.EnvSpec))
			if err != nil {
				return usageError{err}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			code, err := agent.Run(ctx, agent.Options{Spec: s, Stdout: g.stdout, Stderr: g.stderr})
			if err != nil {
				fmt.Fprintln(g.stderr, "virga agent:", err)
			}
			if code != 0 {
				return exitError{code: min(code, 255)}
			}
			return nil
		},
	}
}
