package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

func TestRunRejects(t *testing.T) {
	env := func(string) string { return "" }
	for _, args := range [][]string{
		{"-redis", closedURL(t)},
		{"-addr", "127.0.0.1:0", "extra"},
		{"-nope"},
	} {
		if err := run(context.Background(), args, env, slog.New(slog.DiscardHandler)); err == nil {
			t.Errorf("run %q: no error", args)
		}
	}
	// REDIS_URL counts as explicit too.
	url := closedURL(t)
	err := run(context.Background(), []string{"-addr", "127.0.0.1:0"},
		func(k string) string { return map[string]string{"REDIS_URL": url}[k] }, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "cannot reach Redis") {
		t.Errorf("run with an unreachable REDIS_URL: %v", err)
	}
}

// TestRunServes starts the server on PORT and stops it as a signal would.
func TestRunServes(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	env := map[string]string{"PORT": port}
	if addr := os.Getenv(redistest.EnvAddr); addr != "" {
		env["REDIS_URL"] = "redis://" + addr
	}
	var logs testutil.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, nil, func(k string) string { return env[k] }, slog.New(slog.NewTextHandler(&logs, nil)))
	}()

	url := "http://127.0.0.1:" + port + "/state"
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /state: %s", resp.Status)
			}
			break
		}
		select {
		case err := <-done:
			t.Fatalf("run returned %v; log:\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer on port %s: %v; log:\n%s", port, err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(shutdownTimeout + time.Second):
		t.Fatal("no shutdown")
	}
	for _, want := range []string{"serving on http://localhost:" + port, "shutting down"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, logs.String())
		}
	}
}
