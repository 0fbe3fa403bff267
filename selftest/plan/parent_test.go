package plan

import (
	"slices"
	"strings"
	"testing"

	"github.com/egressd/egressd/policy"
)

// TestParentControls (issue 23 item 4): with an upstream proxy, the
// self-test's positive controls cover each scheme and port the rules reach
// through it: an apt mirror on plain HTTP gets an http control on port 80,
// so a parent that allows only 443 fails the self-test as it fails apt.
func TestParentControls(t *testing.T) {
	const base = `version: 1
%PARENT%allow:
  - name: pypi
    hosts: [pypi.example]
    ports: [443]
    mirror: pypi
  - name: apt
    hosts: [deb.example]
    ports: [80, 443]
    mirror: apt
  - name: nexus-npm
    hosts: [nexus.example]
    ports: [80]
    mirror: npm
    base_path: /repository/npm-proxy
selftest:
  expect_reachable: [%CONTROLS%]
`
	parent := "upstream_proxy:\n  address: 10.9.9.9:3128\n"
	for _, tc := range []struct {
		name, parent, controls string
		want                   []string
	}{
		{"https control only", parent, "https://pypi.example/simple/", []string{"https://pypi.example/simple/", "http://deb.example/dists/stable/Release"}},
		{"both covered", parent, "https://pypi.example/simple/, http://deb.example/dists/stable/InRelease", []string{"https://pypi.example/simple/", "http://deb.example/dists/stable/InRelease"}},
		{"no control at all", parent, "", []string{"http://deb.example/dists/stable/Release", "https://pypi.example/simple/"}},
		{"no parent", "", "https://pypi.example/simple/", []string{"https://pypi.example/simple/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := strings.ReplaceAll(strings.ReplaceAll(base, "%PARENT%", tc.parent), "%CONTROLS%", tc.controls)
			p := mustPolicy(t, cfg)
			got := Derive(p, nil).ExpectReachable
			if !slices.Equal(got, tc.want) {
				t.Errorf("controls %v, want %v", got, tc.want)
			}
			for _, u := range got {
				tg, err := policy.ParseURL(u)
				if err != nil {
					t.Fatal(err)
				}
				if d := p.DecideRequest(&tg, "GET", "", 0); !d.Allow {
					t.Errorf("control %s is refused by its own policy: %s %s", u, d.Reason, d.Detail)
				}
			}
		})
	}
}

// TestPublishProbeUnderBasePath: a mirror rule with a base_path is probed
// with its ecosystem's publish under that prefix, where the repository
// is, so the grammar (not the prefix check) must refuse it.
func TestPublishProbeUnderBasePath(t *testing.T) {
	p := mustPolicy(t, `version: 1
allow:
  - name: nexus-npm
    hosts: [nexus.example]
    mirror: npm
    base_path: /repository/npm-hosted
`)
	var found bool
	for _, q := range Derive(p, nil).Refused {
		if q.ID == "mirror-publish/nexus-npm" {
			found = true
			if q.URL != "https://nexus.example/repository/npm-hosted/egressd-selftest" || q.Method != "PUT" || q.Reason != "mirror" {
				t.Errorf("publish probe %+v, want PUT under the base_path refused by the grammar", q)
			}
		}
	}
	if !found {
		t.Error("no publish probe for the base_path rule")
	}
}
