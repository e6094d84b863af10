package guard

import (
	"strconv"
	"strings"
)

// redisKeys are the Redis names of one lock. All of them share the hash tag {<encoded
// key>}, so a script can touch them together on Redis Cluster.
type redisKeys struct {
	lock  string // hash: owner → hold count, fencing token, waiter flags
	fence string // fencing counter and the nonces of the last final releases
	queue string // list of the Lockers waiting for the lock, in the order they found it busy
	aux   string // a kind's fourth key (see kindSpec), "" for kinds with three
	aux2  string // a kind's fifth key, "" for kinds with fewer
}

// channel is the Pub/Sub channel on which the lock's release is announced; release.lua
// derives the same name.
func (k redisKeys) channel() string { return k.lock + ":release" }

// keysOfChannel returns the names of the lock whose release channel is ch.
func keysOfChannel(ch string) redisKeys {
	lock := strings.TrimSuffix(ch, ":release")
	return redisKeys{lock: lock, fence: lock + ":fence", queue: lock + ":queue"}
}

// redisKeys validates key and builds the Redis names of its lock of kind k.
func (l *Locker) redisKeys(key string, k *kindSpec) (redisKeys, error) {
	return l.cfg.redisKeys(key, k)
}

// redisKeys validates key against MaxKeyLen and builds the Redis names, under the
// Prefix, of its lock of kind k.
func (s *settings) redisKeys(key string, k *kindSpec) (redisKeys, error) {
	if key == "" {
		return redisKeys{}, invalidKey(key, "empty")
	}
	if len(key) > s.maxKeyLen {
		return redisKeys{}, invalidKey(key, "longer than MaxKeyLen ("+strconv.Itoa(s.maxKeyLen)+" bytes)")
	}
	// One allocation for the three names: "<lock>:fence<lock>:queue".
	var b strings.Builder
	b.Grow(2*(len(s.prefix)+len(key)+len(k.suffix)+len("{}:fence")) + 8)
	b.WriteString(s.prefix)
	b.WriteByte('{')
	writeEscaped(&b, key)
	b.WriteByte('}')
	b.WriteString(k.suffix)
	n := b.Len()
	b.WriteString(":fence")
	b.WriteString(b.String()[:n])
	b.WriteString(":queue")
	names := b.String()
	rk := redisKeys{lock: names[:n], fence: names[:n+len(":fence")], queue: names[n+len(":fence"):]}
	if k.aux != "" {
		rk.aux = rk.lock + k.aux
	}
	if k.aux2 != "" {
		rk.aux2 = rk.lock + k.aux2
	}
	return rk, nil
}

// writeEscaped writes key so that it cannot end the hash tag early and so that distinct
// keys stay distinct: '%', '{' and '}' become %25, %7B and %7D. Every other byte, control
// characters and invalid UTF-8 included, is written as it is.
func writeEscaped(b *strings.Builder, key string) {
	for i := 0; i < len(key); i++ {
		switch c := key[i]; c {
		case '%':
			b.WriteString("%25")
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		default:
			b.WriteByte(c)
		}
	}
}
