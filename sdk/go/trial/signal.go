package trial

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// Signal handling is process-wide, so its state is too: every Trial shares it.
var (
	signalOnce sync.Once
	stopping   = make(chan struct{})
)

// stopSignals are the signals that ask a trial to stop: SIGTERM from Virga
// (pause, stop, preemption) and SIGINT from a terminal during a hand run.
var stopSignals = []os.Signal{syscall.SIGTERM, syscall.SIGINT}

// Stopping returns a channel that is closed when the process receives SIGTERM
// (or SIGINT), so the trainer can checkpoint and exit; use StoppedExitCode
// as the exit code. The handler is installed by the first call, not before:
// a trainer that never watches the channel keeps the default behaviour of
// dying on SIGTERM rather than ignoring it. After the first signal the
// default behaviour is restored, so a second signal kills the process.
func (t *Trial) Stopping() <-chan struct{} {
	signalOnce.Do(installSignalHandler)
	return stopping
}

// StopRequested reports, without blocking, whether Stopping's channel is closed.
// Like Stopping, it installs the handler on first use.
func (t *Trial) StopRequested() bool {
	select {
	case <-t.Stopping():
		return true
	default:
		return false
	}
}

func installSignalHandler() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, stopSignals...)
	go func() {
		<-sig
		signal.Reset(stopSignals...)
		close(stopping)
	}()
}
