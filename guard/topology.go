package guard

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// refreshEvery is the shortest interval between two reloads of a Cluster client's slot
// map asked for by this Locker.
const refreshEvery = 250 * time.Millisecond

// refresh makes a Cluster client reload its map of the cluster after err, when err may
// mean that a node died or a slot moved. go-redis reloads the map by itself only on a
// MOVED or ASK reply or once a minute, and a dead node answers nothing: without this, the
// keys of a primary that was killed stay unreachable long after its replica took over.
// Reloads are rate-limited and run aside; other clients need nothing.
func (c *conn) refresh(err error) {
	cc, ok := c.client.(*redis.ClusterClient)
	if !ok || err == nil || !topologyError(err) {
		return
	}
	now := time.Now().UnixNano()
	last := c.refreshed.Load()
	if now-last < int64(refreshEvery) || !c.refreshed.CompareAndSwap(last, now) {
		return
	}
	cc.ReloadState(context.Background())
}

// topologyError reports whether err may come from a node that is gone or no longer
// serves the slot: a network error or timeout, or a reply that says the cluster changed.
func topologyError(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	var re redis.Error
	if !errors.As(err, &re) || errors.Is(err, redis.Nil) {
		return !errors.Is(err, redis.Nil)
	}
	msg := re.Error()
	for _, p := range []string{"CLUSTERDOWN", "MOVED", "ASK", "TRYAGAIN", "READONLY", "MASTERDOWN", "LOADING"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// shardedFlag is release.lua's and wake.lua's ARGV that lets them announce a release with
// sharded Pub/Sub: "1" on a Cluster client (the script then uses SPUBLISH when the node
// runs Redis 7 or newer), "0" otherwise.
func (c *conn) shardedFlag() string {
	if _, ok := c.client.(*redis.ClusterClient); ok && !c.classic {
		return "1"
	}
	return "0"
}

// shardedArg is shardedFlag as a script argument.
func (c *conn) shardedArg() any {
	_, ok := c.client.(*redis.ClusterClient)
	return flagArg(ok && !c.classic)
}

// hashSlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash tag, the
// text between the first '{' and the next '}' when that is not empty, else of the whole
// key, modulo 16384.
func hashSlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
