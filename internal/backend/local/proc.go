package local

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"
)

// procStat is what the shim and the backend read of /proc/PID/stat.
type procStat struct {
	pid     int
	state   byte // R, S, D, Z, X, ...
	ppid    int
	pgrp    int
	session int
	start   uint64 // field 22: start time in clock ticks after boot
}

// readProcStat reads /proc/PID/stat.
func readProcStat(pid int) (procStat, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(pid, data)
}

// parseProcStat parses a /proc/PID/stat line. The command name (field 2) is
// in parentheses and may hold anything, so fields are counted from the last
// ')'.
func parseProcStat(pid int, data []byte) (procStat, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command field", pid)
	}
	f := bytes.Fields(data[i+1:]) // f[k] is field k+3
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	p := procStat{pid: pid, state: f[0][0]}
	var err error
	num := func(b []byte) int {
		n, e := strconv.Atoi(string(b))
		if e != nil && err == nil {
			err = e
		}
		return n
	}
	p.ppid, p.pgrp, p.session = num(f[1]), num(f[2]), num(f[3])
	if err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	if p.start, err = strconv.ParseUint(string(f[19]), 10, 64); err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat: start time: %w", pid, err)
	}
	return p, nil
}

// childrenOf returns the pids of pid's children, from the children lists of
// its threads (/proc/PID/task/TID/children). ok is false when the kernel
// keeps no such lists (built without CONFIG_PROC_CHILDREN); a process that
// is gone has none. A list can miss a child forked or reaped while it is
// read, as the kernel documents: callers poll.
func childrenOf(pid int) (kids []int, ok bool) {
	if !procChildren() {
		return nil, false
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tids, err := readDirNames(dir)
	if err != nil {
		return nil, true // gone
	}
	for _, tid := range tids {
		data, err := os.ReadFile(dir + "/" + tid + "/children")
		if err != nil {
			continue // the thread ended meanwhile
		}
		kids = appendPIDs(kids, data)
	}
	return kids, true
}

// shimChildren returns the children of the shim self: those of its main
// thread and of forker, the thread that started the trial. Only these two
// threads can have children. The trial is forker's child; an orphan of the
// trial's is reparented to the first live thread of its subreaper, which is
// the shim's main thread (the thread group's leader comes first, and a Go
// program never ends its main thread while it runs); and a thread that
// ends hands its children to that same thread.
//
// When forker is the main thread (see ShimThread), that is one children
// list, and nothing under another thread's /proc/PID/task/TID is looked up.
// That matters: once anything under a thread's entry other than the main
// thread's has been looked up, reaping the process costs its parent 1–3 ms
// of CPU (in release_task, invalidating /proc entries), and the server
// reaps a shim per trial: before, that was 45% of the server's CPU in the
// control-plane benchmark.
func shimChildren(self, forker int) (kids []int, ok bool) {
	if !procChildren() {
		return nil, false
	}
	dir := "/proc/" + strconv.Itoa(self) + "/task/"
	tids := []int{self}
	if forker > 0 && forker != self {
		tids = append(tids, forker)
	}
	for _, tid := range tids {
		data, err := os.ReadFile(dir + strconv.Itoa(tid) + "/children")
		if err != nil {
			continue
		}
		kids = appendPIDs(kids, data)
	}
	return kids, true
}

// appendPIDs appends the pids of a children list to kids.
func appendPIDs(kids []int, data []byte) []int {
	for _, f := range bytes.Fields(data) {
		if n, err := strconv.Atoi(string(f)); err == nil && n > 0 {
			kids = append(kids, n)
		}
	}
	return kids
}

// procChildren reports whether the kernel lists threads' children.
// It looks at the main thread's list, not at /proc/thread-self's: see
// shimChildren.
var procChildren = sync.OnceValue(func() bool {
	pid := strconv.Itoa(os.Getpid())
	_, err := os.Stat("/proc/" + pid + "/task/" + pid + "/children")
	return err == nil
})

func readDirNames(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}

// eachProc calls f for every process /proc lists now; processes that vanish
// while it reads are skipped.
func eachProc(f func(procStat)) error {
	names, err := readDirNames("/proc")
	if err != nil {
		return err
	}
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 {
			continue
		}
		if p, err := readProcStat(pid); err == nil {
			f(p)
		}
	}
	return nil
}
