// Package redisslot computes Redis Cluster hash slots, so that millrace can check, without a
// cluster, that keys a script touches together hash to one slot.
package redisslot

import "strings"

// Slots is the number of hash slots of a Redis Cluster.
const Slots = 16384

// HashTag returns the part of key Redis Cluster hashes: the text between the first '{' and the
// first '}' after it, when that text is not empty; false when key has no such tag (the whole key
// is hashed).
func HashTag(key string) (string, bool) {
	_, after, ok := strings.Cut(key, "{")
	if !ok {
		return "", false
	}
	tag, _, ok := strings.Cut(after, "}")
	if !ok || tag == "" {
		return "", false
	}
	return tag, true
}

// Of returns key's hash slot: CRC16 (XMODEM) of its hash tag, or of the whole key without
// one, modulo Slots.
func Of(key string) uint16 {
	if tag, ok := HashTag(key); ok {
		key = tag
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % Slots
}
