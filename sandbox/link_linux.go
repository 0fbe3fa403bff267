//go:build linux

package sandbox

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// LinkExists reports whether ns has an interface called name.
func LinkExists(ns *NS, name string) (bool, error) {
	if ns == nil || ns.fd < 0 {
		return false, fmt.Errorf("sandbox: link %s: %w", name, ErrClosed)
	}
	h, err := netlink.NewHandleAt(netns.NsHandle(ns.fd))
	if err != nil {
		return false, fmt.Errorf("sandbox: link %s: netlink in %s: %w", name, ns, err)
	}
	defer h.Close()
	_, err = h.LinkByName(name)
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return false, nil
	}
	return err == nil, err
}

// DeleteLink removes the interface called name from ns (for a veth, the
// pair); an absent one is not an error. It is how a crashed run's link is
// removed when only its name is known.
func DeleteLink(ns *NS, name string) error {
	if ns == nil || ns.fd < 0 {
		return fmt.Errorf("sandbox: delete %s: %w", name, ErrClosed)
	}
	h, err := netlink.NewHandleAt(netns.NsHandle(ns.fd))
	if err != nil {
		return fmt.Errorf("sandbox: delete %s: netlink in %s: %w", name, ns, err)
	}
	defer h.Close()
	link, err := h.LinkByName(name)
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sandbox: delete %s: %w", name, err)
	}
	if err := h.LinkDel(link); err != nil {
		return fmt.Errorf("sandbox: delete %s: %w", name, err)
	}
	return nil
}
