package redisstore

// hashSlot returns the Redis Cluster hash slot of the keys whose hash tag
// holds tag: CRC16 (XMODEM) of tag, modulo 16384, as Redis computes it.
func hashSlot(tag string) uint16 {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
