// Package s3local starts a throwaway S3-compatible server (versitygw with
// its POSIX backend in a temporary directory) for the local stack and
// tests. It speaks real S3 with SigV4 checked, so the CAS code under test is
// the code that runs against AWS.
package s3local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/forgeci/forgeci/shared/localnet"
)

// Server is a running versitygw.
type Server struct {
	Endpoint  string // http://127.0.0.1:<port>
	AccessKey string
	SecretKey string
	Region    string
	dir       string
	temp      bool
	cmd       *exec.Cmd
	done      chan error
}

// Binary finds versitygw: $FORGECI_VERSITYGW, then PATH, then $GOPATH/bin.
func Binary() (string, error) {
	return localnet.GoTool("FORGECI_VERSITYGW", "versitygw", "run make deps (go install github.com/versity/versitygw/cmd/versitygw@v1.8.0)")
}

// Start runs versitygw on a free loopback port over dir (a new temporary
// directory when empty). Call Stop when done.
func Start(ctx context.Context, dir string, log *os.File) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	s := &Server{Region: "us-east-1", AccessKey: "forgeci" + localnet.RandomHex(6), SecretKey: localnet.RandomHex(20), done: make(chan error, 1)}
	if s.dir, s.temp, err = localnet.DataDir(dir, "forgeci-s3-", 0o700); err != nil {
		return nil, err
	}
	port, err := localnet.FreePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	s.Endpoint = "http://" + addr
	s.cmd = exec.Command(bin, "--port", addr, "--access", s.AccessKey, "--secret", s.SecretKey,
		"--region", s.Region, "--quiet", "posix", s.dir)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if log != nil {
		s.cmd.Stdout, s.cmd.Stderr = log, log
	}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start versitygw: %w", err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-s.done:
			s.done <- err
			return nil, fmt.Errorf("versitygw exited during start: %v", err)
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return s, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.Stop()
			return nil, errors.New("versitygw did not start listening within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop ends the server and removes a temporary directory.
func (s *Server) Stop() {
	localnet.Stop(s.cmd, s.done, syscall.SIGTERM, 10*time.Second)
	if s.temp {
		_ = os.RemoveAll(s.dir)
	}
}

// Env returns the server's settings as FORGECI_TEST_S3_* variables.
func (s *Server) Env() []string {
	return []string{"FORGECI_TEST_S3_ENDPOINT=" + s.Endpoint, "FORGECI_TEST_S3_ACCESS_KEY=" + s.AccessKey,
		"FORGECI_TEST_S3_SECRET_KEY=" + s.SecretKey, "FORGECI_TEST_S3_REGION=" + s.Region}
}
