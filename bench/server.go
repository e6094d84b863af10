package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is a redis-server process started for one run.
type server struct {
	addr string
	cmd  *exec.Cmd
	dir  string
	done chan struct{}
}

// startServer starts redis-server on a free 127.0.0.1 port without persistence and
// waits until it answers PING. extra is appended to the command line.
func startServer(extra ...string) (*server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("bench: redis-server not on PATH (run `make redis-server`): %w", err)
	}
	dir, err := os.MkdirTemp("", "guardkit-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	var last error
	for range 5 { // another process may take the port between probe and bind
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, done: make(chan struct{})}
		args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir,
			"--logfile", filepath.Join(dir, "redis.log")}, extra...)
		s.cmd = exec.Command(bin, args...)
		s.cmd.SysProcAttr = sysProcAttr()
		if err := s.cmd.Start(); err != nil {
			return nil, fmt.Errorf("bench: start redis-server: %w", err)
		}
		go func() { _ = s.cmd.Wait(); close(s.done) }()
		if last = s.waitReady(5 * time.Second); last == nil {
			return s, nil
		}
		s.stop()
	}
	_ = os.RemoveAll(dir)
	return nil, fmt.Errorf("bench: redis-server did not start: %w", last)
}

func (s *server) waitReady(timeout time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(timeout)
	for {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			return errors.New("redis-server exited; see " + filepath.Join(s.dir, "redis.log"))
		default:
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop ends the server by PID: SIGTERM, then SIGKILL after a second.
func (s *server) stop() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.done:
	case <-time.After(time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// close stops the server and removes its directory.
func (s *server) close() {
	s.stop()
	_ = os.RemoveAll(s.dir)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("bench: find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
