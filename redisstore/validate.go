package redisstore

import (
	"fmt"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
)

// checkInput rejects what a Limiter never passes on, for callers of
// Decide that bypass one: an empty or oversized key, a negative cost, or
// one larger than spec can ever admit. The scripts assume neither: a
// negative cost would be allowed, and a huge one would overflow Lua's
// numbers. spec is taken as validated, as ratekeeper.New makes it.
func checkInput(key string, spec *driver.ValidSpec, n int64) error {
	switch {
	case key == "":
		return fmt.Errorf("redisstore: %w: empty key", ratekeeper.ErrInvalidKey)
	case len(key) > ratekeeper.MaxKeyLen:
		return fmt.Errorf("redisstore: %w: key of %d bytes is longer than %d", ratekeeper.ErrInvalidKey, len(key), ratekeeper.MaxKeyLen)
	case n < 0:
		return fmt.Errorf("redisstore: %w: negative cost %d", ratekeeper.ErrInvalidCost, n)
	case n > spec.MaxCost():
		return fmt.Errorf("redisstore: %w: %w: cost %d, the policy admits at most %d at once",
			ratekeeper.ErrInvalidCost, ratekeeper.ErrCostTooHigh, n, spec.MaxCost())
	}
	return nil
}
