package pglocal

import (
	"context"
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
	if err := c.startServer(); err != nil {
		return err
	}
	return c.waitReady(ctx)
}
