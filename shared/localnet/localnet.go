// Package localnet holds what the throwaway local servers (pglocal,
// s3local, the Lambda emulator) share: a free loopback port, random
// secrets, and finding a go-installed server binary.
package localnet

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// RandomHex returns n random bytes as hex.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// GoTool finds a go-installed tool: $envVar, then PATH, then $GOPATH/bin
// (where `go install` puts it, often not on PATH). hint says how to get it.
func GoTool(envVar, name, hint string) (string, error) {
	if b := os.Getenv(envVar); b != "" {
		return b, nil
	}
	if b, err := exec.LookPath(name); err == nil {
		return b, nil
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
			gopath = strings.TrimSpace(string(out))
		}
	}
	for _, dir := range filepath.SplitList(gopath) {
		b := filepath.Join(dir, "bin", name)
		if _, err := os.Stat(b); err == nil {
			return b, nil
		}
	}
	return "", fmt.Errorf("%s not found: %s or set %s", name, hint, envVar)
}

// Stop asks a server to end with sig, waits up to grace for it to exit,
// and then kills it. done carries the server's cmd.Wait result; a nil cmd
// or one never started is left alone.
func Stop(cmd *exec.Cmd, done <-chan error, sig os.Signal, grace time.Duration) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
}

// DataDir is a server's data directory: dir, made with perm if missing, or
// when dir is empty a new temporary one (pattern as for os.MkdirTemp), which
// temp reports so that the server's Stop removes it.
func DataDir(dir, pattern string, perm os.FileMode) (path string, temp bool, err error) {
	if dir == "" {
		path, err = os.MkdirTemp("", pattern)
		return path, true, err
	}
	return dir, false, os.MkdirAll(dir, perm)
}
