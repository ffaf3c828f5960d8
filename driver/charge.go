package driver

import "fmt"

// CheckCharge reports why a Charge or a Refund of n for key under spec
// cannot be decided, or nil: as CheckRequest, but for costs of 0 to
// MaxLimit, whatever the spec admits at once. The models bound a debt so
// that any such cost keeps their values exact.
func CheckCharge(key string, spec *ValidSpec, n int64) error {
	if err := CheckSpec(spec); err != nil {
		return err
	}
	if err := CheckKey(key); err != nil {
		return err
	}
	switch {
	case n < 0:
		return fmt.Errorf("%w: negative cost %d", ErrInvalidCost, n)
	case n > MaxLimit:
		return fmt.Errorf("%w: cost %d is above %d, the most one charge or refund takes", ErrInvalidCost, n, MaxLimit)
	}
	return nil
}
