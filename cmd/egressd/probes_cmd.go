package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

func init() { commands["probes"] = cmdProbes }

// defaultAdmin is listen.admin's default.
const defaultAdmin = "127.0.0.1:9090"

// cmdProbes lists the open in-sandbox leak incidents of a running serve,
// or acknowledges one, through its admin endpoint (loopback only):
//
//	egressd probes [--admin ADDR] incidents
//	egressd probes [--admin ADDR] ack IDENTITY
//
// A leak an in-sandbox probe reports stays an open incident, whatever the
// sandbox reports later, until an operator acknowledges it here.
func cmdProbes(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("probes", stderr)
	admin := fs.String("admin", defaultAdmin, "the admin endpoint of the running egressd (listen.admin)")
	pos, err := parseFlags(fs, args)
	usage := func() int {
		fmt.Fprintln(stderr, "usage: egressd probes [--admin ADDR] incidents | ack IDENTITY")
		return exitUsage
	}
	if err != nil || len(pos) == 0 {
		return usage()
	}
	var method, path string
	switch {
	case pos[0] == "incidents" && len(pos) == 1:
		method, path = http.MethodGet, "/probes/incidents"
	case pos[0] == "ack" && len(pos) == 2 && pos[1] != "":
		method, path = http.MethodPost, "/probes/"+url.PathEscape(pos[1])+"/ack"
	default:
		return usage()
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+*admin+path, nil)
	if err != nil {
		fmt.Fprintf(stderr, "egressd probes: %v\n", err)
		return exitUsage
	}
	c := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}} // never through a proxy
	resp, err := c.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "egressd probes: %v\n", err)
		return exitDeny
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&out); err != nil {
		fmt.Fprintf(stderr, "egressd probes: %s %s: %s: %v\n", method, path, resp.Status, err)
		return exitDeny
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	enc.Encode(out)
	if resp.StatusCode/100 != 2 {
		fmt.Fprintf(stderr, "egressd probes: %s %s: %s\n", method, path, resp.Status)
		return exitDeny
	}
	return exitOK
}
