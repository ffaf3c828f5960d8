package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/catalog"
	"github.com/ratekeeper/ratekeeper/driver"
)

// configError is an invalid configuration: what is wrong, in words for
// the page, and the field at fault when one is.
type configError struct {
	field string
	msg   string
}

func (e *configError) Error() string { return e.msg }

func invalid(field, format string, args ...any) error {
	return &configError{field: field, msg: fmt.Sprintf(format, args...)}
}

// label names a field as the page does.
func label(name string) string {
	if name == "algorithm" {
		return "Algorithm"
	}
	if f, ok := anyField(name); ok {
		return f.Label
	}
	return name
}

// wholeNumberError is the one message for a whole-number field out of
// range or not a whole number at all.
func wholeNumberError(f *field) error {
	return invalid(f.Name, "%s must be a whole number from %s to %s.", f.Label, grouped(int64(f.Min)), grouped(int64(f.Max)))
}

// grouped writes n with thousands separators: 1,000,000,000.
func grouped(n int64) string {
	s := strconv.FormatInt(n, 10)
	if n < 0 {
		return "-" + grouped(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// tooLarge says that a decimal or seconds field is above its range.
func tooLarge(f *field) error {
	if f.Kind == kindSeconds {
		return invalid(f.Name, "%s must be at most %s seconds (10 years).", f.Label, grouped(int64(f.Max)))
	}
	return invalid(f.Name, "%s must be at most %s.", f.Label, grouped(int64(f.Max)))
}

// policyError maps an error of ratekeeper.New for a to the field at fault
// and a message in the page's words, from the bound the policy broke. The
// demo checks each field's range before the library sees it, so these are
// the bounds between fields, and the resolutions. The library's messages
// are for programmers; an error of no bound known here is passed on,
// capitalised.
func policyError(a *algorithm, err error) *configError {
	var pe *ratekeeper.PolicyError
	if !errors.As(err, &pe) {
		return capitalised("", err)
	}
	f, ok := a.policyField(pe.Field)
	if !ok {
		return capitalised("", err)
	}
	switch pe.Bound {
	case driver.BoundMin, driver.BoundMax:
		if f.Kind == kindWhole {
			return wholeNumberError(f).(*configError)
		}
	case driver.BoundResolution:
		if f.Kind == kindSeconds {
			return &configError{f.Name, f.Label + " must be a whole number of microseconds: at most 6 decimal places."}
		}
		return &configError{f.Name, fmt.Sprintf("%s must be at least %s.", f.Label, strconv.FormatFloat(pe.Limit, 'f', -1, 64))}
	case driver.BoundRate:
		return &configError{f.Name, f.Label + " must be at most one request per microsecond of the period."}
	case driver.BoundPeriod:
		if f.param.Role == catalog.RoleBurst {
			return &configError{f.Name, fmt.Sprintf("%s is too large for this rate: a burst must %s within 10 years.", f.Label, a.alg.Recovers)}
		}
		msg := fmt.Sprintf("The bucket would take more than 10 years to %s: raise the %s", a.alg.Recovers, strings.ToLower(f.Label))
		for _, p := range a.Fields {
			if p.param.Role == catalog.RolePeriod {
				msg += " or shorten the " + strings.ToLower(p.Label)
			}
		}
		return &configError{f.Name, msg + "."}
	}
	return capitalised(f.Name, err)
}

// capitalised is the library's message of err, for field, as a sentence.
func capitalised(field string, err error) *configError {
	text := strings.TrimPrefix(strings.TrimPrefix(err.Error(), ratekeeper.ErrInvalidPolicy.Error()), ": ")
	if text != "" {
		text = strings.ToUpper(text[:1]) + text[1:] + "."
	}
	return &configError{field: field, msg: text}
}
