package config_test

import (
	"fmt"
	"log"
	"path/filepath"
	"testing"

	"github.com/ratekeeper/ratekeeper/server/config"
)

func Example() {
	c, err := config.Load(filepath.Join("..", "examples", "config.yaml"))
	if err != nil {
		log.Fatal(err)
	}
	for _, entries := range [][]config.Entry{
		{{Key: "remote_address", Value: "10.0.0.1"}},
		{{Key: "path", Value: "/login"}},
		{{Key: "path", Value: "/api/users"}},
		{{Key: "plan", Value: "free"}, {Key: "user", Value: "alice"}},
		{{Key: "plan", Value: "enterprise"}, {Key: "user", Value: "bob"}},
		{{Key: "api_key", Value: "k-123"}},
		{{Key: "path", Value: "/"}},
	} {
		r := c.Lookup("example", entries)
		switch {
		case r == nil:
			fmt.Printf("%v: no rule\n", entries)
		case r.Unlimited:
			fmt.Printf("%v: %s, unlimited\n", entries, r.Name)
		default:
			fmt.Printf("%v: %s,", entries, r.Name)
			for _, l := range r.Limits {
				fmt.Printf(" %s: %d per %v", l.Name, l.RequestsPerUnit, l.Period)
				if l.Algorithm != "" {
					fmt.Printf(" (%s)", l.Algorithm)
				}
			}
			if r.Shadow {
				fmt.Print(" (shadow)")
			}
			fmt.Println()
		}
	}
	// Output:
	// [{remote_address 10.0.0.1}]: remote_address, minute: 100 per 1m0s
	// [{path /login}]: login, minute: 5 per 1m0s
	// [{path /api/users}]: path_/api/*, second: 1000 per 1s (shadow)
	// [{plan free} {user alice}]: plan_free.user, hour: 50 per 1h0m0s
	// [{plan enterprise} {user bob}]: plan_enterprise.user, unlimited
	// [{api_key k-123}]: api_key, per_second: 10 per 1s (gcra) per_quarter_hour: 2000 per 15m0s (sliding_window_counter)
	// [{path /}]: no rule
}

// TestExampleConfig keeps the example configuration valid and free of
// warnings.
func TestExampleConfig(t *testing.T) {
	c, err := config.Load(filepath.Join("..", "examples", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("warnings: %v", w)
	}
	for _, r := range []*config.Rule{
		c.Lookup("example", []config.Entry{{Key: "api_key", Value: "k"}}),
		c.Lookup("example", []config.Entry{{Key: "remote_address", Value: "a"}}),
	} {
		if r.Policy() == nil {
			t.Errorf("%s: no policy", r.Name)
		} else if _, err := r.Policy().Spec(); err != nil {
			t.Errorf("%s: %v", r.Name, err)
		}
	}
}
