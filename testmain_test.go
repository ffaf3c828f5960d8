package ratekeeper_test

import (
	"os"
	"testing"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// TestMain says how many tests skipped for want of Redis.
func TestMain(m *testing.M) { os.Exit(redistest.Run(m)) }
