package sandbox

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
)

// NSExecArg is the first argument that makes a re-executed egressd run
// [NSExecMain]: /proc/self/exe __nsexec [FLAGS] NSPATH RESOLVCONF -- CMD ARGS.
const NSExecArg = "__nsexec"

// WriteResolvConf writes dir/resolv.conf naming dns as the only
// nameserver, readable by everyone (the command may run unprivileged), and
// returns its path, for [NSExecCommand] to bind-mount over /etc/resolv.conf.
func WriteResolvConf(dir string, dns netip.Addr) (string, error) {
	if !dns.IsValid() || dns.Zone() != "" {
		return "", fmt.Errorf("sandbox: write resolv.conf: invalid nameserver %s", dns)
	}
	p := filepath.Join(dir, "resolv.conf")
	body := "# written by egressd: the sandbox's only resolver\nnameserver " + dns.Unmap().String() + "\n"
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		return "", fmt.Errorf("sandbox: write resolv.conf: %w", err)
	}
	// WriteFile keeps the mode of an existing file and applies the umask.
	if err := os.Chmod(p, 0o644); err != nil {
		return "", fmt.Errorf("sandbox: write resolv.conf: %w", err)
	}
	return p, nil
}
