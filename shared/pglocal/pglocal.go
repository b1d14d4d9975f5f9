// Package pglocal starts a throwaway PostgreSQL cluster from the Debian
// binaries, for the local stack, tests and benchmarks. PostgreSQL refuses to
// run as root, so when we are root the cluster runs as the "postgres" user
// (or "nobody") in a directory that user owns.
package pglocal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forgeci/forgeci/shared/localnet"
)

// Options shape the cluster.
type Options struct {
	// Dir holds the data directory; a new temporary directory when empty.
	Dir string
	// Fast trades durability for speed (fsync off): for tests only.
	Fast bool
	// Settings are extra postgres -c settings.
	Settings map[string]string
	// Log receives the server's output; discarded when nil.
	Log *os.File
	// Env is extra environment for the server process (not initdb), such
	// as LD_PRELOAD and FAKETIME for a server whose clock is off.
	Env []string
}

// Cluster is a running PostgreSQL server.
type Cluster struct {
	// URL connects as the superuser to database "postgres".
	URL  string
	Port int
	dir  string
	temp bool
	cmd  *exec.Cmd
	done chan error
	// what Restart needs to start the same server again
	bin  string
	args []string
	cred *syscall.Credential
	opts Options
}

// BinDir finds the PostgreSQL server binaries.
func BinDir() (string, error) {
	if d := os.Getenv("FORGECI_PG_BIN"); d != "" {
		return d, nil
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("PostgreSQL server binaries not found: install Debian's postgresql package (make deps does) or set FORGECI_PG_BIN")
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// Start initialises and starts a cluster. Call Stop when done.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	c := &Cluster{done: make(chan error, 1)}
	if c.dir, c.temp, err = localnet.DataDir(opts.Dir, "forgeci-pg-", 0o755); err != nil {
		return nil, err
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	data := filepath.Join(c.dir, "data")
	password := localnet.RandomHex(16)
	pwfile := filepath.Join(c.dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(password+"\n"), 0o600); err != nil {
		return nil, err
	}
	if cred != nil {
		for _, p := range []string{c.dir, pwfile} {
			if err := os.Chown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, fmt.Errorf("chown %s for the postgres user: %w", p, err)
			}
		}
	}
	_ = os.RemoveAll(data)
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "forgeci",
		"--pwfile", pwfile, "--auth", "scram-sha-256", "-E", "UTF8", "--locale", "C.UTF-8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	_ = os.Remove(pwfile)

	port, err := localnet.FreePort()
	if err != nil {
		return nil, err
	}
	c.Port = port
	args := []string{"-D", data, "-p", strconv.Itoa(port), "-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=", "-c", "max_connections=300", "-c", "shared_buffers=256MB",
		"-c", "log_min_messages=warning", "-c", "log_min_error_statement=panic"}
	if opts.Fast {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	for k, v := range opts.Settings {
		args = append(args, "-c", k+"="+v)
	}
	c.bin, c.args, c.cred, c.opts = bin, args, cred, opts
	if err := c.startServer(); err != nil {
		return nil, err
	}
	c.URL = fmt.Sprintf("postgres://forgeci:%s@127.0.0.1:%d/postgres?sslmode=disable", password, port)
	if err := c.waitReady(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// startServer starts the postmaster on the data directory.
func (c *Cluster) startServer() error {
	c.cmd = exec.Command(filepath.Join(c.bin, "postgres"), c.args...)
	// Pdeathsig: if we die, so does the server, so no cluster outlives its test.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	if len(c.opts.Env) > 0 {
		c.cmd.Env = append(os.Environ(), c.opts.Env...)
	}
	if c.opts.Log != nil {
		c.cmd.Stdout, c.cmd.Stderr = c.opts.Log, c.opts.Log
	}
	if err := c.cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	done := make(chan error, 1)
	c.done = done
	cmd := c.cmd
	go func() { done <- cmd.Wait() }()
	return nil
}

// errExitedDuringStart: the server exited before it accepted a connection.
var errExitedDuringStart = errors.New("postgres exited during start")

func (c *Cluster) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-c.done:
			c.done <- err
			return fmt.Errorf("%w: %v", errExitedDuringStart, err)
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, c.URL)
		cancel()
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres not ready after 60s: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// DatabaseURL returns the URL of another database on the same server.
func (c *Cluster) DatabaseURL(db string) string {
	return strings.Replace(c.URL, "/postgres?", "/"+db+"?", 1)
}

// Stop shuts the server down (fast shutdown) and removes a temporary directory.
func (c *Cluster) Stop() {
	localnet.Stop(c.cmd, c.done, syscall.SIGINT, 30*time.Second)
	if c.temp {
		_ = os.RemoveAll(c.dir)
	}
}

// Kill stops the server abruptly (SIGKILL of the postmaster), as a crash would.
func (c *Cluster) Kill() {
	if c.cmd != nil && c.cmd.Process != nil {
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
		c.done <- nil
	}
}

// serverCredential returns the user to run PostgreSQL as: nil (ourselves)
// unless we are root, which PostgreSQL refuses.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("running as root and neither user postgres nor nobody exists to run PostgreSQL as")
}
