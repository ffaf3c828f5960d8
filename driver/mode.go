package driver

import "fmt"

// Mode is what a decision does with a request's cost.
type Mode uint8

// The modes of a decision.
const (
	// Check decides a request of cost n (0 answers for 1) and consumes
	// nothing: an allowed request reports the state as it is.
	Check Mode = iota
	// Take consumes n when the whole of it fits, and nothing otherwise:
	// the ordinary decision.
	Take
	// Charge always consumes n, a cost known only afterwards, and may
	// leave the key in debt: Allowed reports whether n fitted.
	Charge
	// Refund gives back up to n, never beyond what the policy holds
	// when full.
	Refund
)

// String returns the mode's name in lower case, such as "take".
func (m Mode) String() string {
	switch m {
	case Check:
		return "check"
	case Take:
		return "take"
	case Charge:
		return "charge"
	case Refund:
		return "refund"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}
