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
		for _, f := range bytes.Fields(data) {
			if n, err := strconv.Atoi(string(f)); err == nil && n > 0 {
				kids = append(kids, n)
			}
		}
	}
	return kids, true
}

// procChildren reports whether the kernel lists threads' children.
var procChildren = sync.OnceValue(func() bool {
	_, err := os.Stat("/proc/thread-self/children")
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
