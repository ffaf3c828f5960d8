package quota

import (
	"os"
	"testing"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// TestMain reports the tests that skipped for want of Redis.
func TestMain(m *testing.M) { os.Exit(redistest.Run(m)) }
