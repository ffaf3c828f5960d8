package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
)

// config is the demo limiter's policy in the units of the original token
// bucket demo: durations in seconds (fractions allowed), amounts per
// interval or per second. It holds the values of the fields of its
// algorithm only, in their order; in JSON, an object of the algorithm and
// each field by name.
type config struct {
	Algorithm string
	values    []float64
	// Leases: the limiter decides from leases of leaseTTL (see
	// ratekeeper.WithLeases), where the algorithm takes them.
	Leases bool
	// Calendar, for the fixed window: "day", "week", "month" or "year"
	// makes its windows calendar periods in Zone (an IANA name, "" for
	// UTC) in place of its window; "" for none.
	Calendar, Zone string
}

// calendars are the fixed window's calendar periods, by name.
var calendars = map[string]driver.Period{
	"day": ratekeeper.Day, "week": ratekeeper.Week, "month": ratekeeper.Month, "year": ratekeeper.Year,
}

// leaseTTL is the demo's lease time when leases are on.
const leaseTTL = 50 * time.Millisecond

func defaultConfig() config { return withAlgorithm(driver.AlgorithmTokenBucket) }

// withAlgorithm is the named algorithm with its defaults.
func withAlgorithm(name string) config {
	c := config{Algorithm: name}
	if a, ok := lookup(name); ok {
		for _, f := range a.Fields {
			c.values = append(c.values, f.Default)
		}
	}
	return c
}

// withValues is the named algorithm with the values given by field name,
// and the defaults of the others.
func withValues(name string, values map[string]float64) config {
	c := withAlgorithm(name)
	if a, ok := lookup(name); ok {
		for k, v := range values {
			if f, ok := a.field(k); ok {
				c.values[f.index] = v
			}
		}
	}
	return c
}

// value is the value of the field called name, or 0.
func (c config) value(name string) float64 {
	if a, ok := lookup(c.Algorithm); ok {
		if f, ok := a.field(name); ok && f.index < len(c.values) {
			return c.values[f.index]
		}
	}
	return 0
}

// equal reports whether c and o are the same policy.
func (c config) equal(o config) bool {
	return c.Algorithm == o.Algorithm && slices.Equal(c.values, o.values) && c.Leases == o.Leases &&
		c.Calendar == o.Calendar && c.Zone == o.Zone
}

// String writes c as its JSON, for test failures and logs.
func (c config) String() string {
	b, _ := c.MarshalJSON()
	return string(b)
}

// MarshalJSON writes {"algorithm": ..., and each field that is set}.
func (c config) MarshalJSON() ([]byte, error) {
	b, _ := json.Marshal(c.Algorithm)
	out := append([]byte(`{"algorithm":`), b...)
	if a, ok := lookup(c.Algorithm); ok {
		for i, f := range a.Fields {
			if i < len(c.values) && c.values[i] != 0 {
				out = fmt.Appendf(out, ",%q:", f.Name)
				out = strconv.AppendFloat(out, c.values[i], 'f', -1, 64)
			}
		}
	}
	if c.Leases {
		out = append(out, `,"leases":true`...)
	}
	if c.Calendar != "" {
		out = fmt.Appendf(out, `,"calendar":%q,"time_zone":%q`, c.Calendar, cmp.Or(c.Zone, "UTC"))
	}
	return append(out, '}'), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (c *config) UnmarshalJSON(b []byte) error {
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	name, _ := raw["algorithm"].(string)
	leases, _ := raw["leases"].(bool)
	calendar, _ := raw["calendar"].(string)
	zone, _ := raw["time_zone"].(string)
	if zone == "UTC" {
		zone = ""
	}
	*c = config{Algorithm: name, Leases: leases, Calendar: calendar, Zone: zone}
	if a, ok := lookup(name); ok {
		c.values = make([]float64, len(a.Fields))
		for i, f := range a.Fields {
			c.values[i], _ = raw[f.Name].(float64)
		}
	}
	return nil
}

// parseConfig applies field values to cur. The algorithm defaults to the
// current one, so that a change of one field keeps it. Fields left out
// keep their current values, or the algorithm's defaults when it changes.
// Unknown fields, and those of other algorithms, are errors rather than
// silently ignored.
func parseConfig(fields map[string]string, cur config) (config, error) {
	alg, ok := fields["algorithm"]
	if !ok || alg == "" {
		alg = cur.Algorithm
	}
	a, ok := lookup(alg)
	if !ok {
		return config{}, invalid("algorithm", "There is no algorithm %q: choose one of %s.", alg, strings.Join(algorithmNames(), ", "))
	}
	c := config{Algorithm: cur.Algorithm, values: slices.Clone(cur.values), Leases: cur.Leases, Calendar: cur.Calendar, Zone: cur.Zone} // cur is shared
	if cur.Algorithm != alg || len(cur.values) != len(a.Fields) {
		c = withAlgorithm(alg)
	}
	if raw, ok := fields["leases"]; ok {
		switch strings.TrimSpace(raw) {
		case "true", "on":
			if !a.Leases {
				return config{}, invalid("leases", "%s takes no leases: %s", a.Label, a.noLeases)
			}
			c.Leases = true
		case "false", "off", "":
			c.Leases = false
		default:
			return config{}, invalid("leases", "Leases must be true or false.")
		}
	}
	if err := c.setCalendar(fields); err != nil {
		return config{}, err
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys) // report the same error for the same request
	for _, k := range keys {
		if k == "algorithm" || k == "leases" || k == "calendar" || k == "time_zone" {
			continue
		}
		f, ok := a.field(k)
		if !ok {
			if _, known := anyField(k); known {
				return config{}, invalid(k, "%s is not a setting of %s, whose settings are %s.", k, alg, strings.Join(a.fieldNames(), ", "))
			}
			return config{}, invalid(k, "There is no setting %q.", k)
		}
		if err := c.set(f, strings.TrimSpace(fields[k])); err != nil {
			return config{}, err
		}
	}
	return c, nil
}

// setCalendar reads the fields calendar and time_zone into c: only the
// fixed window has calendar periods, and another algorithm has none.
func (c *config) setCalendar(fields map[string]string) error {
	if c.Algorithm != driver.AlgorithmFixedWindow {
		c.Calendar, c.Zone = "", ""
	}
	if raw, ok := fields["calendar"]; ok {
		raw = strings.ToLower(strings.TrimSpace(raw))
		if _, known := calendars[raw]; !known && raw != "" && raw != "none" {
			return invalid("calendar", "The calendar period must be day, week, month or year, or none.")
		}
		if raw != "" && raw != "none" && c.Algorithm != driver.AlgorithmFixedWindow {
			return invalid("calendar", "Only the fixed window has calendar periods.")
		}
		c.Calendar = strings.TrimSuffix(raw, "none")
	}
	if raw, ok := fields["time_zone"]; ok {
		raw = strings.TrimSpace(raw)
		if raw == "UTC" {
			raw = ""
		}
		if raw != "" {
			if _, err := time.LoadLocation(raw); err != nil || raw == "Local" {
				return invalid("time_zone", "There is no time zone %q: give an IANA name such as Europe/Berlin, or UTC.", raw)
			}
		}
		c.Zone = raw
	}
	if c.Calendar == "" {
		c.Zone = ""
	}
	return nil
}

func algorithmNames() []string {
	names := make([]string, len(algorithms))
	for i, a := range algorithms {
		names[i] = a.Name
	}
	slices.Sort(names)
	return names
}

// set reads raw into c's field f, checked as f's kind and range.
func (c *config) set(f *field, raw string) error {
	x, err := strconv.ParseFloat(raw, 64)
	bad := err != nil || math.IsNaN(x) || math.IsInf(x, 0)
	switch f.Kind {
	case kindWhole:
		// Whole numbers in range, also written as 5.0 or 1e3.
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			if bad || x != math.Trunc(x) || x < f.Min || x > f.Max {
				return wholeNumberError(f)
			}
			n = int64(x)
		}
		if float64(n) < f.Min || float64(n) > f.Max {
			return wholeNumberError(f)
		}
		c.values[f.index] = float64(n)
	default:
		if bad || x <= 0 {
			if f.Kind == kindSeconds {
				return invalid(f.Name, "%s must be a number of seconds above 0, such as 1.5.", f.Label)
			}
			return invalid(f.Name, "%s must be a number above 0, such as 0.5.", f.Label)
		}
		if x > f.Max {
			return tooLarge(f)
		}
		c.values[f.index] = x
	}
	return nil
}

// policy returns the configuration as a ratekeeper Policy. The library
// validates it: ratekeeper.New reports what is out of range.
func (c config) policy() (ratekeeper.Policy, error) {
	a, ok := lookup(c.Algorithm)
	if !ok {
		return nil, invalid("algorithm", "unknown algorithm %q", c.Algorithm)
	}
	p, err := a.alg.Build(c.values)
	if err != nil {
		return nil, policyError(a, err)
	}
	if fw, ok := p.(ratekeeper.FixedWindow); ok && c.Calendar != "" {
		loc, err := time.LoadLocation(cmp.Or(c.Zone, "UTC"))
		if err != nil {
			return nil, invalid("time_zone", "There is no time zone %q.", c.Zone)
		}
		fw.Window, fw.Calendar, fw.Location = 0, calendars[c.Calendar], loc
		return fw, nil
	}
	return p, nil
}

// newLimiter validates c and builds its limiter over store. Invalid
// configurations return a *configError that says what is wrong in the
// page's words.
func newLimiter(store ratekeeper.Store, c config) (*ratekeeper.Limiter, error) {
	p, err := c.policy()
	if err != nil {
		return nil, err
	}
	var opts []ratekeeper.Option
	if c.Leases {
		opts = append(opts, ratekeeper.WithLeases(ratekeeper.Leases{TTL: leaseTTL}))
	}
	lim, err := ratekeeper.New(store, p, opts...)
	if err != nil {
		a, _ := lookup(c.Algorithm)
		return nil, policyError(a, err)
	}
	return lim, nil
}
