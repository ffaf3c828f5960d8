package clientip

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// A walk reads the addresses of a forwarding header from right to left,
// the order in which proxies appended them, and stops at the first one
// that is not a trusted proxy. Several lines of a header are one list, in
// order; each line is parsed only if the walk reaches it, so what a client
// wrote further left is never read.
type walk struct {
	trusts func(netip.Addr) bool
	addr   netip.Addr // the last address visited
	done   bool       // addr is not trusted
}

func (w *walk) visit(node string) error {
	a, err := ParseNode(node)
	if err != nil {
		return err
	}
	w.addr, w.done = a, !w.trusts(a)
	return nil
}

// list walks lines of comma-separated addresses, such as X-Forwarded-For.
func (w *walk) list(lines []string) error {
	for i := len(lines) - 1; i >= 0 && !w.done; i-- {
		rest := lines[i]
		for rest != "" && !w.done {
			j := strings.LastIndexByte(rest, ',')
			entry := strings.Trim(rest[j+1:], " \t")
			rest = rest[:max(j, 0)]
			if entry == "" {
				continue // empty list elements are allowed, and mean nothing
			}
			if err := w.visit(entry); err != nil {
				return err
			}
		}
	}
	return nil
}

// forwarded walks lines of a Forwarded header.
func (w *walk) forwarded(lines []string) error {
	for i := len(lines) - 1; i >= 0 && !w.done; i-- {
		nodes, err := forwardedFor(lines[i])
		if err != nil {
			return err
		}
		for j := len(nodes) - 1; j >= 0 && !w.done; j-- {
			if nodes[j] == "" {
				return errors.New("an element has no for= address")
			}
			if err := w.visit(nodes[j]); err != nil {
				return err
			}
		}
	}
	return nil
}

// forwardedFor returns the for= value of each element of a Forwarded field
// line (RFC 7239), "" for an element without one. Unquoted values run to
// the next delimiter, since some proxies write IPv6 addresses unquoted;
// ParseNode checks them later.
func forwardedFor(line string) ([]string, error) {
	var nodes []string
	s := line
	for {
		var node string
		pairs, seen := 0, false
		for { // the pairs of one element
			s = strings.TrimLeft(s, " \t")
			if s == "" || s[0] == ',' {
				break
			}
			if s[0] == ';' {
				s = s[1:]
				continue
			}
			i := 0
			for i < len(s) && isTchar(s[i]) {
				i++
			}
			if i == 0 || i == len(s) || s[i] != '=' {
				return nil, fmt.Errorf("malformed element at %q", s)
			}
			name := s[:i]
			pairs++
			value, rest, err := forwardedValue(s[i+1:])
			if err != nil {
				return nil, err
			}
			s = strings.TrimLeft(rest, " \t")
			if strings.EqualFold(name, "for") {
				if seen {
					return nil, errors.New("an element has two for= parameters")
				}
				node, seen = value, true
			}
			if s != "" && s[0] != ';' && s[0] != ',' {
				return nil, fmt.Errorf("malformed element at %q", s)
			}
		}
		if pairs > 0 { // else an empty list element, which means nothing
			nodes = append(nodes, node)
		}
		if s == "" {
			return nodes, nil
		}
		s = s[1:] // ','
	}
}

// forwardedValue reads a token or quoted-string value from the start of s,
// and returns it unquoted with the rest of s.
func forwardedValue(s string) (value, rest string, err error) {
	if s == "" || s[0] != '"' {
		i := strings.IndexAny(s, ";,\" \t")
		if i < 0 {
			i = len(s)
		}
		return s[:i], s[i:], nil
	}
	var b []byte
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '"':
			return string(b), s[i+1:], nil
		case '\\':
			if i++; i == len(s) {
				return "", "", errors.New("unterminated quoted string")
			}
		}
		b = append(b, s[i])
	}
	return "", "", errors.New("unterminated quoted string")
}

// isTchar reports whether c may appear in an HTTP token (RFC 9110).
func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// IsToken reports whether s is an HTTP token (RFC 9110), such as a header
// name.
func IsToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTchar(s[i]) {
			return false
		}
	}
	return true
}
