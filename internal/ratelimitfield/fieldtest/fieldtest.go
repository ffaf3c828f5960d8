// Package fieldtest parses rate limit fields as a strict client would, so
// that tests can check that what is written is valid RFC 9651.
package fieldtest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Item is a member of a List: its bare item and its parameters, in order.
// Values are a string (sf-string, unescaped), Token, int64, Decimal, bool,
// []byte or Display (a Display String, decoded).
type Item struct {
	Value  any
	Params []Param
}

// Param is a parameter of an Item.
type Param struct {
	Key   string
	Value any
}

// Token is an sf-token.
type Token string

// Decimal is an sf-decimal, as written.
type Decimal string

// Display is an sf-displaystring, decoded.
type Display string

// Param returns the value of the parameter key, and whether it is there.
func (it Item) Param(key string) (any, bool) {
	for _, p := range it.Params {
		if p.Key == key {
			return p.Value, true
		}
	}
	return nil, false
}

// ParseList parses a field value as an RFC 9651 List (section 4.2.1),
// refusing anything the RFC refuses. Inner lists are refused too: no
// rate limit field has them.
func ParseList(field string) ([]Item, error) {
	p := &parser{s: field}
	p.skipSP()
	var out []Item
	for !p.done() {
		if p.peek() == '(' {
			return nil, p.errorf("inner lists are not used by these fields")
		}
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		out = append(out, it)
		p.skipOWS()
		if p.done() {
			return out, nil
		}
		if p.next() != ',' {
			return nil, p.errorf("want ',' after a list member")
		}
		p.skipOWS()
		if p.done() {
			return nil, p.errorf("trailing comma")
		}
	}
	return out, nil
}

type parser struct {
	s string
	i int
}

func (p *parser) done() bool { return p.i >= len(p.s) }
func (p *parser) peek() byte { return p.s[p.i] }
func (p *parser) next() byte { c := p.s[p.i]; p.i++; return c }

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("at byte %d of %q: %s", p.i, p.s, fmt.Sprintf(format, args...))
}

func (p *parser) skipSP() {
	for !p.done() && p.peek() == ' ' {
		p.i++
	}
}

func (p *parser) skipOWS() {
	for !p.done() && (p.peek() == ' ' || p.peek() == '\t') {
		p.i++
	}
}

func (p *parser) item() (Item, error) {
	v, err := p.bareItem()
	if err != nil {
		return Item{}, err
	}
	it := Item{Value: v}
	for !p.done() && p.peek() == ';' {
		p.i++
		p.skipSP()
		key, err := p.key()
		if err != nil {
			return Item{}, err
		}
		var val any = true
		if !p.done() && p.peek() == '=' {
			p.i++
			if val, err = p.bareItem(); err != nil {
				return Item{}, err
			}
		}
		it.Params = append(it.Params, Param{Key: key, Value: val})
	}
	return it, nil
}

func (p *parser) key() (string, error) {
	start := p.i
	if p.done() || !(isLower(p.peek()) || p.peek() == '*') {
		return "", p.errorf("want a key")
	}
	for !p.done() && (isLower(p.peek()) || isDigit(p.peek()) || strings.IndexByte("_-.*", p.peek()) >= 0) {
		p.i++
	}
	return p.s[start:p.i], nil
}

func (p *parser) bareItem() (any, error) {
	if p.done() {
		return nil, p.errorf("want an item")
	}
	switch c := p.peek(); {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.str()
	case c == '*' || isAlpha(c):
		return p.token(), nil
	case c == ':':
		return p.bytes()
	case c == '?':
		p.i++
		if !p.done() && (p.peek() == '0' || p.peek() == '1') {
			return p.next() == '1', nil
		}
		return nil, p.errorf("want ?0 or ?1")
	case c == '%':
		return p.display()
	}
	return nil, p.errorf("want an item, not %q", p.peek())
}

func (p *parser) number() (any, error) {
	start := p.i
	if p.peek() == '-' {
		p.i++
	}
	digits, dot := 0, -1
	for !p.done() {
		c := p.peek()
		if c == '.' && dot < 0 && digits <= 12 {
			dot = digits
			p.i++
			continue
		}
		if !isDigit(c) {
			break
		}
		digits++
		p.i++
	}
	switch {
	case digits == 0:
		return nil, p.errorf("want digits")
	case dot < 0 && digits > 15:
		return nil, p.errorf("integer of more than 15 digits")
	case dot < 0:
		n, err := strconv.ParseInt(p.s[start:p.i], 10, 64)
		return n, err
	case dot == digits || digits-dot > 3:
		return nil, p.errorf("decimal needs 1 to 3 fraction digits")
	}
	return Decimal(p.s[start:p.i]), nil
}

func (p *parser) str() (any, error) {
	p.i++
	var b strings.Builder
	for !p.done() {
		c := p.next()
		switch {
		case c == '\\':
			if p.done() || (p.peek() != '"' && p.peek() != '\\') {
				return nil, p.errorf("bad escape in a string")
			}
			b.WriteByte(p.next())
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return nil, p.errorf("byte %#x in a string", c)
		default:
			b.WriteByte(c)
		}
	}
	return nil, p.errorf("unterminated string")
}

func (p *parser) token() Token {
	start := p.i
	p.i++
	for !p.done() && (isTchar(p.peek()) || p.peek() == ':' || p.peek() == '/') {
		p.i++
	}
	return Token(p.s[start:p.i])
}

func (p *parser) bytes() (any, error) {
	p.i++
	end := strings.IndexByte(p.s[p.i:], ':')
	if end < 0 {
		return nil, p.errorf("unterminated byte sequence")
	}
	b64 := p.s[p.i : p.i+end]
	p.i += end + 1
	if strings.Trim(b64, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") != "" {
		return nil, p.errorf("bad byte sequence")
	}
	return []byte(b64), nil
}

func (p *parser) display() (any, error) {
	p.i++
	if p.done() || p.next() != '"' {
		return nil, p.errorf(`want %%"`)
	}
	var b []byte
	for !p.done() {
		c := p.next()
		switch {
		case c == '%':
			if p.i+2 > len(p.s) {
				return nil, p.errorf("short escape")
			}
			n, err := strconv.ParseUint(p.s[p.i:p.i+2], 16, 8)
			if err != nil || strings.ToLower(p.s[p.i:p.i+2]) != p.s[p.i:p.i+2] {
				return nil, p.errorf("bad escape")
			}
			b = append(b, byte(n))
			p.i += 2
		case c == '"':
			return Display(b), nil
		case c < 0x20 || c > 0x7e:
			return nil, p.errorf("byte %#x in a display string", c)
		default:
			b = append(b, c)
		}
	}
	return nil, errors.New("unterminated display string")
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
func isLower(c byte) bool { return 'a' <= c && c <= 'z' }
func isAlpha(c byte) bool { return isLower(c) || 'A' <= c && c <= 'Z' }

// isTchar is RFC 9110's tchar.
func isTchar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
