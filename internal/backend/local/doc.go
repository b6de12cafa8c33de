// Package local runs attempts as processes on this machine, each under a
// `virga shim` supervisor (ShimMain; a shim runs one attempt at a time, and is
// reused for the next), and adopts the attempts an earlier server left
// running. It owns the per-attempt bookkeeping files (shim.lock,
// shim.json, exit.json, output.log) and the machine's resource accounting,
// split into named pools when configured; a pool may emulate spot capacity
// (SIGTERM at a reclaim's warning, SIGKILL at the reclaim), as a cloud
// provider would reclaim it.
//
// It starts, signals and watches what it is told to and never decides what
// should run; it never kills a process on Close, and never lets a trial start
// twice or start after its attempt was declared lost.
package local
