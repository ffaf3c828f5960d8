package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
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
	be, err := connect(context.Background(), closedURL(t), closedURL(t), slog.New(slog.NewTextHandler(&logs, nil)))
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
		_, err := connect(context.Background(), u, closedURL(t), slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), "invalid Redis URL") || strings.Contains(err.Error(), "s3") {
			t.Errorf("%s: %v", u, err)
		}
	}
}

func TestConnectFallback(t *testing.T) {
	var logs bytes.Buffer
	be, err := connect(context.Background(), "", closedURL(t), slog.New(slog.NewTextHandler(&logs, nil)))
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
		be, err := connect(context.Background(), tt.explicit, tt.probe, slog.New(slog.DiscardHandler))
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
	be, err := connect(ctx, "redis://demo:"+password+"@"+srv.Addr+"/0", "", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s := newTestServer(t, be)
	if st := getState(t, s); st.Backend != "redis" {
		t.Errorf("state %+v", st)
	}
	be.close()

	_, err = connect(ctx, "redis://demo:wrong@"+srv.Addr, "", slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "WRONGPASS") || strings.Contains(err.Error(), "wrong@") {
		t.Errorf("a wrong password: %v", err)
	}
}

// TestRedisDown kills the demo's Redis mid-session: requests, resets and
// the state fail promptly with a message that names Redis, the state still
// tells the policy, the log holds one line per kind of failure however
// many there are, and everything recovers when Redis is back.
func TestRedisDown(t *testing.T) {
	srv := redistest.StartServer(t)
	var logs testutil.SyncBuffer
	logger := newLogger(&logs)
	redis.SetLogger(redisLogger{logger})
	t.Cleanup(func() { redis.SetLogger(redisLogger{slog.Default()}) })
	be, err := connect(context.Background(), "redis://"+srv.Addr, "", logger)
	if err != nil {
		t.Fatal(err)
	}
	defer be.close()
	s, err := newServer(be, defaultConfig(), logger)
	if err != nil {
		t.Fatal(err)
	}
	postConfig(t, s, "", "capacity=3&refill_rate=1&refill_interval=3600")
	if w := do(t, s, http.MethodPost, "/test", "", ""); w.Code != http.StatusOK {
		t.Fatalf("POST /test with Redis up: %d %s", w.Code, w.Body)
	}

	srv.Stop()
	want := "Redis at " + srv.Addr + " is not answering"
	// Generous: the point is no wait of seconds per request.
	const failWithin = 2500 * time.Millisecond
	var slowest time.Duration
	for range 8 {
		for _, req := range []struct{ method, path string }{{"POST", "/test"}, {"GET", "/state"}, {"POST", "/reset"}} {
			start := time.Now()
			w := do(t, s, req.method, req.path, "", "")
			took := time.Since(start)
			slowest = max(slowest, took)
			if took > failWithin {
				t.Errorf("%s %s with Redis down took %v", req.method, req.path, took)
			}
			if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), want) {
				t.Fatalf("%s %s with Redis down: %d %s", req.method, req.path, w.Code, w.Body)
			}
		}
	}
	t.Logf("slowest failure with Redis down: %v", slowest)
	w := do(t, s, http.MethodGet, "/state", "", "")
	var st stateReply
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	if st.StoreOK || st.Decision != nil || st.Config.value("capacity") != 3 || st.Backend != backendRedis || st.RedisAddr != srv.Addr {
		t.Errorf("GET /state with Redis down: %s", w.Body)
	}
	// 25 failures, each logged by the server or go-redis: a line or two of
	// each kind, all in one format.
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) > 10 {
		t.Errorf("%d log lines for 25 failures:\n%s", len(lines), logs.String())
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "time=") {
			t.Errorf("a log line not in slog's format: %q", l)
		}
	}

	srv.Restart()
	back := time.Now()
	deadline := time.Now().Add(10 * time.Second)
	defer func() { t.Logf("recovered %v after the restart; log:\n%s", time.Since(back), logs.String()) }()
	for {
		w := do(t, s, http.MethodPost, "/test", "", "")
		if w.Code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("POST /test 10 s after Redis is back: %d %s", w.Code, w.Body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st := getState(t, s); !st.StoreOK || st.Limit != 3 {
		t.Errorf("GET /state after Redis is back: %+v", st)
	}
}
