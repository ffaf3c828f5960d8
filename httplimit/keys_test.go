package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func request(remote string, header http.Header) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	for name, values := range header {
		r.Header[http.CanonicalHeaderKey(name)] = values
	}
	return r
}

func TestClientIP(t *testing.T) {
	proxies := []string{"10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.10", "::ffff:172.16.0.0/108", "64:ff9b::192.168.0.0/112"}
	trusted := ClientIP(proxies...)
	named := func(header string) KeyFunc {
		f, err := NewClientIP(ClientIPConfig{TrustedProxies: proxies, Header: header})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	realIP, fwd, cf := named("x-real-ip"), named("Forwarded"), named("CF-Connecting-IP")
	tests := []struct {
		name    string
		f       KeyFunc
		remote  string
		header  http.Header
		want    string
		wantErr string
	}{
		{name: "v4 with port", remote: "203.0.113.7:4711", want: "ip:203.0.113.7"},
		{name: "v4 without port", remote: "203.0.113.7", want: "ip:203.0.113.7"},
		{name: "v6 keyed on its /64", remote: "[2001:db8:1:2:3:4:5:6]:443", want: "ip:2001:db8:1:2::/64"},
		{name: "v6 without port", remote: "2001:db8:1:2::9", want: "ip:2001:db8:1:2::/64"},
		{name: "v6 in brackets", remote: "[2001:db8:1:2::9]", want: "ip:2001:db8:1:2::/64"},
		{name: "v6 zone dropped", remote: "[fe80::1%eth0]:80", want: "ip:fe80::/64"},
		{name: "v4-mapped unwrapped", remote: "[::ffff:198.51.100.1]:80", want: "ip:198.51.100.1"},
		{name: "NAT64 unwrapped", remote: "[64:ff9b::198.51.100.1]:80", want: "ip:198.51.100.1"},
		{name: "NAT64 in hex unwrapped", remote: "64:ff9b::c633:6401", want: "ip:198.51.100.1"},
		{name: "NAT64 with a zone unwrapped", remote: "[64:ff9b::198.51.100.1%eth0]:80", want: "ip:198.51.100.1"},
		{name: "v4-compatible unwrapped", remote: "[::198.51.100.1]:80", want: "ip:198.51.100.1"},
		{name: "v4-compatible low address unwrapped", remote: "[::2]:80", want: "ip:0.0.0.2"},
		{name: "loopback ::1 stays IPv6", remote: "[::1]:80", want: "ip:::/64"},
		{name: "unspecified :: stays IPv6", remote: "[::]:80", want: "ip:::/64"},
		{name: "NAT64 local-use prefix stays IPv6", remote: "[64:ff9b:1::198.51.100.1]:80", want: "ip:64:ff9b:1::/64"},
		{name: "beyond the NAT64 /96 stays IPv6", remote: "[64:ff9b::1:c633:6401]:80", want: "ip:64:ff9b::/64"},
		{name: "garbage", remote: "not an address", wantErr: "RemoteAddr"},
		{name: "empty", remote: "", wantErr: "RemoteAddr"},
		{name: "unix socket", remote: "@", wantErr: "RemoteAddr"},
		{name: "bad port", remote: "203.0.113.7:http", wantErr: "invalid port"},

		{name: "untrusted peer: headers ignored", f: trusted, remote: "203.0.113.7:1",
			header: http.Header{"X-Forwarded-For": {"198.51.100.1"}, "X-Real-Ip": {"198.51.100.2"}, "Forwarded": {"for=198.51.100.3"}},
			want:   "ip:203.0.113.7"},
		{name: "untrusted peer: garbage headers ignored", f: trusted, remote: "203.0.113.7:1",
			header: http.Header{"X-Forwarded-For": {"garbage"}, "Forwarded": {`for="`}},
			want:   "ip:203.0.113.7"},
		{name: "untrusted peer: garbage Forwarded ignored", f: fwd, remote: "203.0.113.7:1",
			header: http.Header{"Forwarded": {`for="`}}, want: "ip:203.0.113.7"},
		{name: "no trust configured", remote: "10.0.0.1:1",
			header: http.Header{"X-Forwarded-For": {"198.51.100.1"}}, want: "ip:10.0.0.1"},
		{name: "trusted peer without headers", f: trusted, remote: "10.0.0.1:1", want: "ip:10.0.0.1"},

		{name: "XFF: rightmost untrusted", f: trusted, remote: "10.0.0.1:1",
			header: http.Header{"X-Forwarded-For": {"1.1.1.1, 198.51.100.1, 10.0.0.2"}}, want: "ip:198.51.100.1"},
		{name: "XFF: garbage left of the client is never read", f: trusted, remote: "10.0.0.1:1",
			header: http.Header{"X-Forwarded-For": {"garbage, unknown,198.51.100.1"}}, want: "ip:198.51.100.1"},
		{name: "XFF: lines concatenated in order", f: trusted, remote: "10.0.0.1:1",
			header: http.Header{"X-Forwarded-For": {"1.1.1.1, 198.51.100.1", "10.0.0.3", "10.0.0.2"}}, want: "ip:198.51.100.1"},
		{name: "XFF: all trusted, leftmost", f: trusted, remote: "10.0.0.1:1",
			header: http.Header{"X-Forwarded-For": {"10.0.0.9, 192.0.2.10", "10.0.0.2"}}, want: "ip:10.0.0.9"},
		{name: "XFF: empty elements skipped", f: trusted, remote: "10.0.0.1:1",
			header: http.Header{"X-Forwarded-For": {" ,198.51.100.1 , ,"}}, want: "ip:198.51.100.1"},
		{name: "XFF: only empty elements", f: trusted, remote: "10.0.0.1:1",
			header: http.Header{"X-Forwarded-For": {" , "}}, want: "ip:10.0.0.1"},
		{name: "XFF: with ports", f: trusted, remote: "10.0.0.1:1",
			header: http.Header{"X-Forwarded-For": {"[2001:db8:5::1]:443, 10.0.0.2:80"}}, want: "ip:2001:db8:5::/64"},
		{name: "XFF: v6 proxy trusted", f: trusted, remote: "[2001:db8:ffff::1]:1",
			header: http.Header{"X-Forwarded-For": {"2001:db8:7:8::1, 2001:db8:ffff:1::2"}}, want: "ip:2001:db8:7:8::/64"},
		{name: "XFF: v4-mapped client unwrapped", f: trusted, remote: "10.0.0.1:1",
			header: http.Header{"X-Forwarded-For": {"::ffff:198.51.100.1"}}, want: "ip:198.51.100.1"},
		{name: "XFF: v4-mapped peer trusted", f: trusted, remote: "[::ffff:10.0.0.1]:1",
			header: http.Header{"X-Forwarded-For": {"198.51.100.1"}}, want: "ip:198.51.100.1"},
		{name: "XFF: v4-mapped CIDR trusted", f: trusted, remote: "172.16.0.5:1",
			header: http.Header{"X-Forwarded-For": {"198.51.100.1"}}, want: "ip:198.51.100.1"},
		{name: "XFF: NAT64 client unwrapped", f: trusted, remote: "10.0.0.1:1",
			header: http.Header{"X-Forwarded-For": {"64:ff9b::198.51.100.1, [::198.51.100.2]:80"}}, want: "ip:198.51.100.2"},
		{name: "XFF: NAT64 peer trusted", f: trusted, remote: "[64:ff9b::192.168.3.4]:1",
			header: http.Header{"X-Forwarded-For": {"198.51.100.1"}}, want: "ip:198.51.100.1"},
		{name: "XFF: NAT64 CIDR matches the IPv4 peer", f: trusted, remote: "192.168.3.4:1",
			header: http.Header{"X-Forwarded-For": {"198.51.100.1"}}, want: "ip:198.51.100.1"},
		{name: "XFF: unknown where the client should be", f: trusted, remote: "10.0.0.1:1",
			header: http.Header{"X-Forwarded-For": {"198.51.100.1, unknown, 10.0.0.2"}}, wantErr: "unknown"},
		{name: "XFF: garbage where the client should be", f: trusted, remote: "10.0.0.1:1",
			header: http.Header{"X-Forwarded-For": {"198.51.100.1, 1.2.3"}}, wantErr: "X-Forwarded-For"},

		{name: "default: X-Real-IP never read", f: trusted, remote: "10.0.0.1:1",
			header: http.Header{"X-Real-Ip": {"198.51.100.1"}}, want: "ip:10.0.0.1"},
		{name: "default: Forwarded never read", f: trusted, remote: "10.0.0.1:1",
			header: http.Header{"Forwarded": {"for=198.51.100.1"}}, want: "ip:10.0.0.1"},
		{name: "default: CF-Connecting-IP never read", f: trusted, remote: "10.0.0.1:1",
			header: http.Header{"Cf-Connecting-Ip": {"198.51.100.1"}}, want: "ip:10.0.0.1"},
		{name: "default: X-Forwarded-For only", f: trusted, remote: "10.0.0.1:1",
			header: http.Header{"X-Forwarded-For": {"198.51.100.1"}, "X-Real-Ip": {"198.51.100.2"}, "Forwarded": {"for=198.51.100.3"}},
			want:   "ip:198.51.100.1"},

		{name: "X-Real-IP", f: realIP, remote: "10.0.0.1:1",
			header: http.Header{"X-Real-Ip": {"198.51.100.1"}}, want: "ip:198.51.100.1"},
		{name: "X-Real-IP: the client's X-Forwarded-For never read", f: realIP, remote: "10.0.0.1:1",
			header: http.Header{"X-Forwarded-For": {"198.51.100.66"}, "X-Real-Ip": {"198.51.100.1"}}, want: "ip:198.51.100.1"},
		{name: "X-Real-IP absent: the peer, whatever else is sent", f: realIP, remote: "10.0.0.1:1",
			header: http.Header{"X-Forwarded-For": {"198.51.100.66"}, "Forwarded": {"for=198.51.100.67"}}, want: "ip:10.0.0.1"},
		{name: "X-Real-IP from an untrusted peer ignored", f: realIP, remote: "203.0.113.7:1",
			header: http.Header{"X-Real-Ip": {"198.51.100.1"}}, want: "ip:203.0.113.7"},
		{name: "X-Real-IP: unknown", f: realIP, remote: "10.0.0.1:1",
			header: http.Header{"X-Real-Ip": {"unknown"}}, wantErr: "X-Real-Ip"},
		{name: "CF-Connecting-IP", f: cf, remote: "10.0.0.1:1",
			header: http.Header{"X-Forwarded-For": {"198.51.100.66"}, "Cf-Connecting-Ip": {"2001:db8:1:2::1"}}, want: "ip:2001:db8:1:2::/64"},
		{name: "Forwarded: the client's X-Forwarded-For never read", f: fwd, remote: "10.0.0.1:1",
			header: http.Header{"X-Forwarded-For": {"198.51.100.66"}, "X-Real-Ip": {"198.51.100.67"}}, want: "ip:10.0.0.1"},

		{name: "Forwarded", f: fwd, remote: "10.0.0.1:1",
			header: http.Header{"Forwarded": {"for=192.0.2.60;proto=http;by=203.0.113.43"}}, want: "ip:192.0.2.60"},
		{name: "Forwarded: quoted v6 with port", f: fwd, remote: "10.0.0.1:1",
			header: http.Header{"Forwarded": {`For="[2001:db8:cafe::17]:4711"`}}, want: "ip:2001:db8:cafe::/64"},
		{name: "Forwarded: unquoted v6", f: fwd, remote: "10.0.0.1:1",
			header: http.Header{"Forwarded": {`for=2001:db8:cafe::17`}}, want: "ip:2001:db8:cafe::/64"},
		{name: "Forwarded: elements right to left", f: fwd, remote: "10.0.0.1:1",
			header: http.Header{"Forwarded": {`for=198.51.100.9, for=198.51.100.1;proto=https, for="10.0.0.2:80"`}}, want: "ip:198.51.100.1"},
		{name: "Forwarded: lines concatenated", f: fwd, remote: "10.0.0.1:1",
			header: http.Header{"Forwarded": {`for=198.51.100.1`, `for=10.0.0.2`}}, want: "ip:198.51.100.1"},
		{name: "Forwarded: malformed line left of the client is never read", f: fwd, remote: "10.0.0.1:1",
			header: http.Header{"Forwarded": {`for="unterminated`, `for=198.51.100.1`}}, want: "ip:198.51.100.1"},
		{name: "Forwarded: escapes in quoted string", f: fwd, remote: "10.0.0.1:1",
			header: http.Header{"Forwarded": {`proto="h\"t\\p";for="198.51.100.1"`}}, want: "ip:198.51.100.1"},
		{name: "Forwarded: unknown", f: fwd, remote: "10.0.0.1:1",
			header: http.Header{"Forwarded": {"for=198.51.100.1, for=unknown"}}, wantErr: "unknown"},
		{name: "Forwarded: obfuscated", f: fwd, remote: "10.0.0.1:1",
			header: http.Header{"Forwarded": {`for=198.51.100.1, for="_hidden:_port"`}}, wantErr: "obfuscated"},
		{name: "Forwarded: obfuscated port", f: fwd, remote: "10.0.0.1:1",
			header: http.Header{"Forwarded": {`for="198.51.100.1:_x9"`}}, want: "ip:198.51.100.1"},
		{name: "Forwarded: element without for", f: fwd, remote: "10.0.0.1:1",
			header: http.Header{"Forwarded": {"for=198.51.100.1, proto=https"}}, wantErr: "no for="},
		{name: "Forwarded: two for parameters", f: fwd, remote: "10.0.0.1:1",
			header: http.Header{"Forwarded": {"for=198.51.100.1;for=198.51.100.2"}}, wantErr: "two for="},
		{name: "Forwarded: unterminated", f: fwd, remote: "10.0.0.1:1",
			header: http.Header{"Forwarded": {`for="198.51.100.1`}}, wantErr: "unterminated"},
		{name: "Forwarded: malformed", f: fwd, remote: "10.0.0.1:1",
			header: http.Header{"Forwarded": {`for 198.51.100.1`}}, wantErr: "malformed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.f
			if f == nil {
				f = ClientIP()
			}
			got, err := f(request(tt.remote, tt.header))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %q, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestNewClientIP(t *testing.T) {
	onlyForwarded, err := NewClientIP(ClientIPConfig{
		TrustedProxies: []string{"10.0.0.0/8"},
		Header:         "forwarded",
		IPv6Prefix:     48,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := request("10.0.0.1:1", http.Header{
		"X-Forwarded-For": {"198.51.100.1"}, // not set by this proxy: ignored
		"Forwarded":       {`for="[2001:db8:1:2::1]"`},
	})
	if got, err := onlyForwarded(r); err != nil || got != "ip:2001:db8:1::/48" {
		t.Errorf("Header: Forwarded, IPv6Prefix: 48: got %q, %v", got, err)
	}

	full, err := NewClientIP(ClientIPConfig{IPv6Prefix: 128})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := full(request("[2001:db8::1]:1", nil)); err != nil || got != "ip:2001:db8::1" {
		t.Errorf("IPv6Prefix 128: got %q, %v", got, err)
	}

	for _, cfg := range []ClientIPConfig{
		{TrustedProxies: []string{"10.0.0.0/33"}},
		{TrustedProxies: []string{"10.0.0"}},
		{TrustedProxies: []string{""}},
		{IPv6Prefix: 129},
		{IPv6Prefix: -1},
		{Header: "X-Real-IP, X-Forwarded-For"},
		{Header: "X Real IP"},
		{Header: "X-Real-IP:"},
	} {
		if _, err := NewClientIP(cfg); err == nil {
			t.Errorf("NewClientIP(%+v) = nil error", cfg)
		}
	}

	defer func() {
		if recover() == nil {
			t.Error("ClientIP with an invalid CIDR did not panic")
		}
	}()
	ClientIP("10.0.0.0/8", "bogus")
}

func TestHeaderKey(t *testing.T) {
	f := HeaderKey("x-api-key")
	if got, err := f(request("203.0.113.7:1", http.Header{"X-Api-Key": {"k1"}})); err != nil || got != "x-api-key:k1" {
		t.Errorf("got %q, %v", got, err)
	}
	for _, h := range []http.Header{nil, {"X-Api-Key": {""}}} {
		if got, err := f(request("203.0.113.7:1", h)); err == nil || !strings.Contains(err.Error(), "X-Api-Key") {
			t.Errorf("header %v: got %q, %v; want an error naming the header", h, got, err)
		}
	}
}
