package main

import (
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
)

// TestReadmeCurl runs the README's curl lines for the demo's API, in
// order, against the demo's handler: each must get the answer its
// comment promises, not a 400 from a field the previous line made
// meaningless.
func TestReadmeCurl(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := readmeCurlLines(t, string(readme))
	if len(lines) < 5 {
		t.Fatalf("found %d curl lines for the demo in the README", len(lines))
	}
	h := newTestServer(t, memoryBackend(t))
	for _, line := range lines {
		method, path, contentType, body := parseCurl(t, line)
		w := do(t, h, method, path, contentType, body)
		if w.Code != http.StatusOK && w.Code != http.StatusTooManyRequests {
			t.Errorf("%s\n→ %d %s", line, w.Code, w.Body.String())
		}
	}
}

// readmeCurlLines returns the commands of the README's sh block that
// follows "also usable with curl", continuation lines joined.
func readmeCurlLines(t *testing.T, readme string) []string {
	_, after, ok := strings.Cut(readme, "also usable with curl:")
	if !ok {
		t.Fatal("the README has no curl block for the demo")
	}
	_, block, _ := strings.Cut(after, "```sh\n")
	block, _, _ = strings.Cut(block, "```")
	var lines []string
	var cur string
	for _, l := range strings.Split(block, "\n") {
		cur += strings.TrimSpace(l)
		if strings.HasSuffix(cur, "\\") {
			cur = strings.TrimSuffix(cur, "\\") + " "
			continue
		}
		if cur != "" {
			lines = append(lines, cur)
		}
		cur = ""
	}
	return lines
}

// parseCurl reads the few curl options the README uses: -X, -H, -d
// (form fields, or a JSON body with a JSON content type), and the URL.
func parseCurl(t *testing.T, line string) (method, path, contentType, body string) {
	words := shellWords(line)
	if len(words) == 0 || words[0] != "curl" {
		t.Fatalf("not a curl line: %s", line)
	}
	method = http.MethodGet
	form := url.Values{}
	var data []string
	for i := 1; i < len(words); i++ {
		switch w := words[i]; w {
		case "-X":
			i++
			method = words[i]
		case "-H":
			i++
			if k, v, ok := strings.Cut(words[i], ":"); ok && strings.EqualFold(k, "Content-Type") {
				contentType = strings.TrimSpace(v)
			}
		case "-d":
			i++
			data = append(data, words[i])
			if method == http.MethodGet {
				method = http.MethodPost
			}
		default:
			if strings.HasPrefix(w, "-") {
				t.Fatalf("curl option %s not understood: %s", w, line)
			}
			u, err := url.Parse("http://" + strings.TrimPrefix(w, "http://"))
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			path = u.Path
		}
	}
	if contentType == "" && len(data) > 0 {
		contentType = "application/x-www-form-urlencoded"
		for _, d := range data {
			k, v, _ := strings.Cut(d, "=")
			form.Add(k, v)
		}
		return method, path, contentType, form.Encode()
	}
	return method, path, contentType, strings.Join(data, "&")
}

// shellWords splits a line into words as sh would for the README's
// lines: spaces separate, single quotes group, and a word that starts
// with # begins a comment.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	inQuote, inWord := false, false
	for _, r := range line {
		switch {
		case r == '\'':
			inQuote, inWord = !inQuote, true
		case r == '#' && !inQuote && !inWord:
			return words
		case r == ' ' && !inQuote:
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
			}
			inWord = false
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// TestDefaultAddr: the demo listens on loopback unless told otherwise,
// and not on ratekeeper-server's HTTP port, so the two run side by side.
func TestDefaultAddr(t *testing.T) {
	host, port, err := net.SplitHostPort(defaultAddr)
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Errorf("default address %s is not loopback", defaultAddr)
	}
	if port == "8080" || port == "8081" {
		t.Errorf("default port %s is ratekeeper-server's", port)
	}
	if got := listening(&net.TCPAddr{IP: net.IPv4zero, Port: 80}); got != "0.0.0.0:80 (every interface)" {
		t.Errorf("listening(0.0.0.0:80) = %q", got)
	}
}
