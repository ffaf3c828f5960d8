package main

import (
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"time"

	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/server"
)

// serviceFlags are the flags that bound the service's resources and
// waits, and -version.
type serviceFlags struct {
	storeTimeout time.Duration
	memKeys      int
	version      bool
}

func (f *serviceFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&f.storeTimeout, "store-timeout", server.DefaultStoreTimeout,
		"the longest the store may take to decide a request; it gets at most 3/4 of the caller's remaining deadline too, so that -on-store-error answers in time while Redis hangs")
	fs.IntVar(&f.memKeys, "memstore-max-keys", memstore.DefaultMaxKeys,
		"without Redis, the most keys kept in process (each about 300 B of heap and its name, up to twice that in RSS); the least useful is evicted beyond it")
	fs.BoolVar(&f.version, "version", false, "print the version and exit")
}

// check lists the values that cannot work.
func (f *serviceFlags) check() []error {
	var errs []error
	if f.storeTimeout <= 0 {
		errs = append(errs, fmt.Errorf("-store-timeout must be above 0, not %v", f.storeTimeout))
	}
	if f.memKeys <= 0 {
		errs = append(errs, fmt.Errorf("-memstore-max-keys must be above 0, not %d", f.memKeys))
	}
	return errs
}

// version is the module's version as built (go install …@v1.2.3), else
// "devel".
func version() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "devel"
}

// printVersion answers -version.
func printVersion(w io.Writer) {
	fmt.Fprintln(w, "ratekeeper-server", version())
}
