package config

import (
	"cmp"
	"errors"
	"strings"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/catalog"
	"github.com/ratekeeper/ratekeeper/driver"
)

// validate checks a policy as ratekeeper.New does.
func validate(p ratekeeper.Policy) error {
	s, err := p.Spec()
	if err == nil {
		_, err = driver.Validate(s)
	}
	return err
}

// errField is the policy field a policy's error is about.
func errField(err error) string {
	var pe *ratekeeper.PolicyError
	var se *driver.SpecError
	switch {
	case errors.As(err, &pe):
		return pe.Field
	case errors.As(err, &se):
		return se.Field
	}
	return ""
}

// algorithm returns the ratekeeper algorithm of l, which Load checked:
// for envoy's rules, a fixed window (aligned to the unit).
func algorithm(l Limit) catalog.Algorithm {
	a, _ := catalog.Lookup(cmp.Or(l.Algorithm, driver.AlgorithmFixedWindow))
	return a
}

// policy returns the ratekeeper policy that decides l.
func policy(l Limit) ratekeeper.Policy {
	n := int64(l.RequestsPerUnit)
	if l.Calendar != 0 {
		return ratekeeper.FixedWindow{Limit: n, Calendar: l.Calendar, Location: l.Location}
	}
	if l.Algorithm == "" {
		return ratekeeper.FixedWindow{Limit: n, Window: l.Period, Aligned: true}
	}
	return algorithm(l).PerPeriod(n, l.Period, l.Burst)
}

// policyField returns the YAML key that a field of l's policy, or of its
// driver.Spec, comes from.
func policyField(l Limit, field string, fs map[string]*field) string {
	role := catalog.RoleNone
	if p, ok := algorithm(l).FieldParam(field); ok {
		role = p.Role
	} else {
		switch field { // a driver.Spec's
		case "Limit":
			role = catalog.RoleRate
		case "Window":
			role = catalog.RolePeriod
		}
	}
	switch field {
	case "Calendar":
		return "calendar"
	case "Location":
		return "time_zone"
	}
	switch role {
	case catalog.RoleRate:
		return "requests_per_unit"
	case catalog.RolePeriod:
		if fs["period"] != nil {
			return "period"
		}
		return "unit"
	case catalog.RoleBurst:
		if fs["burst"] != nil {
			return "burst"
		}
		return "requests_per_unit"
	}
	return ""
}

// algorithmNames are the names of ratekeeper's algorithms, sorted; with
// bursts, those of the algorithms that take a burst.
func algorithmNames(bursts bool) string {
	var names []string
	for _, a := range catalog.All() {
		if !bursts || a.Bursts() {
			names = append(names, a.Name)
		}
	}
	return strings.Join(names, ", ")
}

// policyMsg is the reason of a policy's error, without the ratekeeper
// prefix.
func policyMsg(err error) string {
	var pe *ratekeeper.PolicyError
	var se *driver.SpecError
	switch {
	case errors.As(err, &pe):
		return strings.Join(strings.Fields("ratekeeper."+pe.Policy+" "+pe.Field+" "+pe.Reason), " ")
	case errors.As(err, &se):
		return strings.Join(strings.Fields(se.Algorithm+" "+se.Field+" "+se.Reason), " ")
	}
	return err.Error()
}
