package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
)

// config is the demo limiter's policy in the units of the original token
// bucket demo: durations in seconds (fractions allowed), amounts per
// interval or per second. Only the fields of the selected algorithm are
// set.
type config struct {
	Algorithm string `json:"algorithm"`
	// token_bucket and leaky_bucket: the most the bucket holds.
	Capacity int64 `json:"capacity,omitempty"`
	// token_bucket: tokens added every RefillInterval seconds.
	RefillRate     float64 `json:"refill_rate,omitempty"`
	RefillInterval float64 `json:"refill_interval,omitempty"`
	// gcra: Rate requests per Period seconds, Burst at once.
	Rate   int64   `json:"rate,omitempty"`
	Period float64 `json:"period,omitempty"`
	Burst  int64   `json:"burst,omitempty"`
	// fixed_window, sliding_window_log, sliding_window_counter: Limit
	// requests per Window seconds.
	Limit  int64   `json:"limit,omitempty"`
	Window float64 `json:"window,omitempty"`
	// leaky_bucket: requests drained per second.
	LeakRate float64 `json:"leak_rate,omitempty"`
}

// defaults holds each algorithm's starting point: all of them about ten
// requests at once and one a second after that, so that switching
// between them shows how they differ rather than how their numbers do.
var defaults = map[string]config{
	driver.AlgorithmTokenBucket:          {Capacity: 10, RefillRate: 1, RefillInterval: 1},
	driver.AlgorithmGCRA:                 {Rate: 1, Period: 1, Burst: 10},
	driver.AlgorithmFixedWindow:          {Limit: 10, Window: 10},
	driver.AlgorithmSlidingWindowLog:     {Limit: 10, Window: 10},
	driver.AlgorithmSlidingWindowCounter: {Limit: 10, Window: 10},
	driver.AlgorithmLeakyBucket:          {Capacity: 10, LeakRate: 1},
}

// params lists each algorithm's fields, as named in JSON and forms.
var params = map[string][]string{
	driver.AlgorithmTokenBucket:          {"capacity", "refill_rate", "refill_interval"},
	driver.AlgorithmGCRA:                 {"rate", "period", "burst"},
	driver.AlgorithmFixedWindow:          {"limit", "window"},
	driver.AlgorithmSlidingWindowLog:     {"limit", "window"},
	driver.AlgorithmSlidingWindowCounter: {"limit", "window"},
	driver.AlgorithmLeakyBucket:          {"capacity", "leak_rate"},
}

// policyFields maps a field to the policy field that a
// ratekeeper.PolicyError names, so that an error can be shown next to its
// input.
var policyFields = map[string]string{
	"capacity":        "Capacity",
	"refill_rate":     "RefillRate",
	"refill_interval": "RefillInterval",
	"rate":            "Rate",
	"period":          "Period",
	"burst":           "Burst",
	"limit":           "Limit",
	"window":          "Window",
	"leak_rate":       "LeakRate",
}

func defaultConfig() config { return withAlgorithm(driver.AlgorithmTokenBucket) }

func withAlgorithm(algorithm string) config {
	c := defaults[algorithm]
	c.Algorithm = algorithm
	return c
}

// configError is an invalid configuration: what is wrong, and the field at
// fault when one is.
type configError struct {
	field string
	msg   string
}

func (e *configError) Error() string { return e.msg }

func invalid(field, format string, args ...any) error {
	return &configError{field: field, msg: fmt.Sprintf(format, args...)}
}

// decodeConfig reads a configuration change, JSON or form, into field
// values. Both encodings become the same map, so there is one parser.
func decodeConfig(body []byte, mediaType string) (map[string]string, error) {
	trimmed := bytes.TrimSpace(body)
	isJSON := mediaType == "application/json" || strings.HasSuffix(mediaType, "+json") ||
		// curl -d '{...}' labels JSON as a form.
		bytes.HasPrefix(trimmed, []byte("{"))
	if isJSON {
		return decodeJSON(trimmed)
	}
	q, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, invalid("", "malformed form: %v", err)
	}
	fields := make(map[string]string, len(q))
	for k, v := range q {
		fields[k] = v[0]
	}
	return fields, nil
}

func decodeJSON(body []byte) (map[string]string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var raw map[string]any
	if err := dec.Decode(&raw); err != nil {
		return nil, invalid("", "malformed JSON: %v", err)
	}
	if raw == nil {
		return nil, invalid("", "malformed JSON: expected an object")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, invalid("", "malformed JSON: data after the object")
	}
	fields := make(map[string]string, len(raw))
	for k, v := range raw {
		switch v := v.(type) {
		case json.Number:
			fields[k] = v.String()
		case string: // numbers in strings too, as a form sends them
			fields[k] = v
		default:
			return nil, invalid(k, "%s must be a number, got %s", k, jsonText(v))
		}
	}
	return fields, nil
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// parseConfig applies field values to cur. The algorithm defaults to
// token_bucket, the original demo's only one, so its requests keep working.
// Fields left out keep their current values, or the algorithm's defaults
// when it changes. Unknown fields, and those of other algorithms, are
// errors rather than silently ignored.
func parseConfig(fields map[string]string, cur config) (config, error) {
	alg, ok := fields["algorithm"]
	if !ok || alg == "" {
		alg = driver.AlgorithmTokenBucket
	}
	names, ok := params[alg]
	if !ok {
		return config{}, invalid("algorithm", "unknown algorithm %q: choose one of %s", alg, strings.Join(algorithmNames(), ", "))
	}
	c := cur
	if cur.Algorithm != alg {
		c = withAlgorithm(alg)
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys) // report the same error for the same request
	for _, k := range keys {
		if k == "algorithm" {
			continue
		}
		if !slices.Contains(names, k) {
			if _, known := policyFields[k]; known {
				return config{}, invalid(k, "%s is not a parameter of %s, whose parameters are %s", k, alg, strings.Join(names, ", "))
			}
			return config{}, invalid(k, "unknown field %q", k)
		}
		if err := c.set(k, strings.TrimSpace(fields[k])); err != nil {
			return config{}, err
		}
	}
	return c, nil
}

func algorithmNames() []string {
	names := make([]string, 0, len(params))
	for name := range params {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func (c *config) set(field, raw string) error {
	switch field {
	case "capacity":
		return parseInt(field, raw, &c.Capacity)
	case "refill_rate":
		return parseFloat(field, raw, &c.RefillRate)
	case "refill_interval":
		return parseFloat(field, raw, &c.RefillInterval)
	case "rate":
		return parseInt(field, raw, &c.Rate)
	case "period":
		return parseFloat(field, raw, &c.Period)
	case "burst":
		return parseInt(field, raw, &c.Burst)
	case "limit":
		return parseInt(field, raw, &c.Limit)
	case "window":
		return parseFloat(field, raw, &c.Window)
	case "leak_rate":
		return parseFloat(field, raw, &c.LeakRate)
	}
	return invalid(field, "unknown field %q", field)
}

func parseFloat(field, raw string, dst *float64) error {
	if raw == "" {
		return invalid(field, "%s is empty: enter a number", field)
	}
	x, err := strconv.ParseFloat(raw, 64)
	if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
		return invalid(field, "%s must be a finite number, got %q", field, raw)
	}
	*dst = x
	return nil
}

// parseInt accepts whole numbers, also written as 5.0 or 1e3.
func parseInt(field, raw string, dst *int64) error {
	if raw == "" {
		return invalid(field, "%s is empty: enter a whole number", field)
	}
	if n, err := strconv.ParseInt(raw, 10, 64); err == nil {
		*dst = n
		return nil
	}
	x, err := strconv.ParseFloat(raw, 64)
	if err != nil || x != math.Trunc(x) || math.Abs(x) > 1<<53 {
		return invalid(field, "%s must be a whole number, got %q", field, raw)
	}
	*dst = int64(x)
	return nil
}

// policy returns the configuration as a ratekeeper Policy. The library
// validates it: ratekeeper.New reports what is out of range.
func (c config) policy() (ratekeeper.Policy, error) {
	switch c.Algorithm {
	case driver.AlgorithmTokenBucket:
		interval, err := seconds("refill_interval", c.RefillInterval)
		if err != nil {
			return nil, err
		}
		return ratekeeper.TokenBucket{Capacity: c.Capacity, RefillRate: c.RefillRate, RefillInterval: interval}, nil
	case driver.AlgorithmGCRA:
		period, err := seconds("period", c.Period)
		if err != nil {
			return nil, err
		}
		return ratekeeper.GCRA{Rate: c.Rate, Period: period, Burst: c.Burst}, nil
	case driver.AlgorithmFixedWindow, driver.AlgorithmSlidingWindowLog, driver.AlgorithmSlidingWindowCounter:
		window, err := seconds("window", c.Window)
		if err != nil {
			return nil, err
		}
		switch c.Algorithm {
		case driver.AlgorithmFixedWindow:
			return ratekeeper.FixedWindow{Limit: c.Limit, Window: window}, nil
		case driver.AlgorithmSlidingWindowLog:
			return ratekeeper.SlidingWindowLog{Limit: c.Limit, Window: window}, nil
		}
		return ratekeeper.SlidingWindowCounter{Limit: c.Limit, Window: window}, nil
	case driver.AlgorithmLeakyBucket:
		return ratekeeper.LeakyBucket{Capacity: c.Capacity, LeakRate: c.LeakRate}, nil
	}
	return nil, invalid("algorithm", "unknown algorithm %q", c.Algorithm)
}

// seconds converts a number of seconds to a Duration, to the nanosecond.
// Values that are not positive pass through for the library to reject, so
// its message is the one shown.
func seconds(field string, s float64) (time.Duration, error) {
	if s > float64(math.MaxInt64)/float64(time.Second) {
		return 0, invalid(field, "%s of %v seconds is too long", field, s)
	}
	return time.Duration(math.Round(s * float64(time.Second))), nil
}

// newLimiter validates c and builds its limiter over store. Invalid
// configurations return a *configError carrying the library's message.
func newLimiter(store ratekeeper.Store, c config) (*ratekeeper.Limiter, error) {
	p, err := c.policy()
	if err != nil {
		return nil, err
	}
	lim, err := ratekeeper.New(store, p)
	if err != nil {
		field := ""
		var pe *ratekeeper.PolicyError
		if errors.As(err, &pe) {
			for _, name := range params[c.Algorithm] {
				if policyFields[name] == pe.Field {
					field = name
					break
				}
			}
		}
		return nil, &configError{field: field, msg: err.Error()}
	}
	return lim, nil
}
