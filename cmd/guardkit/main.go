// Command guardkit shows operators who holds which guardkit lock, who waits for it and
// since when, and ends a stuck hold when it must be ended.
//
// Install it with
//
//	go install github.com/guardkit/guardkit/cmd/guardkit@latest
//
// # Usage
//
//	guardkit [connection flags] inspect [--kind K] KEY
//	guardkit [connection flags] ls [PATTERN]
//	guardkit [connection flags] watch [--interval D] [PATTERN]
//	guardkit [connection flags] unlock --force [--yes] [--kind K] KEY
//	guardkit help [COMMAND]
//
// Every subcommand takes --json, which prints JSON instead of tables (watch: one JSON
// array per refresh, one per line). Flags may come before or after the subcommand and
// its arguments. Run "guardkit help" for the flags; the text it prints is this
// command's documentation.
//
// Exit status: 0 on success, 1 when Redis could not be reached or the action failed, 2
// for a usage error (unlock of a key in use as several kinds, without --kind, included),
// 3 when unlock was declined at its prompt.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
)

func main() {
	redis.SetLogger(quiet{}) // the client's own log lines (dial retries) would garble the tables
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// quiet is a go-redis logger that says nothing: errors reach the operator as results.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// Exit statuses.
const (
	exitOK       = 0
	exitFailed   = 1
	exitUsage    = 2
	exitDeclined = 3
)

const overview = `guardkit shows who holds which guardkit lock, who waits for it and since when,
and ends a stuck hold when it must be ended.

Usage:
  guardkit [flags] inspect [--kind K] KEY       one lock: holders, waiters, fence
  guardkit [flags] ls [PATTERN]                 the locks held or waited for, by key glob
  guardkit [flags] watch [--interval D] [PATTERN]
                                                a live table, the longest waits first
  guardkit [flags] unlock --force [--yes] [--kind K] KEY
                                                end every hold of a lock (operators only)
  guardkit help [COMMAND]                       this text, or a command's

Where the locks are (one of; default --addr 127.0.0.1:6379, or $GUARDKIT_ADDR):
  --addr HOST:PORT                a single server (or a primary)
  --cluster HOST:PORT,...         a Redis Cluster, by some of its nodes
  --sentinel-master NAME --sentinel-addrs HOST:PORT,...
                                  the primary that Sentinel names
  --quorum HOST:PORT,...          the independent servers of a quorum Locker (NewQuorum):
                                  each server's view is shown beside the majority's

Connection:
  --username U, --password P      ACL user and password ($GUARDKIT_PASSWORD)
  --db N                          database number (single server and Sentinel)
  --tls                           connect with TLS (implied by the other --tls flags)
  --tls-ca FILE                   CA certificates (PEM) to verify servers with
  --tls-cert FILE --tls-key FILE  client certificate and key (PEM)
  --tls-server-name NAME          name to verify the servers' certificates against
  --tls-insecure                  do not verify the servers' certificates
  --prefix P                      the Locker's Prefix option (default "guard:")
  --timeout D                     bound on each Redis call (default 5s)

Output:
  --json                          JSON instead of tables, for every command

Each lock is shown as Redis holds it: each holder's owner ID, hold count, fencing
token, time left on its lease, how long ago it was acquired (from the token, the
server's clock), and — when the holder's Locker was made with guard.Label — the process
(label: service@host pid N by default) and the trace ID of the request that took it.
Waiters are the processes queued (one entry per process, by Locker ID), a fair lock's
queued owners, and a waiting writer's mark. Reading takes no lock and changes nothing,
and needs no more than read-only credentials (ACL +@read +evalsha_ro +eval_ro).
`

const inspectHelp = `usage: guardkit [flags] inspect [--kind K] [--json] KEY

Shows the lock named KEY: its holders (owner, kind, holds, token, time left, held for,
Locker, label, trace), its waiters and its fence (the highest token issued that Redis
still records, never below a holder's: every later hold's token exceeds it). Each kind
of a key is a lock of its own in Redis; without --kind, every kind is read and the
kinds in use are shown (free: none is). --kind reads one: exclusive, rw (the read-write
lock; read and write name it too), semaphore, fair. With --json and a key in use as
several kinds, --kind is required. With --quorum, each server's view follows the
majority's. Keys of any length are read.
`

const lsHelp = `usage: guardkit [flags] ls [--json] [PATTERN]

Lists the locks, of every kind, whose keys match PATTERN (a glob as in Redis's SCAN
MATCH: * ? [...]; default *) and that are held or waited for: one line per lock with
its kind, holders, waiters, the longest held-for and the first holder's label. It scans
every primary of a Cluster (every server of a quorum) with SCAN COUNT 1000 per call, so
that listing never blocks Redis; locks taken or freed during the listing may be missed.
The last line says how many locks were found, in how many calls and how long it took.
`

const watchHelp = `usage: guardkit [flags] watch [--interval D] [--json] [PATTERN]

A live table of the locks matching PATTERN that are held or waited for, refreshed every
--interval (default 1s), like top: locks with waiters first, the longest wait first.
A wait is counted from when watch first saw the waiter (at least that long), a hold
from when it was acquired. Quit with q, or Ctrl-C (q then Enter when standard input is
not a terminal). With --json, one JSON array per refresh, one per line, and no screen
control.
`

const unlockHelp = `usage: guardkit [flags] unlock --force [--yes] [--kind K] [--json] KEY

Ends every hold of the lock named KEY at once, whoever holds it (guard.ForceRelease):
deletes the holds, raises the key's fence above every token issued, wakes the waiters
(a fair lock is granted to the first owner of its queue), and logs it. It shows the
holders and asks before acting, unless --yes.

Dangers: the holders may still be running. Their work loses its exclusion at once;
the next waiter's work may run beside it until they stop. The release is announced:
a holder's Locker renews at once on hearing it, so its lease ends (ErrLeaseLost)
within a round trip or so; one that missed the announcement learns at its next
renewal (a third of its TTL by default). Work that ignores its context goes on. Only writes fenced with the lease's token are protected:
storage that refuses tokens below the highest it has seen refuses the old holder's
writes once the next holder has written (or once given the fence printed here). Prefer
waiting out the holder's TTL, or stopping the holder, when you can.

Without --kind, the kind the key is in use as is read from Redis and that lock is
ended; a key in use as several kinds is refused (status 2) until --kind names one, and
a key in use as none is left alone. --kind: exclusive, rw, semaphore, fair.

--force is required; --yes skips the question (for scripts).
`

// config is what the flags say.
type config struct {
	addr, cluster, sentinelMaster, sentinelAddrs, quorum string
	username, password                                   string
	db                                                   int
	tls, tlsInsecure                                     bool
	tlsCA, tlsCert, tlsKey, tlsServerName                string
	prefix                                               string
	timeout                                              time.Duration
	json                                                 bool
	dials                                                *dialLog

	kind     string
	force    bool
	yes      bool
	interval time.Duration
}

// flags returns the flag set of command name, writing into cfg.
func flags(name string, cfg *config) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.addr, "addr", "", "")
	fs.StringVar(&cfg.cluster, "cluster", "", "")
	fs.StringVar(&cfg.sentinelMaster, "sentinel-master", "", "")
	fs.StringVar(&cfg.sentinelAddrs, "sentinel-addrs", "", "")
	fs.StringVar(&cfg.quorum, "quorum", "", "")
	fs.StringVar(&cfg.username, "username", "", "")
	fs.StringVar(&cfg.password, "password", "", "")
	fs.IntVar(&cfg.db, "db", 0, "")
	fs.BoolVar(&cfg.tls, "tls", false, "")
	fs.BoolVar(&cfg.tlsInsecure, "tls-insecure", false, "")
	fs.StringVar(&cfg.tlsCA, "tls-ca", "", "")
	fs.StringVar(&cfg.tlsCert, "tls-cert", "", "")
	fs.StringVar(&cfg.tlsKey, "tls-key", "", "")
	fs.StringVar(&cfg.tlsServerName, "tls-server-name", "", "")
	fs.StringVar(&cfg.prefix, "prefix", "guard:", "")
	fs.DurationVar(&cfg.timeout, "timeout", 5*time.Second, "")
	fs.BoolVar(&cfg.json, "json", false, "")
	switch name {
	case "inspect":
		fs.StringVar(&cfg.kind, "kind", "", "")
	case "unlock":
		fs.StringVar(&cfg.kind, "kind", "", "")
		fs.BoolVar(&cfg.force, "force", false, "")
		fs.BoolVar(&cfg.yes, "yes", false, "")
	case "watch":
		fs.DurationVar(&cfg.interval, "interval", time.Second, "")
	}
	return fs
}

// parse parses args with fs, flags and arguments in any order.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// usageError is a mistake in the command line.
type usageError struct{ msg, help string }

func (e *usageError) Error() string { return e.msg }

var helps = map[string]string{"inspect": inspectHelp, "ls": lsHelp, "watch": watchHelp, "unlock": unlockHelp}

// run runs the command line args and returns the exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	name, rest := splitCommand(args)
	if name == "" || name == "help" {
		if h := helps[first(rest)]; h != "" && name == "help" {
			fmt.Fprint(stdout, h)
			return exitOK
		}
		fmt.Fprint(stdout, overview)
		if name == "" && !asksHelp(args) {
			return exitUsage
		}
		return exitOK
	}
	help, ok := helps[name]
	if !ok {
		fmt.Fprintf(stderr, "guardkit: unknown command %q\n\n%s", name, overview)
		return exitUsage
	}
	cfg := &config{dials: &dialLog{}}
	pos, err := parse(flags(name, cfg), rest)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, help)
		return exitOK
	}
	if err == nil {
		err = cfg.check(name, pos)
	}
	if err != nil {
		fmt.Fprintf(stderr, "guardkit %s: %v\n\n%s", name, err, help)
		return exitUsage
	}
	l, closeAll, err := cfg.locker()
	if err != nil {
		fmt.Fprintf(stderr, "guardkit: %v\n", err)
		return exitUsage
	}
	defer closeAll()
	c := &cli{cfg: cfg, l: l, stdin: stdin, out: stdout, errOut: stderr}
	switch name {
	case "inspect":
		err = c.inspect(ctx, pos[0])
	case "ls":
		err = c.ls(ctx, patternOf(pos))
	case "watch":
		err = c.watch(ctx, patternOf(pos))
	case "unlock":
		err = c.unlock(ctx, pos[0])
	}
	var declined *declinedError
	var kinds *kindsError
	switch {
	case errors.As(err, &declined):
		fmt.Fprintln(stderr, "guardkit:", err)
		return exitDeclined
	case errors.As(err, &kinds):
		fmt.Fprintln(stderr, "guardkit:", err)
		return exitUsage
	case err != nil:
		fmt.Fprintln(stderr, "guardkit:", cfg.explain(err))
		return exitFailed
	}
	return exitOK
}

// splitCommand returns the subcommand named in args (its first word that is not a flag
// or a flag's value) and the other words, "" when there is none.
func splitCommand(args []string) (string, []string) {
	valued := map[string]bool{}
	flags("watch", &config{}).VisitAll(func(f *flag.Flag) {
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
			valued[f.Name] = true
		}
	})
	valued["kind"] = true
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") {
			if a == "--" {
				return "", args
			}
			return a, append(append([]string(nil), args[:i]...), args[i+1:]...)
		}
		if name := strings.TrimLeft(a, "-"); !strings.Contains(name, "=") && valued[name] {
			i++ // the flag's value
		}
	}
	return "", args
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// asksHelp reports whether args ask for help (-h, --help).
func asksHelp(args []string) bool {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			return true
		}
	}
	return false
}

func patternOf(pos []string) string {
	if len(pos) == 0 {
		return "*"
	}
	return pos[0]
}

// check checks the command line of command name, whose arguments are pos.
func (cfg *config) check(name string, pos []string) error {
	switch name {
	case "inspect", "unlock":
		if len(pos) != 1 || pos[0] == "" {
			return fmt.Errorf("want one KEY, got %d arguments", len(pos))
		}
		if _, err := kindOption(cfg.kind); err != nil {
			return err
		}
	case "ls", "watch":
		if len(pos) > 1 {
			return fmt.Errorf("want at most one PATTERN, got %d arguments", len(pos))
		}
	}
	if name == "unlock" && !cfg.force {
		return errors.New("unlock ends another process's hold: it needs --force")
	}
	if name == "watch" && cfg.interval < 10*time.Millisecond {
		return fmt.Errorf("--interval must be ≥ 10ms, got %s", cfg.interval)
	}
	if cfg.timeout <= 0 {
		return fmt.Errorf("--timeout must be > 0, got %s", cfg.timeout)
	}
	n := 0
	for _, set := range []bool{cfg.addr != "", cfg.cluster != "", cfg.sentinelMaster != "" || cfg.sentinelAddrs != "", cfg.quorum != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		return errors.New("give one of --addr, --cluster, --sentinel-master/--sentinel-addrs, --quorum")
	}
	if (cfg.sentinelMaster == "") != (cfg.sentinelAddrs == "") {
		return errors.New("--sentinel-master and --sentinel-addrs go together")
	}
	if (cfg.tlsCert == "") != (cfg.tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	return nil
}

// kindOption returns the guard option of a --kind value ("": the exclusive lock's).
func kindOption(kind string) ([]guard.Option, error) {
	switch kind {
	case "exclusive", "":
		return nil, nil
	case "rw", "read", "write":
		return []guard.Option{guard.Read()}, nil
	case "semaphore", "sem":
		return []guard.Option{guard.Permits(1)}, nil
	case "fair":
		return []guard.Option{guard.Fair()}, nil
	}
	return nil, fmt.Errorf("--kind must be exclusive, rw, semaphore or fair, got %q", kind)
}

// tlsConfig returns the TLS configuration the flags ask for, nil for none.
func (cfg *config) tlsConfig() (*tls.Config, error) {
	if !cfg.tls && !cfg.tlsInsecure && cfg.tlsCA == "" && cfg.tlsCert == "" && cfg.tlsServerName == "" {
		return nil, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.tlsServerName, InsecureSkipVerify: cfg.tlsInsecure} //nolint:gosec // the operator asked for it
	if cfg.tlsCA != "" {
		pem, err := os.ReadFile(cfg.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		t.RootCAs = x509.NewCertPool()
		if !t.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca: no PEM certificate in %s", cfg.tlsCA)
		}
	}
	if cfg.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.tlsCert, cfg.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		t.Certificates = []tls.Certificate{cert}
	}
	return t, nil
}

// singleAddr returns the address of a single server: --addr, else $GUARDKIT_ADDR, else
// 127.0.0.1:6379.
func (cfg *config) singleAddr() string {
	addr := cfg.addr
	if addr == "" {
		addr = os.Getenv("GUARDKIT_ADDR")
	}
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	return addr
}

// addrs returns the addresses the flags give, as the operator typed them.
func (cfg *config) addrs() string {
	switch {
	case cfg.cluster != "":
		return cfg.cluster
	case cfg.sentinelMaster != "":
		return cfg.sentinelAddrs
	case cfg.quorum != "":
		return cfg.quorum
	}
	return cfg.singleAddr()
}

// dialLog keeps the last failed dial to each address. The client retries a refused dial
// until the call's context ends and then reports the context's error alone ("context
// deadline exceeded", with --timeout 1s); the log lets the error say which address
// failed, and how.
type dialLog struct {
	mu   sync.Mutex
	errs map[string]error
}

// dialer returns the clients' dialer: TCP (TLS with t when not nil), as the client's
// own, recording each dial's outcome.
func (d *dialLog) dialer(t *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	nd := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 5 * time.Minute}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		var err error
		if t != nil {
			c, err = (&tls.Dialer{NetDialer: nd, Config: t}).DialContext(ctx, network, addr)
		} else {
			c, err = nd.DialContext(ctx, network, addr)
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if err != nil {
			if d.errs == nil {
				d.errs = map[string]error{}
			}
			d.errs[addr] = err
		} else {
			delete(d.errs, addr)
		}
		return c, err
	}
}

// failed returns the dial errors kept, by address.
func (d *dialLog) failed() []error {
	d.mu.Lock()
	defer d.mu.Unlock()
	addrs := make([]string, 0, len(d.errs))
	for a := range d.errs {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	out := make([]error, len(addrs))
	for i, a := range addrs {
		out[i] = d.errs[a]
	}
	return out
}

// connError is an error of a Redis call that did not name where Redis was looked for,
// with what the dials there said, or the addresses and the time waited.
type connError struct {
	err    error
	detail string
}

func (e *connError) Error() string { return e.err.Error() + " (" + e.detail + ")" }
func (e *connError) Unwrap() error { return e.err }

// explain returns err, a Redis call's, naming the address when it does not: the failed
// dials' errors (connection refused, no route, a TLS handshake), else, for a call that
// ran out of time, the addresses and the timeout. An error that Redis answered, or that
// names its address already, is returned as it is.
func (cfg *config) explain(err error) error {
	var reply redis.Error
	if err == nil || !errors.Is(err, guard.ErrUnavailable) || errors.As(err, &reply) {
		return err
	}
	msg := err.Error()
	var more []string
	for _, e := range cfg.dials.failed() {
		if !strings.Contains(msg, e.Error()) {
			more = append(more, e.Error())
		}
	}
	if len(more) == 0 && errors.Is(err, context.DeadlineExceeded) && !strings.Contains(msg, cfg.addrs()) {
		more = append(more, fmt.Sprintf("no answer from %s within --timeout %s", cfg.addrs(), cfg.timeout))
	}
	if len(more) == 0 {
		return err
	}
	return &connError{err: err, detail: strings.Join(more, "; ")}
}

// locker connects as the flags say and returns a Locker for reading (and force-releasing)
// locks, and a function that closes it and its clients.
func (cfg *config) locker() (*guard.Locker, func(), error) {
	t, err := cfg.tlsConfig()
	if err != nil {
		return nil, nil, err
	}
	password := cfg.password
	if password == "" {
		password = os.Getenv("GUARDKIT_PASSWORD")
	}
	opts := []guard.Option{guard.Prefix(cfg.prefix)}
	split := func(s string) []string { return strings.Split(s, ",") }
	var clients []redis.UniversalClient
	closeAll := func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}
	var l *guard.Locker
	dial := cfg.dials.dialer(t)
	switch {
	case cfg.cluster != "":
		clients = append(clients, redis.NewClusterClient(&redis.ClusterOptions{Addrs: split(cfg.cluster),
			Username: cfg.username, Password: password, TLSConfig: t, Dialer: dial, ContextTimeoutEnabled: true}))
	case cfg.sentinelMaster != "":
		clients = append(clients, redis.NewFailoverClient(&redis.FailoverOptions{MasterName: cfg.sentinelMaster,
			SentinelAddrs: split(cfg.sentinelAddrs), Username: cfg.username, Password: password, DB: cfg.db,
			TLSConfig: t, Dialer: dial, ContextTimeoutEnabled: true}))
	case cfg.quorum != "":
		for _, addr := range split(cfg.quorum) {
			clients = append(clients, redis.NewClient(&redis.Options{Addr: addr, Username: cfg.username,
				Password: password, DB: cfg.db, TLSConfig: t, Dialer: dial, ContextTimeoutEnabled: true}))
		}
		l, err = guard.NewQuorum(clients, append(opts, guard.RestartDelay(0))...)
	default:
		clients = append(clients, redis.NewClient(&redis.Options{Addr: cfg.singleAddr(), Username: cfg.username,
			Password: password, DB: cfg.db, TLSConfig: t, Dialer: dial, ContextTimeoutEnabled: true}))
	}
	if l == nil && err == nil {
		l, err = guard.New(clients[0], opts...)
	}
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return l, func() { _ = l.Close(); closeAll() }, nil
}

// cli is one run of a subcommand.
type cli struct {
	cfg    *config
	l      *guard.Locker
	stdin  io.Reader
	out    io.Writer
	errOut io.Writer
}

// call returns ctx bounded by --timeout, for one Redis call.
func (c *cli) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.timeout)
}

func (c *cli) inspect(ctx context.Context, key string) error {
	if c.cfg.kind == "" {
		return c.inspectAny(ctx, key)
	}
	opts, _ := kindOption(c.cfg.kind)
	cctx, cancel := c.call(ctx)
	defer cancel()
	st, err := c.l.Inspect(cctx, key, opts...)
	if err != nil {
		return err
	}
	if c.cfg.json {
		return writeJSON(c.out, jsonState(st))
	}
	writeState(c.out, st)
	return nil
}

// inspectAny shows the lock named key of the kinds it is in use as (inspect without
// --kind): each kind of a key is a lock of its own in Redis, and the operator may not
// know which one the application takes.
func (c *cli) inspectAny(ctx context.Context, key string) error {
	all, used, err := c.kinds(ctx, key)
	if err != nil {
		return err
	}
	switch {
	case c.cfg.json && len(used) > 1:
		return &kindsError{key: key, used: used, what: "give --kind to choose which to show"}
	case c.cfg.json && len(used) == 1:
		return writeJSON(c.out, jsonState(used[0]))
	case c.cfg.json:
		return writeJSON(c.out, jsonState(all[0]))
	case len(used) == 0:
		fmt.Fprintf(c.out, "%s: free: no lock of any kind (exclusive, rw, semaphore, fair) is held or waited for, read at %s\n",
			key, all[0].Time.UTC().Format(time.RFC3339Nano))
	case len(used) > 1:
		fmt.Fprintf(c.out, "%s is in use as %d kinds, each a lock of its own (--kind shows one):\n\n", key, len(used))
	}
	for i, st := range used {
		if i > 0 {
			fmt.Fprintln(c.out)
		}
		writeState(c.out, st)
	}
	return nil
}

// kinds reads the lock named key of every kind and returns their states (exclusive,
// read-write, semaphore, fair) and those of the kinds in use: held or waited for.
func (c *cli) kinds(ctx context.Context, key string) (all, used []*guard.LockState, err error) {
	cctx, cancel := c.call(ctx)
	defer cancel()
	all, err = c.l.InspectKinds(cctx, key)
	if err != nil {
		return nil, nil, err
	}
	for _, st := range all {
		if inUse(st) {
			used = append(used, st)
		}
	}
	return all, used, nil
}

// inUse reports whether st shows a lock held or waited for: on a quorum, by the majority
// or by any server.
func inUse(st *guard.LockState) bool {
	if len(st.Holders) > 0 || len(st.Waiters) > 0 || st.WriterWaiting > 0 {
		return true
	}
	for _, v := range st.Servers {
		if v.Err == nil && inUse(v) {
			return true
		}
	}
	return false
}

// kindName returns the --kind value that names the lock of st.
func kindName(st *guard.LockState) string {
	switch st.Kind {
	case guard.KindRead, guard.KindWrite:
		return "rw"
	}
	return st.Kind.String()
}

// kindsError is a key in use as several kinds, where the command needs one (--kind).
type kindsError struct {
	key  string
	used []*guard.LockState
	what string
}

func (e *kindsError) Error() string {
	names := make([]string, len(e.used))
	for i, st := range e.used {
		names[i] = kindName(st)
	}
	return fmt.Sprintf("%s is in use as %d kinds (%s), each a lock of its own: %s (--kind %s)",
		e.key, len(e.used), strings.Join(names, ", "), e.what, strings.Join(names, " or --kind "))
}

// listAll lists every lock matching pattern, page by page, and reports the calls made.
func (c *cli) listAll(ctx context.Context, pattern string) ([]*guard.LockState, int, error) {
	var all []*guard.LockState
	calls := 0
	for cursor := ""; ; {
		cctx, cancel := c.call(ctx)
		page, next, err := c.l.List(cctx, pattern, cursor)
		cancel()
		if err != nil {
			return nil, calls, err
		}
		calls++
		all = append(all, page...)
		if next == "" {
			return all, calls, nil
		}
		cursor = next
	}
}

func (c *cli) ls(ctx context.Context, pattern string) error {
	start := time.Now()
	locks, calls, err := c.listAll(ctx, pattern)
	if err != nil {
		return err
	}
	sortByKey(locks)
	if c.cfg.json {
		out := make([]jsonLock, len(locks))
		for i, st := range locks {
			out[i] = jsonState(st)
		}
		fmt.Fprintf(c.errOut, "%d locks in %d calls, %s\n", len(locks), calls, time.Since(start).Round(time.Millisecond))
		return writeJSON(c.out, out)
	}
	writeList(c.out, locks, nil)
	fmt.Fprintf(c.out, "%d locks in %d calls, %s\n", len(locks), calls, time.Since(start).Round(time.Millisecond))
	return nil
}

// declinedError is an unlock the operator declined at the prompt.
type declinedError struct{ key string }

func (e *declinedError) Error() string { return "unlock of " + e.key + " declined: nothing changed" }

func (c *cli) unlock(ctx context.Context, key string) error {
	opts, _ := kindOption(c.cfg.kind)
	var found *guard.LockState // the lock of the kind the key is in use as, without --kind
	if c.cfg.kind == "" {
		all, used, err := c.kinds(ctx, key)
		switch {
		case err != nil:
			return err
		case len(used) > 1:
			return &kindsError{key: key, used: used, what: "nothing ended; give --kind to choose which to end"}
		case len(used) == 0:
			if c.cfg.json {
				return writeJSON(c.out, jsonState(all[0]))
			}
			fmt.Fprintf(c.out, "%s: no lock of any kind (exclusive, rw, semaphore, fair) is held or waited for: nothing ended\n", key)
			return nil
		}
		found = used[0]
		opts, _ = kindOption(kindName(found))
	}
	if !c.cfg.yes {
		st := found
		if st == nil {
			cctx, cancel := c.call(ctx)
			var err error
			st, err = c.l.Inspect(cctx, key, opts...)
			cancel()
			if err != nil {
				return err
			}
		}
		writeState(c.errOut, st)
		fmt.Fprintf(c.errOut, "\nForce-release %s? Its %d holder(s) may still be running until their leases end (at once where they hear the announcement). [y/N] ", key, len(st.Holders))
		var answer string
		_, _ = fmt.Fscanln(c.stdin, &answer)
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			return &declinedError{key: key}
		}
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	st, err := c.l.ForceRelease(cctx, key, opts...)
	if err != nil {
		return err
	}
	if c.cfg.json {
		return writeJSON(c.out, jsonState(st))
	}
	fmt.Fprintf(c.out, "force-released %s (%s): %d holder(s) ended, %d waiter(s) woken; fence raised to %d\n",
		key, kindName(st), len(st.Holders), len(st.Waiters), st.Fence)
	for _, h := range st.Holders {
		fmt.Fprintf(c.out, "  ended %s (%s, token %d%s)\n", h.Owner, h.Kind, h.Token, labelSuffix(h))
	}
	fmt.Fprintf(c.out, "Give storage the fence %d to refuse the old holders' fenced writes now.\n", st.Fence)
	return nil
}
