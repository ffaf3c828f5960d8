package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log"
	"net"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// closedURL returns the URL of a local port where nothing listens.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "redis://user:s3cret@" + addr
}

func TestConnectExplicitUnreachable(t *testing.T) {
	var logs bytes.Buffer
	be, err := connect(context.Background(), closedURL(t), closedURL(t), log.New(&logs, "", 0))
	if err == nil {
		be.close()
		t.Fatal("connected to a Redis that is not there")
	}
	if !strings.Contains(err.Error(), "cannot reach Redis at redis://user:xxxxx@127.0.0.1:") {
		t.Errorf("error %q", err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("the error shows the password: %q", err)
	}
}

func TestConnectInvalidURL(t *testing.T) {
	for _, u := range []string{"http://user:s3cret@localhost:6379", "redis://user:s3 cret@localhost", "redis://localhost/notadb"} {
		_, err := connect(context.Background(), u, closedURL(t), log.New(io.Discard, "", 0))
		if err == nil || !strings.Contains(err.Error(), "invalid Redis URL") || strings.Contains(err.Error(), "s3") {
			t.Errorf("%s: %v", u, err)
		}
	}
}

func TestConnectFallback(t *testing.T) {
	var logs bytes.Buffer
	be, err := connect(context.Background(), "", closedURL(t), log.New(&logs, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	defer be.close()
	if be.kind != backendMemory || be.addr != "" {
		t.Errorf("backend %q at %q, want the in-process store", be.kind, be.addr)
	}
	if !strings.Contains(logs.String(), "using the in-process store; set REDIS_URL to share limits across servers") {
		t.Errorf("log %q", logs.String())
	}
	if st := getState(t, newTestServer(t, be)); st.Backend != "memory" || st.RedisAddr != "" {
		t.Errorf("state %+v", st)
	}
}

func TestConnectRedis(t *testing.T) {
	addr := redistest.Addr(t)
	for _, tt := range []struct{ explicit, probe string }{
		{"redis://" + addr, ""},
		{"", "redis://" + addr + "/0"},
	} {
		be, err := connect(context.Background(), tt.explicit, tt.probe, log.New(io.Discard, "", 0))
		if err != nil {
			t.Fatal(err)
		}
		if be.kind != backendRedis || be.addr != addr {
			t.Errorf("%+v: backend %q at %q", tt, be.kind, be.addr)
		}
		be.close()
	}
}

// TestConnectCredentials connects as a user with a password, on a Redis of
// its own so that the user it adds disturbs no other test.
func TestConnectCredentials(t *testing.T) {
	srv := redistest.StartServer(t)
	var b [8]byte
	rand.Read(b[:])
	password := hex.EncodeToString(b[:])
	ctx := context.Background()
	if err := srv.Client().Do(ctx, "ACL", "SETUSER", "demo", "on", ">"+password, "~*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	be, err := connect(ctx, "redis://demo:"+password+"@"+srv.Addr+"/0", "", log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	s := newTestServer(t, be)
	if st := getState(t, s); st.Backend != "redis" {
		t.Errorf("state %+v", st)
	}
	be.close()

	_, err = connect(ctx, "redis://demo:wrong@"+srv.Addr, "", log.New(io.Discard, "", 0))
	if err == nil || !strings.Contains(err.Error(), "WRONGPASS") || strings.Contains(err.Error(), "wrong@") {
		t.Errorf("a wrong password: %v", err)
	}
}
