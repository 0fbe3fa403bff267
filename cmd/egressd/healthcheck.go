package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

func init() { commands["healthcheck"] = cmdHealthcheck }

// defaultHealthURL is the admin endpoint's readiness on the default listen.admin.
const defaultHealthURL = "http://127.0.0.1:9090/readyz"

// cmdHealthcheck is curl for images that have none (distroless): GET URL,
// exit 0 on a 2xx answer and 1 on anything else, as Docker's HEALTHCHECK
// expects.
func cmdHealthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("healthcheck", stderr)
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	pos, err := parseFlags(fs, args)
	if err != nil || len(pos) > 1 {
		fmt.Fprintf(stderr, "usage: egressd healthcheck [--timeout D] [URL]   (default %s)\n", defaultHealthURL)
		return exitUsage
	}
	target := defaultHealthURL
	if len(pos) == 1 {
		target = pos[0]
	}
	if u, err := url.Parse(target); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		fmt.Fprintf(stderr, "egressd healthcheck: %q: want an http(s) URL\n", target)
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		fmt.Fprintf(stderr, "egressd healthcheck: %v\n", err)
		return exitUsage
	}
	c := &http.Client{
		// never through a proxy from the environment, never elsewhere
		Transport:     &http.Transport{Proxy: nil, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := c.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "egressd healthcheck: %v\n", err)
		return exitDeny
	}
	defer resp.Body.Close()
	first, _ := bufio.NewReader(io.LimitReader(resp.Body, 512)).ReadString('\n')
	first = strings.TrimSpace(first)
	if resp.StatusCode/100 != 2 {
		fmt.Fprintf(stderr, "egressd healthcheck: %s: %s: %s\n", target, resp.Status, first)
		return exitDeny
	}
	fmt.Fprintf(stdout, "%s: %s: %s\n", target, resp.Status, first)
	return exitOK
}
