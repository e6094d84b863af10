package redistest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// portAttempts bounds how often Start picks a new port when another
	// process took the free port between our probe and redis-server's bind.
	portAttempts = 5
	// readyTimeout bounds the wait for a fresh redis-server to answer PING.
	readyTimeout = 5 * time.Second
	// rebindTimeout bounds how long Restart retries its old port.
	rebindTimeout = 3 * time.Second
	// signalTimeout bounds the wait for SIGSTOP or SIGKILL to take effect.
	signalTimeout = 5 * time.Second
	// logTailBytes is how much of the logs a failure message quotes.
	logTailBytes = 2048
)

// errPortInUse reports that redis-server could not bind its port.
var errPortInUse = errors.New("redistest: port already in use")

// Option configures a server started by [Start] or [StartN].
type Option func(*config)

type config struct {
	args []string
	tls  bool
}

// ownedArgs are the redis-server arguments the harness sets itself; letting
// a test change them could expose a server beyond loopback or lose track of
// its files and process.
var ownedArgs = []string{"--bind", "--port", "--dir", "--logfile", "--daemonize", "--unixsocket", "--tls-port", "--pidfile"}

// Args appends extra redis-server command-line arguments, for example
// Args("--maxmemory", "2mb"). They come after the harness's own arguments, so
// they can override settings such as --save. The arguments that decide where
// the server listens and writes (--bind, --port, --tls-port, --unixsocket,
// --dir, --logfile, --pidfile, --daemonize) belong to the harness: Start
// fails the test when Args names one. Default: none.
func Args(extra ...string) Option {
	return func(c *config) { c.args = append(c.args, extra...) }
}

// TLS makes the server also listen for TLS on a second loopback port ([Server.TLSAddr]),
// with the given certificate, key and CA files (PEM); clients connecting there must
// present a certificate the CA signed. The plain port stays open, for the harness's own
// readiness check and for tests that write with a plain client. Default: no TLS port.
func TLS(cert, key, ca string) Option {
	return func(c *config) {
		c.tls = true
		c.args = append(c.args, "--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", ca, "--tls-auth-clients", "yes")
	}
}

// Server is one redis-server process on a fixed loopback address. The address
// survives [Server.Restart]; the process and its dataset do not.
type Server struct {
	bin    string
	base   string   // parent of each run's directory
	ownDir bool     // base was made by NewServer: Stop removes it
	lead   []string // arguments before the harness's own: a sentinel's config file
	extra  []string
	port   int
	// bus asks for a second port, the cluster bus (--cluster-port), picked
	// once like port and kept across restarts.
	bus     bool
	busPort int
	// tls asks for a TLS port (--tls-port), picked once like port.
	tls     bool
	tlsPort int

	mu     sync.Mutex
	runs   int
	proc   *process // nil while not running
	paused bool
}

// process is one started redis-server and the channel closed once it has
// been reaped.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// Start starts a redis-server on a free 127.0.0.1 port, without persistence
// (--save "" --appendonly no) and with its directory and log file under
// tb.TempDir(), waits until it answers PING, and registers tb.Cleanup to stop
// it. It fails the test when redis-server is not on PATH or does not become
// ready; it never skips.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	return inTestDir(tb, func(dir string) (*Server, error) { return startServer(dir, false, opts) })
}

// NewServer starts a redis-server as [Start] does, for code that has no
// testing.TB: a TestMain, an Example function, a program. Its files go to a
// new temporary directory. The caller must call [Server.Stop], which also
// removes that directory.
func NewServer(opts ...Option) (*Server, error) {
	return inOwnDir("redistest-", func(dir string) (*Server, error) { return startServer(dir, true, opts) })
}

// startServer starts a server with its files under base, which Stop
// removes when own is set.
func startServer(base string, own bool, opts []Option) (*Server, error) {
	s, err := newServer(base, opts)
	if err != nil {
		return nil, err
	}
	s.ownDir = own
	if err := s.start(); err != nil {
		return nil, err
	}
	return s, nil
}

// newServer returns a server that is not running yet, with its files under
// base. It checks the options but starts nothing.
func newServer(base string, opts []Option) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redistest: redis-server is not on PATH (%w); run `make test`, which installs it, or `apt-get install redis-server`", err)
	}
	var cfg config
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	if err := checkArgs("Args", cfg.args, ownedArgs); err != nil {
		return nil, err
	}
	return &Server{bin: bin, base: base, extra: cfg.args, tls: cfg.tls}, nil
}

// checkArgs fails when args names one of the arguments in owned; option is
// the name of the option that passed args, for the message.
func checkArgs(option string, args, owned []string) error {
	for _, a := range args {
		for _, o := range owned {
			if strings.EqualFold(a, o) {
				return fmt.Errorf("redistest: %s(%q): the harness sets %s itself (servers stay on 127.0.0.1 in the test's directory)", option, a, o)
			}
		}
	}
	return nil
}

// start picks free ports and launches the server, picking again when
// another process took a port between our probe and redis-server's bind.
func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return fmt.Errorf("redistest: find a free port: %w", err)
		}
		s.port = port
		for s.bus && (s.busPort == 0 || s.busPort == s.port) {
			if s.busPort, err = freePort(); err != nil {
				return fmt.Errorf("redistest: find a free port: %w", err)
			}
		}
		for s.tls && (s.tlsPort == 0 || s.tlsPort == s.port || s.tlsPort == s.busPort) {
			if s.tlsPort, err = freePort(); err != nil {
				return fmt.Errorf("redistest: find a free port: %w", err)
			}
		}
		err = s.launch()
		if err == nil {
			return nil
		}
		if !errors.Is(err, errPortInUse) || attempt == portAttempts {
			return fmt.Errorf("redistest: start redis-server: %w", err)
		}
		if s.bus {
			s.busPort = 0
		}
		if s.tls {
			s.tlsPort = 0
		}
	}
}

// StartN starts n independent servers with the same options, as [Start] does.
func StartN(tb testing.TB, n int, opts ...Option) []*Server {
	tb.Helper()
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = Start(tb, opts...)
	}
	return servers
}

// Addr returns the server's address, "127.0.0.1:port". It does not change
// across restarts.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// TLSAddr returns the address of the server's TLS port, "127.0.0.1:port", for a server
// started with [TLS]; "" otherwise.
func (s *Server) TLSAddr() string {
	if s.tlsPort == 0 {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.tlsPort))
}

// String returns the server's address, so that logs and failure messages
// name servers by where they listen.
func (s *Server) String() string {
	return s.Addr()
}

// PID returns the process ID of the running redis-server, or 0 when it is
// not running. It changes after [Server.Restart].
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Client returns a new go-redis client for the server, closed at tb's cleanup.
// Each opts function is applied to the options after Addr is set, so it may
// change any field, including Addr (to go through a [Proxy]).
func (s *Server) Client(tb testing.TB, opts ...func(*redis.Options)) *redis.Client {
	tb.Helper()
	o := &redis.Options{Addr: s.Addr()}
	for _, opt := range opts {
		if opt != nil {
			opt(o)
		}
	}
	c := redis.NewClient(o)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Pause stops the server with SIGSTOP and returns once the process is
// stopped. Connections stay open and the kernel still accepts new ones, but
// nothing is answered until [Server.Resume].
func (s *Server) Pause(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.running(tb, "Pause")
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		tb.Fatalf("redistest: pause redis-server pid %d: %v", p.cmd.Process.Pid, err)
	}
	if err := waitStopped(p.cmd.Process.Pid, signalTimeout); err != nil {
		tb.Fatalf("redistest: pause redis-server pid %d: %v", p.cmd.Process.Pid, err)
	}
	s.paused = true
}

// Resume continues a server stopped by [Server.Pause] with SIGCONT.
func (s *Server) Resume(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running(tb, "Resume")
	if err := s.resume(); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
}

// resume sends SIGCONT to the current process, if any. s.mu must be held.
func (s *Server) resume() error {
	if s.proc == nil {
		return nil
	}
	if err := s.proc.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("resume redis-server pid %d: %w", s.proc.cmd.Process.Pid, err)
	}
	s.paused = false
	return nil
}

// Kill ends the server with SIGKILL, paused or not, and waits until the
// process has been reaped. Killing a server that is not running does nothing.
func (s *Server) Kill(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.kill(); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
}

// Restart kills the server if it is running and starts a new redis-server on
// the same address with an empty dataset and the same arguments. It retries
// the bind for a few seconds in case the port is not yet free.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.restart(); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
}

// restart is Restart without a testing.TB. s.mu must be held.
func (s *Server) restart() error {
	if err := s.kill(); err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	deadline := time.Now().Add(rebindTimeout)
	for {
		err := s.launch()
		if err == nil {
			return nil
		}
		if !errors.Is(err, errPortInUse) || time.Now().After(deadline) {
			return fmt.Errorf("restart redis-server on %s: %w", s.Addr(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop ends the server with SIGKILL, which also ends a paused server, and
// waits until the process has been reaped. It is idempotent, needs no
// testing.TB so it can run as cleanup (Start registers it), and leaves the
// server restartable with [Server.Restart]. A server made by [NewServer]
// also loses its directory, which a restart creates anew. A graceful SIGTERM
// would buy nothing, as there is no persistence, and would cost up to 100 ms
// waiting for Redis's next cron tick.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.kill()
	if s.ownDir {
		_ = os.RemoveAll(s.base)
	}
}

// state reports whether the server is running and whether it is paused.
func (s *Server) state() (running, paused bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil, s.paused
}

// live reports whether the server is running and not paused, that is,
// whether it can answer.
func (s *Server) live() bool {
	running, paused := s.state()
	return running && !paused
}

// logs returns the end of the current run's logs, for failure messages.
func (s *Server) logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return logTail(filepath.Join(s.base, "run"+strconv.Itoa(s.runs)))
}

// running returns the current process or fails the test naming op.
// s.mu must be held.
func (s *Server) running(tb testing.TB, op string) *process {
	tb.Helper()
	if s.proc == nil {
		tb.Fatalf("redistest: %s: redis-server on %s is not running", op, s.Addr())
	}
	return s.proc
}

// kill sends SIGKILL to the current process, if any, and waits for it to be
// reaped. s.mu must be held.
func (s *Server) kill() error {
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	s.paused = false
	// ErrProcessDone means it already exited on its own; it is reaped below.
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill redis-server pid %d: %w", p.cmd.Process.Pid, err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(signalTimeout):
		return fmt.Errorf("redis-server pid %d did not exit %v after SIGKILL", p.cmd.Process.Pid, signalTimeout)
	}
}

// launch starts a redis-server on s.port in a fresh directory and waits until
// it answers PING. On failure the process is gone and the error quotes the
// end of its logs; it wraps errPortInUse when the port was taken.
// s.mu must be held.
func (s *Server) launch() error {
	s.runs++
	// A fresh directory per run guarantees an empty dataset even when Args
	// turned persistence on. The base is created again after Stop removed
	// the directory of a server made by NewServer.
	dir := filepath.Join(s.base, "run"+strconv.Itoa(s.runs))
	if err := os.MkdirAll(s.base, 0o700); err != nil {
		return fmt.Errorf("create directory: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("create directory: %w", err)
	}
	logFile := filepath.Join(dir, "redis.log")
	// Output before the log file is open (bad arguments) goes to stdio.
	stdio, err := os.Create(filepath.Join(dir, "stdio.log"))
	if err != nil {
		return fmt.Errorf("create stdio log: %w", err)
	}
	args := append(slices.Clone(s.lead),
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--dir", dir,
		"--logfile", logFile,
	)
	if s.busPort != 0 {
		args = append(args, "--cluster-port", strconv.Itoa(s.busPort))
	}
	if s.tlsPort != 0 {
		args = append(args, "--tls-port", strconv.Itoa(s.tlsPort))
	}
	args = append(args, s.extra...)
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = dir
	// An *os.File needs no copying goroutine, so Wait never blocks on a
	// forked child that still holds the output open.
	cmd.Stdout, cmd.Stderr = stdio, stdio
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	_ = stdio.Close() // the child has its own descriptor
	if err != nil {
		return fmt.Errorf("run %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()

	if err := waitReady(s.Addr(), cmd.Process.Pid, p.exited, readyTimeout); err != nil {
		_ = cmd.Process.Kill()
		<-p.exited
		tail := logTail(dir)
		if strings.Contains(tail, "Address already in use") {
			err = fmt.Errorf("%w: %w", errPortInUse, err)
		}
		return fmt.Errorf("redis-server %s on %s: %w\n--- end of redis logs ---\n%s", strings.Join(args, " "), s.Addr(), err, tail)
	}
	s.proc = p
	return nil
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		return 0, err
	}
	return port, nil
}

// waitReady polls until the process with the given PID answers PING on
// addr, the process exits or the timeout passes. The PID check matters when
// another test binary's server holds the port: it would answer PING while
// ours fails to bind.
func waitReady(addr string, pid int, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-exited:
			return errors.New("process exited before answering PING")
		default:
		}
		err := ready(addr, pid)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %v: %w", timeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ready reports whether addr answers PING and is served by process pid.
func ready(addr string, pid int) error {
	const timeout = 200 * time.Millisecond
	reply, err := roundTrip(addr, timeout, "PING")
	if err != nil {
		return err
	}
	if reply != "PONG" {
		return fmt.Errorf("PING answered %q", reply)
	}
	info, err := roundTrip(addr, timeout, "INFO", "server")
	if err != nil {
		return err
	}
	if got, ok := infoField(info, "process_id"); !ok || got != strconv.Itoa(pid) {
		return fmt.Errorf("%s is served by process_id %q, not by pid %d", addr, got, pid)
	}
	return nil
}

// logTail returns the end of the run's log file and of its stdio output.
func logTail(dir string) string {
	var b strings.Builder
	for _, name := range []string{"redis.log", "stdio.log"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || len(data) == 0 {
			continue
		}
		if len(data) > logTailBytes {
			data = data[len(data)-logTailBytes:]
		}
		fmt.Fprintf(&b, "[%s]\n%s\n", name, strings.TrimRight(string(data), "\n"))
	}
	if b.Len() == 0 {
		return "(no output)"
	}
	return b.String()
}
