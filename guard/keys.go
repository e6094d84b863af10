package guard

import (
	"strconv"
	"strings"

	"github.com/guardkit/guardkit/guard/internal/store"
)

// redisKeys are the Redis names of one lock (store.Keys). All of them share the hash
// tag {<encoded key>}, so a script can touch them together on Redis Cluster.
type redisKeys = store.Keys

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
	// One allocation for the two names: "<lock><lock>:queue".
	var b strings.Builder
	b.Grow(2*(len(s.prefix)+len(key)+len(k.suffix)+len("{}")) + len(":queue"))
	b.WriteString(s.prefix)
	b.WriteByte('{')
	writeEscaped(&b, key)
	b.WriteByte('}')
	b.WriteString(k.suffix)
	n := b.Len()
	b.WriteString(b.String()[:n])
	b.WriteString(":queue")
	names := b.String()
	rk := redisKeys{Lock: names[:n], Queue: names[n:]}
	if k.aux != "" {
		rk.Aux = rk.Lock + k.aux
	}
	if k.aux2 != "" {
		rk.Aux2 = rk.Lock + k.aux2
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
