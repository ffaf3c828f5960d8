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

// checkJSON refuses what encoding/json would accept but a rate limit key
// must not: invalid UTF-8 and unpaired surrogate escapes, which it turns
// into U+FFFD (so that "a\xff" and "a\xfe" would share one counter); a
// key twice in one object, where the last would win; and anything after
// the value. POST /json refuses the same through protojson.
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

// checkValue reads one value from dec, refusing objects with a key twice.
func checkValue(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ := k.(string)
			if seen[key] {
				return fmt.Errorf("the key %q appears twice in one object", key)
			}
			seen[key] = true
			if err := checkValue(dec); err != nil {
				return err
			}
		}
		_, err = dec.Token() // '}'
	case json.Delim('['):
		for dec.More() {
			if err := checkValue(dec); err != nil {
				return err
			}
		}
		_, err = dec.Token() // ']'
	}
	return err
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
