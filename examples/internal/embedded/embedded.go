package embedded

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
)

// EnvAddr is the environment variable that names a real Redis server, as host:port.
const EnvAddr = "REDIS_ADDR"

// Banner is the first log line of a program running on the embedded server.
const Banner = "using an embedded Redis (miniredis); set " + EnvAddr + " to use a real server"

// Redis is the Redis server an example uses and a client for it.
type Redis struct {
	// Client talks to the server. Close closes it.
	Client *redis.Client
	// Addr is the server's address: the real server's, or the embedded server's
	// loopback address, which other processes on this machine can use too.
	Addr string
	// Embedded reports whether the server runs inside this process.
	Embedded bool

	mini *miniredis.Miniredis
}

// Open returns a client for the Redis at addr or, when addr is empty, at $REDIS_ADDR;
// when both are empty it starts an embedded server on a free loopback port. Its first
// action is to log, with logger, which server it uses. A real server must answer PING
// within five seconds.
func Open(addr string, logger *log.Logger) (*Redis, error) {
	if addr == "" {
		addr = os.Getenv(EnvAddr)
	}
	if addr == "" {
		logger.Print(Banner)
		return startEmbedded()
	}
	logger.Printf("using the Redis server at %s", addr)
	r := &Redis{Client: newClient(addr), Addr: addr}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Client.Ping(ctx).Err(); err != nil {
		_ = r.Client.Close()
		return nil, fmt.Errorf("embedded: Redis at %s does not answer: %w", addr, err)
	}
	return r, nil
}

func startEmbedded() (*Redis, error) {
	m := miniredis.NewMiniRedis()
	// miniredis ages keys only when told to; locks must expire on their own.
	m.ClockTTL(true)
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("embedded: starting miniredis: %w", err)
	}
	return &Redis{Client: newClient(m.Addr()), Addr: m.Addr(), Embedded: true, mini: m}, nil
}

// newClient makes a client whose calls end when their context does, as guard advises.
func newClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
}

// NewClient returns another client for the same server, as another process would
// have. The caller closes it.
func (r *Redis) NewClient() *redis.Client { return newClient(r.Addr) }

// Close closes the client and stops the embedded server, if there is one.
func (r *Redis) Close() error {
	err := r.Client.Close()
	if r.mini != nil {
		r.mini.Close()
	}
	if errors.Is(err, redis.ErrClosed) {
		err = nil
	}
	return err
}

// Lockers returns n Lockers, each on a client of its own, as n processes would have, and
// a function that closes them and their clients.
func (r *Redis) Lockers(n int, opts ...guard.Option) ([]*guard.Locker, func(), error) {
	var (
		lockers []*guard.Locker
		clients []*redis.Client
	)
	closeAll := func() {
		for _, l := range lockers {
			_ = l.Close()
		}
		for _, c := range clients {
			_ = c.Close()
		}
	}
	for range n {
		c := r.NewClient()
		clients = append(clients, c)
		l, err := guard.New(c, opts...)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		lockers = append(lockers, l)
	}
	return lockers, closeAll, nil
}

// RunID returns a short random ID for the names a run writes (keys, orders), so that runs
// against one real Redis do not mix.
func RunID() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
