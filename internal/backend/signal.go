package backend

import "syscall"

// StatusSignal returns the signal ("killed", "terminated", ...) that an exit
// status 128+N stands for when it is one of the signals that end trials
// (SIGINT, SIGABRT, SIGKILL, SIGSEGV, SIGTERM), and "" otherwise. A remote
// backend learns a trial's end through a process that reports it so (a
// shell, the agent, a container runtime), and reports it as Event.Signal,
// as the local backend does for the trial's own death.
func StatusSignal(status int) string {
	switch status {
	case 128 + int(syscall.SIGINT), 128 + int(syscall.SIGABRT), 128 + int(syscall.SIGKILL),
		128 + int(syscall.SIGSEGV), 128 + int(syscall.SIGTERM):
		return syscall.Signal(status - 128).String()
	}
	return ""
}
