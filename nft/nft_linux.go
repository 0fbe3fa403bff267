//go:build linux

package nft

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// dial opens a lasting nftables connection in namespace ns. sndbuf, when
// positive, is the socket send buffer the batch needs.
func dial(ns int, sndbuf int) (*nftables.Conn, error) {
	if ns == 0 {
		// fd 0 is stdin, never a namespace, and the netlink library would
		// quietly take 0 to mean "this thread's namespace". A zero value
		// reaching here is a caller's bug; acting on the host would be worse.
		return nil, errors.New("nft: namespace fd 0: pass CurrentNamespace (-1) for the caller's namespace")
	}
	opts := []nftables.ConnOption{nftables.AsLasting(), nftables.WithSockOptions(capAck)}
	if ns > 0 {
		opts = append(opts, nftables.WithNetNSFd(ns))
	}
	if sndbuf > 0 {
		opts = append(opts, nftables.WithSockOptions(sendBuffer(sndbuf)))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("nft: open netlink in namespace fd %d: %w", ns, err)
	}
	return c, nil
}

// capAck keeps error acknowledgements short. Without it the kernel echoes
// each failed message in full, and a batch with several failing 40 KB
// element messages would overrun the receive buffer (ENOBUFS) and hide the
// real error.
func capAck(c *netlink.Conn) error {
	return c.SetOption(netlink.CapAcknowledge, true)
}

// sendBuffer sizes the socket for a batch that is sent with one sendmsg: the
// kernel refuses a message larger than the send buffer (EMSGSIZE). nft does
// the same with SO_SNDBUFFORCE; without CAP_NET_ADMIN in the initial user
// namespace that fails and SO_SNDBUF (capped by net.core.wmem_max) is the
// fallback.
func sendBuffer(n int) nftables.SockOption {
	return func(c *netlink.Conn) error {
		rc, err := c.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, n)
			if serr != nil {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, n)
			}
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("set send buffer to %d bytes: %w", n, serr)
		}
		return nil
	}
}

// batchSize estimates the bytes of the batch that installs rs, generously.
func (rs *ruleset) batchSize() int {
	n := 64 << 10
	for _, sd := range rs.sets {
		n += 64 * len(sd.elems)
	}
	for _, cd := range rs.chains {
		n += 512 * len(cd.rules)
	}
	return n
}

// queue adds the messages that replace the table with rs to c. The first
// AddTable makes sure the DelTable has a table to delete (on kernels before
// 6.3 there is no DESTROY), so add-delete-add replaces an existing table and
// creates a missing one, in one transaction.
func (rs *ruleset) queue(c *nftables.Conn) error {
	t := rs.table
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	for _, n := range rs.counters {
		c.AddObj(&nftables.CounterObj{Table: t, Name: n})
	}
	for _, sd := range rs.sets {
		if err := c.AddSet(sd.set, nil); err != nil {
			return fmt.Errorf("add set %s: %w", sd.set.Name, err)
		}
		// A netlink attribute length is 16 bits, so the element list of one
		// message must stay under 64 KiB: send the elements in chunks.
		for i := 0; i < len(sd.elems); i += setChunk {
			chunk := sd.elems[i:min(i+setChunk, len(sd.elems))]
			if err := c.SetAddElements(sd.set, chunk); err != nil {
				return fmt.Errorf("add elements to set %s: %w", sd.set.Name, err)
			}
		}
	}
	for _, cd := range rs.chains {
		c.AddChain(cd.chain)
	}
	for _, cd := range rs.chains {
		for _, exprs := range cd.rules {
			c.AddRule(&nftables.Rule{Table: t, Chain: cd.chain, Exprs: exprs})
		}
	}
	return nil
}

// Apply installs the table described by s in namespace ns, replacing any
// table of that name in one atomic batch: the kernel holds either the old
// table or the new one, never a mix or none. Applying the same spec twice
// leaves the same table (named and rule counters restart from zero). The
// table stays after the process exits; only Down removes it.
func Apply(ns int, s Spec) error { return install(ns, s, nil) }

// install renders s and replaces its table in one batch, with whatever
// also (when set) queues in the same batch.
func install(ns int, s Spec, also func(c *nftables.Conn, rs *ruleset)) error {
	rs, err := build(s)
	if err != nil {
		return fmt.Errorf("nft: invalid spec: %w", err)
	}
	c, err := dial(ns, rs.batchSize())
	if err != nil {
		return err
	}
	defer c.CloseLasting()
	if err := rs.queue(c); err != nil {
		return fmt.Errorf("nft: render table inet %s: %w", rs.table.Name, err)
	}
	if also != nil {
		also(c, rs)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nft: apply table inet %s: %w", rs.table.Name, err)
	}
	return nil
}

// AddRedirect puts addrs (IPv4; others are skipped) in the transparent-mode
// dynamic set of table inet <table> in namespace ns for ttl (at least
// MinRedirectTTL): connections to them on a redirected port go to the
// transparent listener until then. egressd's DNS filter calls it with the
// answers it gives for allowed names. The table must have redirects.
func AddRedirect(ns int, table string, addrs []netip.Addr, ttl time.Duration) error {
	var elems []nftables.SetElement
	for _, a := range addrs {
		if a = a.Unmap(); a.Is4() {
			elems = append(elems, nftables.SetElement{Key: a.AsSlice(), Timeout: max(ttl, MinRedirectTTL)})
		}
	}
	if len(elems) == 0 {
		return nil
	}
	c, err := dial(ns, 0)
	if err != nil {
		return err
	}
	defer c.CloseLasting()
	set := &nftables.Set{Table: &nftables.Table{Family: nftables.TableFamilyINet, Name: table}, Name: SetRedirectDyn4, KeyType: nftables.TypeIPAddr, HasTimeout: true}
	if err := c.SetAddElements(set, elems); err != nil {
		return fmt.Errorf("nft: add to set %s of table inet %s: %w", SetRedirectDyn4, table, err)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nft: add to set %s of table inet %s: %w", SetRedirectDyn4, table, err)
	}
	return nil
}

// Down deletes table inet <table> from namespace ns. It returns an error
// wrapping ErrNoTable when there is no such table.
func Down(ns int, table string) error {
	if table == "" {
		table = DefaultTable
	}
	c, err := dial(ns, 0)
	if err != nil {
		return err
	}
	defer c.CloseLasting()
	if err := requireTable(c, table); err != nil {
		return err
	}
	c.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: table})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nft: delete table inet %s: %w", table, err)
	}
	return nil
}

func requireTable(c *nftables.Conn, table string) error {
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("nft: list tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == table {
			return nil
		}
	}
	return fmt.Errorf("nft: table inet %s: %w", table, ErrNoTable)
}

// Check reads the table back from namespace ns and compares it with what
// Apply(ns, s) would install: table flags, chains (type, hook, priority,
// policy), rules in order, sets and their elements, named counters. It
// returns one line per difference; none means the kernel holds exactly s.
// Counter values are not compared.
func Check(ns int, s Spec) ([]string, error) {
	rs, err := build(s)
	if err != nil {
		return nil, fmt.Errorf("nft: invalid spec: %w", err)
	}
	c, err := dial(ns, 0)
	if err != nil {
		return nil, err
	}
	defer c.CloseLasting()
	got, err := readState(c, rs.table.Name)
	if err != nil {
		return nil, fmt.Errorf("nft: read table inet %s: %w", rs.table.Name, err)
	}
	return diff(stateOf(rs), got), nil
}

// Ensure checks the table and re-applies the spec when it has drifted. It
// returns the drift it found (nil when in sync) and the repair's error (nil:
// repaired). When the check itself fails it still applies, since the replace
// is idempotent and a wall that cannot be read back is not known to stand:
// the drift is then "check failed: ...", and a failed repair returns both
// errors. A trial table left beside the table (TryOn without EndTry or
// Settle: a crash) is drift too, and the repair (Settle) removes it: on the
// probe link its drops would hide a hole in the walls in force.
func Ensure(ns int, s Spec) ([]string, error) {
	drift, err := Check(ns, s)
	if err != nil {
		drift = []string{"check failed: " + err.Error()}
	}
	drift = append(drift, LeftTrial(ns, s.TableName())...)
	if len(drift) == 0 {
		return nil, nil
	}
	if aerr := Settle(ns, s); aerr != nil {
		return drift, errors.Join(err, aerr)
	}
	return drift, nil
}

// Show returns a listing of table inet <table> in namespace ns: named
// counters, sets (at most 32 elements each), chains and rules, with packet
// and byte counts. It shows what the kernel holds, whatever the spec.
func Show(ns int, table string) (string, error) {
	st, err := read(ns, table)
	if err != nil {
		return "", err
	}
	return st.format(true, 32), nil
}

// Counters returns the named counters of table inet <table> in namespace ns.
func Counters(ns int, table string) (map[string]Counter, error) {
	st, err := read(ns, table)
	if err != nil {
		return nil, err
	}
	m := make(map[string]Counter, len(st.counters))
	for _, c := range st.counters {
		m[c.name] = c.Counter
	}
	return m, nil
}

func read(ns int, table string) (*state, error) {
	if table == "" {
		table = DefaultTable
	}
	c, err := dial(ns, 0)
	if err != nil {
		return nil, err
	}
	defer c.CloseLasting()
	st, err := readState(c, table)
	if err != nil {
		return nil, fmt.Errorf("nft: read table inet %s: %w", table, err)
	}
	if st == nil {
		return nil, fmt.Errorf("nft: table inet %s: %w", table, ErrNoTable)
	}
	return st, nil
}

// Tables lists the names of the inet tables in namespace ns that start
// with prefix (egressd's own: DefaultTable and each run's).
func Tables(ns int, prefix string) ([]string, error) {
	c, err := dial(ns, 0)
	if err != nil {
		return nil, err
	}
	defer c.CloseLasting()
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("nft: list tables: %w", err)
	}
	var out []string
	for _, t := range tables {
		if len(t.Name) >= len(prefix) && t.Name[:len(prefix)] == prefix {
			out = append(out, t.Name)
		}
	}
	return out, nil
}
