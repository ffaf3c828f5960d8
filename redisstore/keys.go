package redisstore

import (
	"strings"

	"github.com/ratekeeper/ratekeeper/driver"
)

// Key returns the Redis key that holds key's state under spec (for an
// All, its first policy's; see Keys).
func (s *Store) Key(key string, spec *driver.ValidSpec) string {
	if keys := s.Keys(key, spec); len(keys) > 0 {
		return keys[0]
	}
	return ""
}

// Keys returns the Redis keys that hold key's state under spec, one per
// policy: the caller's key inside a hash tag, so that different callers
// spread over the slots of a Redis Cluster while all the keys of one
// caller share a slot. A named policy adds its name:
// "rk:{user:1}:gcra:per-second". Keys is nil for an unknown algorithm.
func (s *Store) Keys(key string, spec *driver.ValidSpec) []string {
	if _, err := scriptOf(spec); err != nil {
		return nil
	}
	return s.keys(key, spec)
}

func (s *Store) keys(key string, spec *driver.ValidSpec) []string {
	if !spec.IsAll() { // one concatenation, for the common case
		return []string{s.prefix + "{" + escapeBraces(key) + "}:" + spec.StateID().String()}
	}
	tag := s.prefix + "{" + escapeBraces(key) + "}"
	keys := make([]string, spec.NumParts())
	for i := range keys {
		keys[i] = stateKey(tag, spec.Part(i))
	}
	return keys
}

// stateKey is the key of one policy's state: the caller's tag, then its
// StateID, the algorithm's short name and the policy's name, if any.
func stateKey(tag string, spec *driver.ValidSpec) string {
	return tag + ":" + spec.StateID().String()
}

// escapeBraces keeps a caller's key from closing the hash tag early (or
// leaving it empty, which would hash each key on its own): "}" becomes
// "%7D", "{" "%7B", and "%" "%25", so distinct keys stay distinct.
func escapeBraces(key string) string {
	if !strings.ContainsAny(key, "{}%") {
		return key
	}
	return strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D").Replace(key)
}
