package pglocal

import (
	"context"
	"errors"
	"syscall"
	"time"
)

// Restart stops the server and starts it again on the same data directory
// and port, and waits until it accepts connections. With crash set, the
// server and its backends are SIGKILLed, so the restart runs crash
// recovery, as after a power cut; otherwise it is a fast shutdown (SIGINT:
// sessions are terminated, transactions rolled back). Every client
// connection is broken either way. For chaos tests; not safe to call
// concurrently with Stop or Kill.
func (c *Cluster) Restart(ctx context.Context, crash bool) error {
	if c.cmd != nil && c.cmd.Process != nil {
		if crash {
			_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			<-c.done
		} else {
			_ = c.cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-c.done:
			case <-time.After(30 * time.Second):
				_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
				<-c.done
			}
		}
	}
	// The backends of a crashed server may still be exiting, attached to
	// its shared memory, for a moment after the postmaster is gone: a
	// server started then refuses ("pre-existing shared memory block is
	// still in use") and exits. So a start that exits is tried again.
	var err error
	for attempt := range 5 {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
		}
		if err = c.startServer(); err != nil {
			return err
		}
		if err = c.waitReady(ctx); err == nil || !errors.Is(err, errExitedDuringStart) {
			return err
		}
	}
	return err
}
