package redistest

import (
	"context"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Holder returns the owner that holds the exclusive or fair lock whose Redis hash is
// lock ("guard:{<key>}" under the default prefix), "" for none: the hash's #o while its
// hold's lease (#e, in server milliseconds) runs by the server's clock. The hash itself
// outlives its holds (it keeps the lock's fence record for the retention), so whether it
// exists says nothing of a hold.
func Holder(ctx context.Context, c redis.Cmdable, lock string) string {
	v, err := c.HMGet(ctx, lock, "#o", "#e").Result()
	if err != nil || len(v) != 2 {
		return ""
	}
	o, _ := v[0].(string)
	e, _ := v[1].(string)
	until, _ := strconv.ParseInt(e, 10, 64)
	if o == "" {
		return ""
	}
	now, err := c.Time(ctx).Result()
	if err != nil || until <= now.UnixMilli() {
		return ""
	}
	return o
}
