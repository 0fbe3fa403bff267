//go:build linux

package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// unitBoundingSet reads CapabilityBoundingSet from the shipped systemd
// unit, in setpriv's syntax: "-all,+net_admin,...".
func unitBoundingSet(t *testing.T, drop string) string {
	t.Helper()
	b, err := os.ReadFile("../../configs/egressd.service")
	if err != nil {
		t.Fatal(err)
	}
	var caps []string
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "CapabilityBoundingSet="); ok {
			caps = strings.Fields(v) // the last assignment wins
		}
	}
	if len(caps) == 0 {
		t.Fatal("the unit has no CapabilityBoundingSet")
	}
	set := []string{"-all"}
	for _, c := range caps {
		if c != drop {
			set = append(set, "+"+strings.ToLower(strings.TrimPrefix(c, "CAP_")))
		}
	}
	return strings.Join(set, ",")
}

// TestServeUnderUnitCapabilities runs `serve --walls` with the self-test
// on, as the systemd unit runs it: the unit's capability bounding set,
// no inheritable capabilities and no_new_privs (setpriv), /proc/sys
// read-only (ProtectKernelTunables=yes), in the gateway
// namespace of a test topology. The boot self-test is sealed; without
// CAP_SYS_ADMIN (the unit as it was) it cannot build its probe namespace,
// without CAP_NET_RAW it cannot send the ICMP probes, and /readyz stays 503.
func TestServeUnderUnitCapabilities(t *testing.T) {
	t.Parallel()
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv not installed")
	}
	tests := []struct {
		name   string
		drop   string
		status int
		want   string
		until  string // the log line that ends the boot run
	}{
		{"unit bounding set", "", 200, "ready: last self-test sealed", `"msg":"ready"`},
		{"without CAP_SYS_ADMIN", "CAP_SYS_ADMIN", 503, "create probe namespace", `"msg":"not ready"`},
		{"without CAP_NET_RAW", "CAP_NET_RAW", 503, "listen ip4:icmp", `"msg":"not ready"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := newSTLab(t)
			// /proc/sys read-only, as ProtectKernelTunables=yes makes it (in
			// the private mount namespace nsexec gives the command), then
			// the unit's capabilities and no_new_privs.
			l.wrap = []string{"/bin/sh", "-c", `mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys && exec "$@"`, "sh",
				setpriv, "--no-new-privs", "--bounding-set=" + unitBoundingSet(t, tt.drop), "--inh-caps=-all", "--"}
			l.until = tt.until
			l.startServe(t)
			code, body := l.readyz(t)
			if code != tt.status || !strings.Contains(body, tt.want) {
				t.Fatalf("/readyz: %d %q, want %d %q\n%s", code, body, tt.status, tt.want, l.serve.logs.String())
			}
		})
	}
}
