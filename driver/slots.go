package driver

import (
	"context"
	"fmt"
	"time"
)

// Slots is a Store that holds in-flight slots: at most a limit of them
// per key, each a lease held by one holder until it is released or its
// TTL passes without a renewal, so that a holder that crashed gives its
// slot back. ratekeeper.NewConcurrency needs it. Each operation is atomic
// (redisstore: one script call over a sorted set of holders scored by the
// end of their leases, on the server's clock), and every method checks
// its input with CheckSlot first.
type Slots interface {
	// AcquireSlot gives holder one of spec.Limit slots of key, for
	// spec.TTL from now, if fewer are held (leases ended count as free).
	// A holder that holds a slot already keeps it, renewed, and counts
	// once: a retried call takes no second slot.
	AcquireSlot(ctx context.Context, key string, spec SlotSpec, holder string) (SlotGrant, error)
	// RenewSlot extends holder's lease to spec.TTL from now, and reports
	// whether holder still held a slot: false once its lease has ended or
	// it was released.
	RenewSlot(ctx context.Context, key string, spec SlotSpec, holder string) (bool, error)
	// ReleaseSlot gives holder's slot back, if it holds one; releasing
	// again, or a slot that expired, changes nothing.
	ReleaseSlot(ctx context.Context, key string, spec SlotSpec, holder string) error
}

// SlotSpec is an in-flight limit, as a Slots store receives it.
type SlotSpec struct {
	// Name keeps the slots of limits of different names apart on one
	// key, as a policy's name does (see CheckName).
	Name string
	// Limit is the most slots held at once per key: 1 to MaxSlots.
	Limit int64
	// TTL is how long a lease lasts without renewal, in microseconds:
	// MinSlotTTL to MaxSlotTTL.
	TTL int64
}

// Bounds of a SlotSpec and of a holder.
const (
	// MaxSlots is the largest SlotSpec.Limit.
	MaxSlots = 100_000
	// MinSlotTTL and MaxSlotTTL bound SlotSpec.TTL.
	MinSlotTTL = 10 * time.Millisecond
	MaxSlotTTL = 24 * time.Hour
	// MaxHolderLen is the longest holder, in bytes.
	MaxHolderLen = 64
)

// SlotGrant is a store's answer to AcquireSlot.
type SlotGrant struct {
	// Acquired reports whether holder holds a slot now.
	Acquired bool
	// Held is the number of slots held after the call, this one included.
	Held int64
	// RetryAfter is, when not acquired, the time in microseconds until
	// the first lease held would end if not renewed; 0 otherwise.
	RetryAfter int64
}

// CheckSlotSpec reports why spec cannot be run, as an error matching
// ErrInvalidSpec, or nil.
func CheckSlotSpec(spec SlotSpec) error {
	if why := CheckName(spec.Name); why != "" {
		return fmt.Errorf("%w: concurrency Name %s", ErrInvalidSpec, why)
	}
	if spec.Limit < 1 || spec.Limit > MaxSlots {
		return fmt.Errorf("%w: concurrency Limit %d is out of range [1, %d]", ErrInvalidSpec, spec.Limit, MaxSlots)
	}
	if lo, hi := int64(MinSlotTTL/time.Microsecond), int64(MaxSlotTTL/time.Microsecond); spec.TTL < lo || spec.TTL > hi {
		return fmt.Errorf("%w: concurrency TTL %v is out of range [%v, %v]", ErrInvalidSpec,
			time.Duration(spec.TTL)*time.Microsecond, MinSlotTTL, MaxSlotTTL)
	}
	return nil
}

// CheckSlot checks a Slots call's input: the key (CheckKey), the spec
// (CheckSlotSpec) and the holder, 1 to MaxHolderLen bytes.
func CheckSlot(key string, spec SlotSpec, holder string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if err := CheckSlotSpec(spec); err != nil {
		return err
	}
	if holder == "" || len(holder) > MaxHolderLen {
		return fmt.Errorf("ratekeeper: a slot's holder of %d bytes, want 1 to %d", len(holder), MaxHolderLen)
	}
	return nil
}
