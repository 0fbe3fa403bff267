package policy

import (
	"net/netip"
	"strings"
	"sync"
	"time"
)

// DNS names under an allowed wildcard are a channel: <data>.example.com
// carries up to 250 bytes to whoever runs example.com's name servers,
// whether the name is asked by the sandbox's DNS or by the proxy's own
// resolver. A NameBudget bounds it: each identity may resolve at most
// Limits.DNSWildcardNames distinct names under each wildcard rule per
// window; names a rule lists exactly are never counted. With
// Limits.DNSExactOnly no name under a wildcard is resolved at all.

// NameBudgetWindow is how long a budget lasts before it starts afresh.
const NameBudgetWindow = time.Hour

// maxBudgetNames bounds the memory of one NameBudget. When it is full, new
// names are refused (fail closed) until the window turns.
const maxBudgetNames = 1 << 20

// NameVerdict is the outcome of NameBudget.Allow.
type NameVerdict uint8

const (
	NameAllowed    NameVerdict = iota
	NameOverBudget             // a new name past the budget: refuse it
	NameExactOnly              // dns_exact_only: only exactly listed names resolve
)

// NameBudget counts distinct names per identity and wildcard. It is safe
// for concurrent use; the zero value is ready.
type NameBudget struct {
	mu     sync.Mutex
	start  time.Time
	total  int
	names  map[string]map[string]struct{} // identity "\x00" wildcard → names
	warned map[string]bool
}

// Allow decides whether identity may resolve name (normalized) now. first
// reports the first refusal for this identity and wildcard in the window:
// log it once, at warning. wildcard names the rule's pattern that covered
// the name ("*.example.com", "*"), for the log.
func (b *NameBudget) Allow(p *Policy, identity, name string, now time.Time) (v NameVerdict, wildcard string, first bool) {
	wildcard = p.wildcardFor(name)
	if wildcard == "" {
		return NameAllowed, "", false // exact, or no rule: the policy decides elsewhere
	}
	if p.Limits.DNSExactOnly {
		return NameExactOnly, wildcard, false
	}
	limit := p.Limits.DNSWildcardNames
	if limit <= 0 {
		return NameAllowed, wildcard, false
	}
	key := identity + "\x00" + wildcard
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.names == nil || now.Sub(b.start) >= NameBudgetWindow || now.Before(b.start) {
		b.start, b.total = now, 0
		b.names, b.warned = map[string]map[string]struct{}{}, map[string]bool{}
	}
	set := b.names[key]
	if _, seen := set[name]; seen {
		return NameAllowed, wildcard, false
	}
	if len(set) >= limit || b.total >= maxBudgetNames {
		first = !b.warned[key]
		b.warned[key] = true
		return NameOverBudget, wildcard, first
	}
	if set == nil {
		set = map[string]struct{}{}
		b.names[key] = set
	}
	set[name] = struct{}{}
	b.total++
	return NameAllowed, wildcard, false
}

// SourceIdentity is the identity of a client at src that the client
// cannot choose: the one its cidrs give, else the address itself. Never
// the Proxy-Authorization user, a label the client picks: the name budget
// charges this one (a label would be a fresh budget per request), and a
// quarantine of it holds whatever label the client sends.
func (p *Policy) SourceIdentity(src netip.Addr) string {
	if id := p.Identity(src); id != "" {
		return id
	}
	if !src.IsValid() {
		return ""
	}
	return src.Unmap().String()
}

// wildcardFor returns the pattern of the first rule that covers name
// through a wildcard ("*.example.com") or "*", or "" when a rule lists name
// exactly or none covers it.
func (p *Policy) wildcardFor(name string) string {
	if p.HighRiskName(name) {
		return ""
	}
	if _, ok := p.exact.get(name); ok {
		return ""
	}
	s := name
	for depth := strings.Count(name, "."); depth > 0; depth-- {
		s = s[strings.IndexByte(s, '.')+1:]
		if depth > p.maxDepth {
			continue
		}
		if _, ok := p.suffix.get(s); ok {
			return "*." + s
		}
	}
	if len(p.star) > 0 {
		return "*"
	}
	return ""
}
