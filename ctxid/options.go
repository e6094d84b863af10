package ctxid

import "time"

// Defaults of a [Signer]'s options.
const (
	defaultMaxAge  = 5 * time.Minute
	defaultMaxSkew = 30 * time.Second
	defaultMaxHops = 8
	// hopsLimit bounds MaxHops so that the hop field stays short.
	hopsLimit = 255
)

// Option configures a [Signer]. A nil Option is ignored.
type Option func(*config)

type config struct {
	maxAge  time.Duration
	maxSkew time.Duration
	maxHops int
	now     func() time.Time
}

func defaultConfig() config {
	return config{
		maxAge:  defaultMaxAge,
		maxSkew: defaultMaxSkew,
		maxHops: defaultMaxHops,
		now:     time.Now,
	}
}

// MaxAge sets how long a token stays valid after it is issued. Keep it short:
// a token is a bearer credential for its owner until it expires. It must be
// positive. The default is 5 minutes.
func MaxAge(d time.Duration) Option {
	return func(c *config) { c.maxAge = d }
}

// MaxSkew sets how far in the future a token's issue time may be, to tolerate
// clocks that differ between services. Issue times are whole seconds, so the
// skew should be at least a second. It must not be negative. The default is
// 30 seconds.
func MaxSkew(d time.Duration) Option {
	return func(c *config) { c.maxSkew = d }
}

// MaxHops sets how many service-to-service hops a token may travel: Verify
// rejects a token with more, and Outbound sends none that would exceed it,
// so that a call loop between services cannot carry an owner forever. It
// must be between 1 and 255. The default is 8.
func MaxHops(n int) Option {
	return func(c *config) { c.maxHops = n }
}

// WithClock sets the clock used to stamp and check tokens, for tests. A nil
// clock is ignored. The default is time.Now.
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now != nil {
			c.now = now
		}
	}
}
