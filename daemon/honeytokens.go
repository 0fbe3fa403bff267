package daemon

import (
	"time"

	"github.com/egressd/egressd/honeytoken"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy"
)

// honeyRefresh is how often the daemon looks for honeytokens issued for
// containers and pods (`egressd honeytokens issue` writes the state dir).
const honeyRefresh = 2 * time.Second

// setupHoneytokens gives the daemon its registry (the caller's, or its
// own) and loads the state directory's store.
func (d *Daemon) setupHoneytokens(opt Options) error {
	d.honey = opt.Honeytokens
	if d.honey == nil {
		d.honey = honeytoken.NewRegistry()
	}
	if opt.HoneytokenDir == "" {
		return nil
	}
	d.honeyWatch = &honeytoken.Watch{Dir: opt.HoneytokenDir, Reg: d.honey}
	return d.honeyWatch.Refresh()
}

// refreshHoneytokens reloads the store if it changed; a failure is logged
// once per distinct error (the tokens loaded before stay watched).
func (d *Daemon) refreshHoneytokens() {
	err := d.honeyWatch.Refresh()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg != d.honeyErr {
		d.honeyErr = msg
		if err != nil {
			d.log.Error("honeytoken store unreadable: tokens issued since its last good read are not watched", "err", err)
		}
	}
}

// dnsHoneytoken is the DNS filter's honeytoken hook: an alert like the
// proxy's.
func (d *Daemon) dnsHoneytoken(identity, name string, t honeytoken.Token) {
	d.alerts.attempt(proxy.Attempt{Time: time.Now(), Identity: identity, Method: "DNS", Host: name, Decision: "deny",
		Reason: policy.ReasonHoneytoken.String(), Honeytoken: string(t.Kind), HoneytokenOf: t.Identity, Where: "dns name"})
}
