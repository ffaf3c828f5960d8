package driver

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalidTime is ratekeeper.ErrInvalidTime: a store's clock reads a
// time outside the range stores decide at (see CheckTime).
var ErrInvalidTime = errors.New("ratekeeper: time outside the supported range")

// maxTimeMicros is 2200-01-01 00:00:00 UTC in microseconds since the Unix
// epoch, the end of the times a store may decide at. A state holds times
// up to the latest clock reading plus MaxPeriod, and the models add at most
// another MaxPeriod to them: below 7.9·10^15, exact in a double (2^53 is
// about 9.0·10^15, in the year 2255).
const maxTimeMicros = 7_258_118_400_000_000

// CheckTime reports whether now, in microseconds since the Unix epoch, is
// a time stores can decide at: after 1970-01-01 00:00:00 UTC and before
// 2200-01-01 00:00:00 UTC. A store checks every time it reads from a
// clock it was given; outside the range, whose values a script cannot keep
// exactly (or at all: states hold no negative times), a decision is an
// error wrapping ErrInvalidTime, never one made on a misread state.
func CheckTime(now int64) error {
	if now <= 0 || now >= maxTimeMicros {
		return timeError(now)
	}
	return nil
}

// timeError is CheckTime's error, apart so that CheckTime inlines.
func timeError(now int64) error {
	return fmt.Errorf("%w: %v (%dµs since the Unix epoch)", ErrInvalidTime, time.UnixMicro(now).UTC(), now)
}
