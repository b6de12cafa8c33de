package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Gang runs one node's share of an attempt: ProcessesPerNode copies of the
// trial command, each with PyTorch's rendezvous variables, ended together.
// When one process fails (a non-zero exit or a signal) the others are sent
// SIGTERM and, after Grace, SIGKILL: a gang is all or nothing, so a lost
// member ends the attempt and the trial resumes from its checkpoint.
type Gang struct {
	Argv    []string
	Env     []string // the environment of every process, before the rank variables
	Workdir string
	// NodeRank is this node's place in the gang, Nodes its size.
	NodeRank, Nodes, ProcessesPerNode int
	MasterAddr                        string
	MasterPort                        int
	// Stdout and Stderr receive every process's output (nil: discarded).
	Stdout, Stderr io.Writer
	// Grace is the time between SIGTERM and SIGKILL when the gang is
	// stopped (its context ends) or a member failed.
	Grace time.Duration
	// SharedGroup keeps the processes in the caller's process group, whose
	// signals then reach them directly (the local backend's shim signals
	// and kills the trial's whole group): a stop is not passed on, and only
	// a member's failure makes Run signal the others. Without it, each
	// process leads a group of its own, to which Run passes a stop (a pod's
	// SIGTERM reaches only the agent, its first process).
	SharedGroup bool
}

// RankEnv returns the rendezvous variables of one process, as PyTorch's
// torch.distributed (init_method "env://") and torchrun define them.
func RankEnv(nodeRank, nodes, perNode, localRank int, masterAddr string, masterPort int) []string {
	world := nodes * perNode
	return []string{
		"RANK=" + strconv.Itoa(nodeRank*perNode+localRank),
		"LOCAL_RANK=" + strconv.Itoa(localRank),
		"WORLD_SIZE=" + strconv.Itoa(world),
		"LOCAL_WORLD_SIZE=" + strconv.Itoa(perNode),
		"NODE_RANK=" + strconv.Itoa(nodeRank),
		"GROUP_RANK=" + strconv.Itoa(nodeRank),
		"MASTER_ADDR=" + masterAddr,
		"MASTER_PORT=" + strconv.Itoa(masterPort),
	}
}

// Run starts the processes and waits for all of them. It returns the exit
// status of the gang as a shell would: 0 when every process exited 0, else
// the first failure's exit code (128+N for a process killed by signal N).
// When ctx ends, the processes are sent SIGTERM, then SIGKILL after Grace.
func (g *Gang) Run(ctx context.Context) (int, error) {
	if len(g.Argv) == 0 {
		return 0, errors.New("gang: no command")
	}
	n := max(g.ProcessesPerNode, 1)
	// Pdeathsig fires when the thread that forked a child exits: keep this
	// one for the gang's whole life so that the children die with us.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	type member struct {
		cmd            *exec.Cmd
		code           int
		stdout, stderr *lineWriter
	}
	members := make([]*member, n)
	exited := make(chan int, n)
	var outMu, errMu sync.Mutex // one writer at a time per stream
	for i := range n {
		cmd := exec.Command(g.Argv[0], g.Argv[1:]...)
		cmd.Dir = g.Workdir
		env := append([]string(nil), g.Env...)
		cmd.Env = append(env, RankEnv(g.NodeRank, max(g.Nodes, 1), n, i, g.MasterAddr, g.MasterPort)...)
		stdout, stderr := lockedWriter(&outMu, g.Stdout), lockedWriter(&errMu, g.Stderr)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		// A descendant that keeps the output open does not hold the gang.
		cmd.WaitDelay = 5 * time.Second
		// A process group of its own, so that a signal reaches the process
		// and everything it started, and only through this gang.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: !g.SharedGroup, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			for _, m := range members[:i] {
				_ = g.kill(m.cmd.Process.Pid, syscall.SIGKILL)
				_ = m.cmd.Wait()
			}
			return 127, fmt.Errorf("starting %s: %w", g.Argv[0], err)
		}
		members[i] = &member{cmd: cmd, stdout: stdout, stderr: stderr}
	}
	for i, m := range members {
		go func() {
			err := m.cmd.Wait() // the output is copied by then
			m.stdout.flush()
			m.stderr.flush()
			m.code = exitCode(m.cmd.ProcessState, err)
			exited <- i
		}()
	}

	ended := make([]bool, n) // by this goroutine, as exits arrive
	signalAll := func(sig syscall.Signal) {
		for i, m := range members {
			if !ended[i] {
				_ = g.kill(m.cmd.Process.Pid, sig)
			}
		}
	}
	first, running := 0, n
	var kill <-chan time.Time
	stopping := false
	stop := func(pass bool) {
		if !stopping {
			stopping = true
			if pass {
				signalAll(syscall.SIGTERM)
			}
			kill = time.After(g.Grace)
		}
	}
	done := ctx.Done()
	for running > 0 {
		select {
		case i := <-exited:
			running--
			ended[i] = true
			if !g.SharedGroup {
				// What the process left in its group goes with it (at
				// once, before its group's ID could be reused).
				_ = syscall.Kill(-members[i].cmd.Process.Pid, syscall.SIGKILL)
			}
			if c := members[i].code; c != 0 && first == 0 {
				first = c
				stop(true) // a member failed: the gang ends
			}
		case <-done:
			done = nil
			stop(!g.SharedGroup) // in a shared group the stop reached them already
		case <-kill:
			signalAll(syscall.SIGKILL)
			kill = nil
		}
	}
	return first, nil
}

// kill signals a member: its whole group, or in a shared group the process.
func (g *Gang) kill(pid int, sig syscall.Signal) error {
	if g.SharedGroup {
		return syscall.Kill(pid, sig)
	}
	return syscall.Kill(-pid, sig)
}

// exitCode is a finished process's status as a shell reports it.
func exitCode(ps *os.ProcessState, err error) int {
	if ps == nil {
		if err != nil {
			return 127
		}
		return 0
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// lineWriter passes one process's output on in whole lines, so that the
// lines of a gang's processes never interleave mid-line (a VIRGA_METRIC line
// stays whole). What is left without a newline goes out at Close.
type lineWriter struct {
	mu  *sync.Mutex // shared by the gang's writers to one stream
	w   io.Writer
	buf []byte
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	if i := bytes.LastIndexByte(l.buf, '\n'); i >= 0 {
		l.mu.Lock()
		_, err := l.w.Write(l.buf[:i+1])
		l.mu.Unlock()
		l.buf = append(l.buf[:0], l.buf[i+1:]...)
		if err != nil {
			return len(p), nil // output that cannot be written is dropped, the trial goes on
		}
	}
	if len(l.buf) > 64<<10 { // a very long line goes out in pieces
		l.mu.Lock()
		_, _ = l.w.Write(l.buf)
		l.mu.Unlock()
		l.buf = l.buf[:0]
	}
	return len(p), nil
}

func (l *lineWriter) flush() {
	if len(l.buf) > 0 {
		l.mu.Lock()
		_, _ = l.w.Write(l.buf)
		l.mu.Unlock()
		l.buf = l.buf[:0]
	}
}

func lockedWriter(mu *sync.Mutex, w io.Writer) *lineWriter {
	if w == nil {
		w = io.Discard
	}
	return &lineWriter{mu: mu, w: w}
}

// GangMain runs `virga gang PROCESSES MASTER_PORT GRACE_SECONDS -- COMMAND...`:
// the local backend's launcher of a trial of several processes on this
// machine (resources.nodes x processes_per_node), each with PyTorch's
// rendezvous variables; one failing ends all.
func GangMain(args []string) int {
	if len(args) < 5 || args[3] != "--" {
		fmt.Fprintln(os.Stderr, "usage: virga gang PROCESSES MASTER_PORT GRACE_SECONDS -- COMMAND...")
		return 2
	}
	n, err1 := strconv.Atoi(args[0])
	port, err2 := strconv.Atoi(args[1])
	grace, err3 := strconv.Atoi(args[2])
	if err1 != nil || err2 != nil || err3 != nil || n < 1 || port < 1 || grace < 0 {
		fmt.Fprintln(os.Stderr, "virga gang: PROCESSES, MASTER_PORT and GRACE_SECONDS must be positive integers")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer stop()
	g := &Gang{Argv: args[4:], Env: os.Environ(), Nodes: 1, ProcessesPerNode: n,
		MasterAddr: "127.0.0.1", MasterPort: port, Stdout: os.Stdout, Stderr: os.Stderr,
		Grace: time.Duration(grace) * time.Second, SharedGroup: true}
	code, err := g.Run(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "virga gang:", err)
	}
	return min(code, 255)
}
