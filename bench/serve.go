//go:build linux

package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/egressd/egressd/ca"
	"github.com/egressd/egressd/daemon"
	"github.com/egressd/egressd/policy"
)

// serveEgressd is `egressd serve --no-selftest` wired the same way
// (cmd/egressd/serve.go) plus a pprof listener, so a profile shows the
// proxy process alone under the bench's load.
func serveEgressd(args []string) error {
	fs := flag.NewFlagSet("serve-egressd", flag.ContinueOnError)
	cfg := fs.String("config", "", "config file")
	state := fs.String("state-dir", "", "state directory (CA)")
	pp := fs.String("pprof", "127.0.0.1:0", "pprof listen address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	authority, err := ca.LoadOrCreate(filepath.Join(*state, "ca"))
	if err != nil {
		return err
	}
	d, err := daemon.New(daemon.Options{
		Load:            func() (*policy.Policy, error) { return policy.Load(*cfg) },
		Logger:          log,
		CA:              authority,
		NoSelftest:      true,
		AllowUnverified: true,
	})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", *pp)
	if err != nil {
		return fmt.Errorf("listen pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	go (&http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}).Serve(l)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return d.Run(ctx, nil)
}
