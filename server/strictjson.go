package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// maxJSONDepth bounds the nesting of objects and arrays in a /v1/decide
// body. A DecideRequest nests 4 levels deep; 64 leaves room, and keeps
// the check's memory constant whatever the body holds.
const maxJSONDepth = 64

// checkJSON refuses what encoding/json would accept but a rate limit key
// must not: invalid UTF-8 and unpaired surrogate escapes, which it turns
// into U+FFFD (so that "a\xff" and "a\xfe" would share one counter); a
// key twice in one object, where the last would win; and anything after
// the value. POST /json refuses the same through protojson. It also
// refuses objects and arrays nested more than maxJSONDepth levels deep.
func checkJSON(body []byte) error {
	if !utf8.Valid(body) {
		return errors.New("the body is not valid UTF-8")
	}
	if err := checkEscapes(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := checkValue(dec); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON value")
	}
	return nil
}

// jsonLevel is an object or array open in checkValue.
type jsonLevel struct {
	object bool
	// wantKey: the object's next token is a key (or its end).
	wantKey bool
	seen    map[string]bool // the object's keys so far
}

// checkValue reads one value from dec, refusing objects with a key twice
// and nesting deeper than maxJSONDepth. It keeps the open levels in a
// slice, not on the call stack, so that a body of a million '[' costs
// no more than a flat one.
func checkValue(dec *json.Decoder) error {
	var open []jsonLevel
	for {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if n := len(open) - 1; n >= 0 && open[n].wantKey && tok != json.Delim('}') {
			key, _ := tok.(string)
			if open[n].seen[key] {
				return fmt.Errorf("the key %q appears twice in one object", key)
			}
			if open[n].seen == nil {
				open[n].seen = map[string]bool{}
			}
			open[n].seen[key] = true
			open[n].wantKey = false
			continue
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if len(open) == maxJSONDepth {
				return fmt.Errorf("objects and arrays nest more than %d levels deep", maxJSONDepth)
			}
			object := tok == json.Delim('{')
			open = append(open, jsonLevel{object: object, wantKey: object})
			continue
		case json.Delim('}'), json.Delim(']'):
			open = open[:len(open)-1]
		}
		// A value ended: the object holding it, if any, wants a key next.
		n := len(open) - 1
		if n < 0 {
			return nil
		}
		open[n].wantKey = open[n].object
	}
}

// checkEscapes refuses \u escapes of surrogates that do not pair.
func checkEscapes(body []byte) error {
	inString := false
	for i := 0; i < len(body); i++ {
		switch c := body[i]; {
		case c == '"':
			inString = !inString
		case c == '\\' && inString:
			if i+1 < len(body) && body[i+1] == 'u' {
				r, ok := escapedRune(body, i)
				switch {
				case ok && utf16.IsSurrogate(r) && r < 0xdc00:
					low, lok := escapedRune(body, i+6)
					if !lok || utf16.DecodeRune(r, low) == utf8.RuneError {
						return errors.New("an unpaired surrogate escape in a string")
					}
					i += 6
				case ok && utf16.IsSurrogate(r):
					return errors.New("an unpaired surrogate escape in a string")
				}
			}
			i++ // the escaped character
		}
	}
	return nil
}

// escapedRune reads the \uXXXX escape at body[i:].
func escapedRune(body []byte, i int) (rune, bool) {
	if i+6 > len(body) || body[i] != '\\' || body[i+1] != 'u' {
		return 0, false
	}
	v, err := strconv.ParseUint(string(body[i+2:i+6]), 16, 16)
	return rune(v), err == nil
}
