package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestShouldRateLimit checks that every call is OK, with one OK status per
// descriptor, over gRPC.
func TestShouldRateLimit(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer()
	go srv.Serve(lis)
	defer srv.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := rlsv3.NewRateLimitServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, n := range []int{0, 1, 3} {
		req := &rlsv3.RateLimitRequest{Domain: "d"}
		for range n {
			req.Descriptors = append(req.Descriptors, &rlcommon.RateLimitDescriptor{
				Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}},
			})
		}
		resp, err := client.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(resp.GetStatuses()) != n {
			t.Fatalf("%d descriptors: %v", n, resp)
		}
		for _, s := range resp.GetStatuses() {
			if s.GetCode() != rlsv3.RateLimitResponse_OK {
				t.Errorf("%d descriptors: status %v", n, s)
			}
		}
	}
}

func TestFlags(t *testing.T) {
	g, h, err := parseFlags([]string{"-grpc-addr", "127.0.0.1:1", "-http-addr", ""}, new(bytes.Buffer))
	if err != nil || g != "127.0.0.1:1" || h != "" {
		t.Errorf("parseFlags = %q, %q, %v", g, h, err)
	}
	if _, _, err := parseFlags([]string{"-h"}, new(bytes.Buffer)); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
	if _, _, err := parseFlags([]string{"extra"}, new(bytes.Buffer)); err == nil {
		t.Error("an argument: no error")
	}
}
