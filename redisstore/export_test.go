package redisstore

// HashSlot is hashSlot, for the tests of package redisstore_test.
func HashSlot(tag string) uint16 { return hashSlot(tag) }
