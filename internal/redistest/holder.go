package redistest

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
)

// ReadHolder returns the owner that holds the exclusive or fair lock whose Redis hash is
// lock ("guard:{<key>}" under the default prefix), "" for none: the hash's #o while its
// hold's lease (#e, in server milliseconds) runs by the server's clock. The hash itself
// outlives its holds (it keeps the lock's fence record for the retention), so whether it
// exists says nothing of a hold.
func ReadHolder(ctx context.Context, c redis.Cmdable, lock string) (string, error) {
	v, err := c.HMGet(ctx, lock, "#o", "#e").Result()
	if err != nil {
		return "", err
	}
	o, _ := v[0].(string)
	if o == "" {
		return "", nil
	}
	e, _ := v[1].(string)
	until, _ := strconv.ParseInt(e, 10, 64)
	now, err := c.Time(ctx).Result()
	if err != nil {
		return "", err
	}
	if until <= now.UnixMilli() {
		return "", nil
	}
	return o, nil
}

// Holder is ReadHolder for a test's own goroutine: a failed read fails tb at once, so
// that "no holder" is never concluded from an error.
func Holder(tb testing.TB, ctx context.Context, c redis.Cmdable, lock string) string {
	tb.Helper()
	o, err := ReadHolder(ctx, c, lock)
	if err != nil {
		tb.Fatalf("reading the holder of %s: %v", lock, err)
	}
	return o
}
