package redistest

import "strings"

// Slots is the number of hash slots of a Redis Cluster.
const Slots = 16384

// crcTable holds the CRC16 of every byte value: the XMODEM variant
// (polynomial 0x1021, initial value 0, no reflection) that Redis Cluster
// hashes keys with.
var crcTable = func() (t [256]uint16) {
	for b := range t {
		crc := uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[b] = crc
	}
	return t
}()

// Slot returns the hash slot of key as Redis Cluster computes it: CRC16 of
// the key modulo 16384, where a key holding a hash tag, a non-empty part
// between the first "{" and the first "}" after it, is hashed by that part
// alone. So "{user1}.a" and "{user1}.b" share a slot, while "{}a" is hashed
// whole.
func Slot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			key = key[open+1 : open+1+n]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^key[i]]
	}
	return int(crc) % Slots
}
