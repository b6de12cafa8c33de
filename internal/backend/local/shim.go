package local

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virga-ml/virga"
)

// Exit codes of ShimMain. Whatever the trial's own status, a shim that ran it
// and recorded its end exits ShimExitOK; the trial's status is in exit.json.
const (
	// ShimExitOK means the trial ran (or could not be started) and exit.json was written.
	ShimExitOK = 0
	// ShimExitUsage means the command line was wrong; nothing was started.
	ShimExitUsage = 64
	// ShimExitFailed means the shim could not do its bookkeeping (lock,
	// output.log, exit.json); the trial may have run without a recorded status.
	ShimExitFailed = 70
	// ShimExitLocked means the attempt belongs to someone else (another shim
	// holds shim.lock, or a server declared the attempt over) or already ran;
	// nothing was started.
	ShimExitLocked = 75
)

// DefaultShimDrain is how long, by default, the shim lets the rest of the
// trial's process group end on its own after the trial's own process ended
// (see ShimMain's --drain).
const DefaultShimDrain = 10 * time.Second

// metricPrefix starts a stdout line the shim reports on the trial's behalf.
const metricPrefix = "VIRGA_METRIC "

// shimOptions is ShimMain's parsed command line.
type shimOptions struct {
	dir          string
	workdir      string
	reportURL    string
	pidFD        int
	reportRetry  time.Duration
	flushTimeout time.Duration
	drain        time.Duration // how long the group may run on after the trial's process ended
	stdoutWait   time.Duration // how long stdout is read after the group is gone
	argv         []string
	specStdin    bool
	reuse        bool     // after an attempt, report its end and wait for the next
	pidOut       *os.File // --pid-fd, opened once for all the attempts
	env          []string // the trial's environment; nil: the shim's own
	token        string   // the report token (from the spec on stdin only)
}

// shimSpec is what a warm shim (--spec-stdin) reads from stdin: the attempt
// it is to run, with the trial's whole environment and the report token.
type shimSpec struct {
	Dir       string   `json:"dir"`
	Workdir   string   `json:"workdir,omitempty"`
	ReportURL string   `json:"report_url,omitempty"`
	Token     string   `json:"token,omitempty"`
	Env       []string `json:"env"`
	Argv      []string `json:"argv"`
	// Drain, in nanoseconds, overrides --drain.
	Drain *time.Duration `json:"drain_ns,omitempty"`
}

// ShimMain is the `virga shim` subcommand: it supervises one trial process and
// returns the shim's exit code (see the ShimExit constants). args are the
// arguments after "shim":
//
//	--dir DIR               the attempt's directory (required; must exist)
//	--workdir DIR           the trial's working directory (default: the shim's)
//	--report-url URL        where VIRGA_METRIC lines are POSTed (default: not posted)
//	--pid-fd N              write the trial's pid, a space, the time it started (Unix
//	                        nanoseconds) and a newline to this inherited file
//	                        descriptor, then close it (default -1: none)
//	--report-retry D        how long one report is retried (default 60s)
//	--flush-timeout D       how long pending reports may take after the trial ends (default 10s)
//	--drain D               how long the rest of the trial's process group may run on after
//	                        the trial's own process ended, before it is killed (default 10s)
//	-- ARGV...              the trial's command
//	--spec-stdin            start warm: wait for the attempt as one JSON object on stdin
//	                        ({"dir","workdir","report_url","token","env","argv","drain_ns"},
//	                        the env being the trial's whole environment; drain_ns, if set,
//	                        overrides --drain) instead of --dir, --workdir,
//	                        --report-url and ARGV; EOF before it means "not needed" and
//	                        the shim exits ShimExitOK having done nothing
//	--reuse                 with --spec-stdin: once an attempt ran and exit.json is written
//	                        (and its lock released), write "end" and a newline to --pid-fd
//	                        (kept open) and wait on stdin for the next attempt, until EOF
//
// The report token comes only with the spec on stdin (never on the command
// line, which any user can read); reports of a shim started with --dir carry
// none. The shim never edits the trial's environment: the control loop puts
// the same token there anyway (VIRGA_TOKEN), for the trial's own reports.
//
// The shim takes the attempt's lock (exiting ShimExitLocked if it cannot, or
// if the attempt already ran), starts the trial in a process group of its own
// with stdin from /dev/null, stdout and stderr into output.log, records
// shim.json, relays VIRGA_METRIC lines, and writes exit.json when the trial
// ends. It ignores SIGTERM, SIGINT and SIGHUP: the trial is stopped by
// signalling its process group, never the shim.
//
// The trial's own process (the one the shim started) may be a wrapper (`go
// run`, `sh -c`) whose real work runs in a descendant: when the group gets
// SIGTERM the wrapper may end at once while the descendant still writes its
// checkpoint. So when the trial's process ends the shim waits up to --drain
// for the rest of its group to end on its own, and only then SIGKILLs what
// is left. It is a child subreaper (PR_SET_CHILD_SUBREAPER): the trial's
// orphaned descendants become its children, and it reaps them. exit.json,
// written after the drain, holds the status of the trial's own process.
func ShimMain(args []string) int {
	fs := flag.NewFlagSet("virga shim", flag.ContinueOnError)
	var o shimOptions
	fs.StringVar(&o.dir, "dir", "", "the attempt's directory (required)")
	fs.StringVar(&o.workdir, "workdir", "", "the trial's working directory")
	fs.StringVar(&o.reportURL, "report-url", "", "where VIRGA_METRIC lines are posted")
	fs.IntVar(&o.pidFD, "pid-fd", -1, "file descriptor to write the trial's pid to")
	fs.DurationVar(&o.reportRetry, "report-retry", 60*time.Second, "how long one report is retried")
	fs.DurationVar(&o.flushTimeout, "flush-timeout", 10*time.Second, "how long pending reports may take after the trial ends")
	fs.DurationVar(&o.drain, "drain", DefaultShimDrain, "how long the trial's process group may run on after the trial's process ended")
	fs.BoolVar(&o.specStdin, "spec-stdin", false, "wait for the attempt as JSON on stdin")
	fs.BoolVar(&o.reuse, "reuse", false, "with --spec-stdin: after an attempt, write \"end\" to --pid-fd and wait for the next")
	if err := fs.Parse(args); err != nil {
		return ShimExitUsage
	}
	o.argv = fs.Args()
	if o.reuse && !o.specStdin {
		fmt.Fprintln(os.Stderr, "virga shim: --reuse needs --spec-stdin")
		return ShimExitUsage
	}
	if o.pidFD >= 0 && o.pidFD <= 2 {
		fmt.Fprintf(os.Stderr, "virga shim: --pid-fd %d: must be 3 or more\n", o.pidFD)
		return ShimExitUsage
	}
	if o.pidFD >= 0 {
		syscall.CloseOnExec(o.pidFD) // the trial must not inherit it
		o.pidOut = os.NewFile(uintptr(o.pidFD), "pid-fd")
		defer o.pidOut.Close()
	}
	if !o.specStdin {
		return checkAndRun(&o)
	}
	if o.dir != "" || o.workdir != "" || o.reportURL != "" || len(o.argv) > 0 {
		fmt.Fprintln(os.Stderr, "virga shim: --spec-stdin takes the attempt from stdin, not from --dir, --workdir, --report-url or arguments")
		return ShimExitUsage
	}
	in := os.Stdin
	if o.reuse {
		// adoptStdio points fd 0 at /dev/null: the next attempts come
		// through a copy of it (close-on-exec: no trial inherits it).
		fd, err := unix.FcntlInt(0, unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			fmt.Fprintf(os.Stderr, "virga shim: keeping stdin: %v\n", err)
			return ShimExitFailed
		}
		in = os.NewFile(uintptr(fd), "spec")
		defer in.Close()
	}
	dec := json.NewDecoder(in)
	code := ShimExitOK
	for {
		spec, err := decodeSpec(dec)
		if errors.Is(err, io.EOF) {
			return code // released from the pool (unused, or after its attempts)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "virga shim: %v\n", err)
			return ShimExitUsage
		}
		a := o
		a.dir, a.workdir, a.reportURL, a.token, a.env, a.argv = spec.Dir, spec.Workdir, spec.ReportURL, spec.Token, spec.Env, spec.Argv
		if a.env == nil {
			a.env = []string{}
		}
		if spec.Drain != nil {
			a.drain = *spec.Drain
		}
		if a.dir != "" {
			if err := adoptStdio(a.dir); err != nil {
				fmt.Fprintf(os.Stderr, "virga shim: %v\n", err)
				return ShimExitFailed
			}
		}
		if code = checkAndRun(&a); code != ShimExitOK || !o.reuse {
			return code
		}
		if o.pidOut != nil {
			_, _ = o.pidOut.WriteString(endLine) // the reader may be gone: then stdin ends too
		}
	}
}

// endLine is what a --reuse shim writes to --pid-fd when an attempt is over.
const endLine = "end\n"

// checkAndRun checks the attempt's options and runs it.
func checkAndRun(o *shimOptions) int {
	switch {
	case o.dir == "":
		fmt.Fprintln(os.Stderr, "virga shim: --dir is required")
		return ShimExitUsage
	case len(o.argv) == 0:
		fmt.Fprintln(os.Stderr, "virga shim: no trial command after --")
		return ShimExitUsage
	}
	o.drain = max(o.drain, 0)
	o.stdoutWait = 5 * time.Second
	return runShim(o)
}

// ShimThread keeps the calling goroutine on its thread. Called from an init
// function of a program that is about to run ShimMain, it makes main (and so
// the trial's fork) run on the process's main thread: the shim then reads
// one children list of its own instead of two (see shimChildren), which
// makes the shim cheaper to reap. ShimMain is correct without it.
func ShimThread() { runtime.LockOSThread() }

// shimLog serialises the shim's writes to output.log (the trial's stderr goes
// there directly, with O_APPEND).
type shimLog struct {
	mu sync.Mutex
	f  *os.File
}

func (l *shimLog) write(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.f.Write(b)
}

func (l *shimLog) printf(format string, args ...any) {
	l.write([]byte("virga shim: " + strings.TrimRight(fmt.Sprintf(format, args...), "\n") + "\n"))
}

func runShim(o *shimOptions) int {
	// The trial's Pdeathsig fires when the thread that forked it exits, so
	// this goroutine keeps its thread for the shim's whole life.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	pidOut := o.pidOut

	// 1. A session of our own, so that a terminal's signals never reach us.
	// It fails only if we already lead a process group (e.g. started with
	// Setsid by the backend, when we lead the session already).
	var setsidErr error
	if _, err := unix.Setsid(); err != nil {
		if sid, _ := unix.Getsid(0); sid != os.Getpid() {
			setsidErr = err
		}
	}

	// 2. The attempt's lock, held until we exit (close-on-exec: the trial
	// does not inherit it).
	lock, locked, err := openLock(o.dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "virga shim: %v\n", err)
		return ShimExitFailed
	}
	defer lock.Close()
	if !locked {
		fmt.Fprintf(os.Stderr, "virga shim: %s is held by another shim or server; not starting the trial\n", filepath.Join(o.dir, LockFile))
		return ShimExitLocked
	}
	// Only now, holding the lock: a server that declared the attempt over
	// wrote exit.json while holding it (see Backend.declareOver).
	for _, name := range []string{ExitFile, ShimFile} {
		_, err := os.Stat(filepath.Join(o.dir, name))
		if err == nil {
			fmt.Fprintf(os.Stderr, "virga shim: %s exists: the attempt already ran or was declared lost; not starting the trial\n", filepath.Join(o.dir, name))
			return ShimExitLocked
		}
		if !errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(os.Stderr, "virga shim: cannot tell whether the attempt already ran: %v; not starting the trial\n", err)
			return ShimExitLocked
		}
	}

	logf, err := os.OpenFile(filepath.Join(o.dir, OutputFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "virga shim: opening output log: %v\n", err)
		return ShimExitFailed
	}
	defer logf.Close()
	log := &shimLog{f: logf}
	if setsidErr != nil {
		log.printf("warning: setsid: %v (still in the caller's session)", setsidErr)
	}

	// Caught (not ignored: an ignored disposition would be inherited by the
	// trial) and dropped.
	dropSignals()

	// Orphaned descendants of the trial become our children (so that we can
	// wait for them to end, and reap them) rather than init's.
	subreaper := reaper{subreaper: true, forker: unix.Gettid()} // this thread starts the trial (locked above)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		subreaper.subreaper = false
		log.printf("warning: PR_SET_CHILD_SUBREAPER: %v (the trial's orphans are not waited for)", err)
	}
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	defer signal.Stop(chld)

	// 3. The trial, in a process group of its own.
	env := o.env
	if env == nil {
		env = os.Environ()
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		log.printf("creating stdout pipe: %v", err)
		return ShimExitFailed
	}
	cmd := exec.Command(o.argv[0], o.argv[1:]...)
	cmd.Dir = o.workdir
	cmd.Env = env
	cmd.Stdout = pw
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		pw.Close()
		pr.Close()
		log.printf("cannot start the trial: %v", err)
		code := 127
		rec := exitRecord{ExitCode: &code, Message: "cannot start the trial: " + err.Error(), EndedAt: time.Now()}
		if err := writeJSONAtomic(filepath.Join(o.dir, ExitFile), rec, true); err != nil {
			log.printf("%v", err)
			return ShimExitFailed
		}
		return ShimExitOK
	}
	pw.Close()
	pid := cmd.Process.Pid
	startedAt := time.Now()
	if pidOut != nil {
		// The reader may be gone; shim.json has both too.
		_, _ = fmt.Fprintf(pidOut, "%d %d\n", pid, startedAt.UnixNano())
		if !o.reuse {
			pidOut.Close()
		}
	}
	srec := shimRecord{ShimPID: os.Getpid(), TrialPID: pid, StartedAt: startedAt}
	if st, err := readProcStat(pid); err == nil { // not reaped yet: it exists
		srec.TrialStart, srec.TrialSession = st.start, st.session
	} else {
		log.printf("warning: %v (the trial's processes cannot be killed if this shim dies)", err)
	}
	if err := writeJSONAtomic(filepath.Join(o.dir, ShimFile), srec, false); err != nil {
		log.printf("%v", err)
	}

	// 4. Relay stdout while the trial runs.
	var rel *relay
	if o.reportURL != "" {
		rel = newRelay(o.reportURL, o.token, o.reportRetry, log)
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		copyOutput(pr, log, rel)
	}()

	// 5. Wait for the trial's end without reaping it, so that its pid (and
	// so its process group id) cannot be reused while we wait for, and
	// kill, what it left behind in its group; reap orphans meanwhile.
	reaperDone := make(chan struct{})
	stopReaper := make(chan struct{})
	go func() {
		defer close(reaperDone)
		for {
			select {
			case <-chld:
				scanChildren(pid, subreaper)
			case <-stopReaper:
				return
			}
		}
	}()
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	close(stopReaper)
	<-reaperDone
	// 6. The rest of the group may still be at work (the trial's process
	// was a wrapper); a Stop's SIGKILL still reaches it through the group.
	if !drainGroup(pid, o.drain, filepath.Join(o.dir, StopFile), subreaper) {
		log.printf("the trial's process ended; killing what remains of its process group after %s", o.drain)
	}
	_ = unix.Kill(-pid, unix.SIGKILL) // also when drained: a leader thread gone Z hides live threads
	_ = cmd.Wait()                    // the status is in ProcessState; an *ExitError is expected
	state := cmd.ProcessState
	scanChildren(0, subreaper)

	select {
	case <-copied:
	case <-time.After(o.stdoutWait):
		// Something outside the group still holds the pipe open.
		_ = pr.SetReadDeadline(time.Now())
		<-copied
		log.printf("stopped reading stdout %s after the trial ended: another process holds it open", o.stdoutWait)
	}
	pr.Close()
	if rel != nil {
		rel.close(o.flushTimeout)
	}

	// 7. The record of the end, atomically.
	rec := exitRecord{EndedAt: time.Now()}
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		rec.Signal = ws.Signal().String()
	} else {
		code := state.ExitCode()
		rec.ExitCode = &code
	}
	// No fsync: the file outlives any process crash in the page cache; after
	// an OS crash a missing status only makes the attempt lost, and the trial
	// resumes from its checkpoint.
	if err := writeJSONAtomic(filepath.Join(o.dir, ExitFile), rec, false); err != nil {
		log.printf("%v", err)
		return ShimExitFailed
	}
	return ShimExitOK
}

// reaper is what scanChildren needs to know of the shim.
type reaper struct {
	subreaper bool // PR_SET_CHILD_SUBREAPER took effect
	forker    int  // the thread (tid) that started the trial
}

// scanChildren reaps the shim's exited children other than trial (the
// trial's orphaned descendants, reparented to the shim), and reports whether
// any process but trial is alive in trial's process group. trial 0 means
// none: every exited child is reaped.
//
// A subreaper shim (see runShim) walks only its own subtree, which holds
// every process that can be in trial's group: the group is in the shim's
// session, whose only members are the shim and the trial's descendants, and
// the trial's orphans are reparented to the shim. That costs a read per
// process of the subtree instead of one per process on the machine, at
// every SIGCHLD. Without a subreaper (orphans go to init), or a kernel that
// does not list children (CONFIG_PROC_CHILDREN), it reads all of /proc.
func scanChildren(trial int, r reaper) (groupLive bool) {
	self := os.Getpid()
	if r.subreaper {
		if kids, ok := shimChildren(self, r.forker); ok {
			return scanSubtree(self, trial, kids)
		}
	}
	_ = eachProc(func(p procStat) { groupLive = visitChild(self, trial, p) || groupLive })
	return groupLive
}

// visitChild reaps p if it is the shim's exited child (not trial), and
// reports whether it is a live member of trial's group.
func visitChild(self, trial int, p procStat) (inGroup bool) {
	switch {
	case p.pid == trial:
	case p.ppid == self && p.state == 'Z':
		// Our zombie child: its pid cannot be reused before we reap it.
		var info unix.Siginfo
		_ = unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOHANG, nil)
	case trial > 0 && p.pgrp == trial && p.state != 'Z' && p.state != 'X':
		return true
	}
	return false
}

// scanSubtree is scanChildren over the shim's descendants, kids being its
// children. The trial's own subtree is not walked: while it runs, its
// descendants are its business; once it has ended, they are the shim's.
// Once a live member is found, only the shim's own children remain to be
// visited (to reap them).
func scanSubtree(self, trial int, kids []int) (groupLive bool) {
	for len(kids) > 0 {
		pid := kids[len(kids)-1]
		kids = kids[:len(kids)-1]
		if pid == trial {
			continue
		}
		p, err := readProcStat(pid)
		if err != nil {
			continue // gone meanwhile
		}
		groupLive = visitChild(self, trial, p) || groupLive
		if groupLive || p.state == 'Z' || p.state == 'X' {
			continue
		}
		if more, ok := childrenOf(pid); ok {
			kids = append(kids, more...)
		}
	}
	return groupLive
}

// drainGroup waits up to d for trial's process group to hold no live
// process but trial (ended, not yet reaped), reaping orphans meanwhile; false
// means some still ran at the deadline. While the backend is stopping the
// trial (it wrote stopFile with the time of its SIGKILL), the rest of the
// group gets until then instead: a trainer under a wrapper keeps its whole
// stop grace to checkpoint.
func drainGroup(trial int, d time.Duration, stopFile string, subreaper reaper) bool {
	deadline := time.Now().Add(d)
	wait := 2 * time.Millisecond
	for {
		if !scanChildren(trial, subreaper) {
			return true
		}
		if killAt, ok := readStopFile(stopFile); ok && killAt.After(deadline) {
			deadline = killAt.Add(time.Second)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		time.Sleep(min(wait, left))
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// readStopFile reads the kill time the backend wrote when it began to stop
// the attempt.
func readStopFile(path string) (time.Time, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, false
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

// dropSignals catches SIGTERM, SIGINT and SIGHUP for the shim's whole life
// and drops them.
var dropSignals = sync.OnceFunc(func() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		for range sigs {
		}
	}()
})

// decodeSpec reads a warm shim's next attempt: io.EOF if its input ends
// first.
func decodeSpec(dec *json.Decoder) (*shimSpec, error) {
	var spec shimSpec
	if err := dec.Decode(&spec); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("reading the attempt from stdin: %w", err)
	}
	return &spec, nil
}

// adoptStdio points a warm shim's stdin at /dev/null and its stdout and
// stderr (until now /dev/null) at the attempt's output.log, as a cold
// shim's are.
func adoptStdio(dir string) error {
	null, err := os.Open(os.DevNull)
	if err != nil {
		return fmt.Errorf("opening %s: %w", os.DevNull, err)
	}
	defer null.Close()
	logf, err := os.OpenFile(filepath.Join(dir, OutputFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening output log: %w", err)
	}
	defer logf.Close()
	for fd, f := range []*os.File{null, logf, logf} {
		if err := unix.Dup3(int(f.Fd()), fd, 0); err != nil {
			return fmt.Errorf("redirecting fd %d: %w", fd, err)
		}
	}
	return nil
}

// copyOutput copies the trial's stdout to the log line by line, handing
// VIRGA_METRIC lines to rel (nil: not relayed). Lines longer than
// virga.MaxMetricLine are copied in pieces and never relayed; after a
// VIRGA_METRIC line that long the log says it was not reported.
func copyOutput(r io.Reader, log *shimLog, rel *relay) {
	br := bufio.NewReaderSize(r, virga.MaxMetricLine+1) // the line and its newline
	midline := false
	long := 0 // the bytes so far of a VIRGA_METRIC line too long to report
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			ended := err != nil && err != bufio.ErrBufferFull
			complete := line[len(line)-1] == '\n' || ended
			metric := !midline && bytes.HasPrefix(line, []byte(metricPrefix))
			switch {
			case metric && complete:
				handleMetric(bytes.TrimSpace(line[len(metricPrefix):]), log, rel)
			case metric:
				long = len(line)
			case midline && long > 0:
				long += len(line)
			}
			if line[len(line)-1] == '\n' && long > 0 {
				long-- // the newline is not part of the line
			}
			if line[len(line)-1] != '\n' && ended {
				line = append(line[:len(line):len(line)], '\n')
			}
			log.write(line)
			midline = line[len(line)-1] != '\n'
			if !midline && long > 0 {
				log.printf("a VIRGA_METRIC line of %d bytes was not reported: such a line may be at most %d bytes (report fewer or shorter metrics)", long, virga.MaxMetricLine)
				long = 0
			}
		}
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}
