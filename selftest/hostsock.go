package selftest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"syscall"
)

// Host daemons' unix sockets. A network namespace does not scope a unix
// socket bound to a path: a sandbox that can open one of the host's (the
// Docker socket mounted into an agent container, the host's /run shared)
// talks to a daemon on the host's network, which reaches out for it —
// the Docker socket starts a container on the host's network, a tmux
// server opens a window outside, systemd-resolved and nscd resolve any
// name. The walls never see it. These probes run only where the probes
// run in the sandbox's own file system view (`egressd probe`, inside the
// sandbox): a connection to a daemon in another network namespace is a
// leak; the sandbox's own daemons (same network namespace) are not.

// HostSocketPaths are the paths the in-sandbox probe tries: the sockets of
// daemons that reach the network for their clients, system-wide and in
// the user's runtime directory.
func HostSocketPaths() []string {
	paths := []string{
		"/var/run/docker.sock", "/run/docker.sock",
		"/run/containerd/containerd.sock", "/run/podman/podman.sock", "/run/crio/crio.sock",
		"/run/dbus/system_bus_socket", "/run/systemd/resolve/io.systemd.Resolve",
		"/run/nscd/socket", "/var/run/nscd/socket", "/run/avahi-daemon/socket",
		"/var/run/tailscale/tailscaled.sock", "/run/snapd.socket",
	}
	uid := strconv.Itoa(os.Getuid())
	run := os.Getenv("XDG_RUNTIME_DIR")
	if run == "" {
		run = "/run/user/" + uid
	}
	paths = append(paths, run+"/docker.sock", run+"/podman/podman.sock", run+"/bus", run+"/systemd/private",
		"/tmp/tmux-"+uid+"/default")
	return paths
}

// hostSocket connects to path: no socket there, or refused, is a pass;
// a daemon that answers from another network namespace is a leak.
func (r *runner) hostSocket(ctx context.Context, path string) outcome {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return pass("no socket")
		case errors.Is(err, syscall.ECONNREFUSED):
			return pass("connection refused")
		case errors.Is(err, fs.ErrPermission):
			return pass("permission denied")
		}
		return errored("connect failed", err.Error())
	}
	defer c.Close()
	same, how, err := peerInThisNetNS(c)
	if err != nil {
		return errored("connected: cannot tell whose", fmt.Sprintf("a daemon answers on %s and its network namespace cannot be read (%v): if it is the host's, it reaches the network for the sandbox", path, err))
	}
	if same {
		return pass("connected: the sandbox's own daemon (" + how + ")")
	}
	return leak("connected: "+how, fmt.Sprintf("a daemon outside the sandbox's network namespace answers on %s: it reaches the network for whoever connects (the Docker socket starts a container on the host's network; resolved and nscd resolve any name): do not share it with the sandbox", path))
}

// vsockTransports are the guest-side vsock transports: one loaded means
// this machine is a virtual machine whose host (CID 2) a vsock socket
// reaches.
var vsockTransports = []string{"vmw_vsock_virtio_transport", "vmw_vsock_vmci_transport", "hv_sock"}

// vsock reports whether this sandbox can open an AF_VSOCK socket on a
// machine with a guest transport: a way to the hypervisor's host that is
// not IP, so no wall sees it. Nothing is sent.
func (r *runner) vsock(context.Context) outcome {
	var loaded []string
	for _, m := range vsockTransports {
		if _, err := os.Stat("/sys/module/" + m); err == nil {
			loaded = append(loaded, m)
		}
	}
	err := openVsock()
	switch {
	case err != nil:
		return pass("no vsock socket: " + err.Error())
	case len(loaded) == 0:
		return pass("vsock socket, but no guest transport (not a virtual machine's guest)")
	}
	return leak("vsock socket opened", fmt.Sprintf("this sandbox opens AF_VSOCK sockets and the machine is a virtual machine (%s): vsock reaches the hypervisor's host from any network namespace, around every wall; refuse the family with seccomp (egressd run does; Docker's default profile does)", loaded[0]))
}
