package classify

// Mirror names a package ecosystem whose download grammar a mirror rule
// enforces. MirrorNone means the rule is not a mirror rule; the others are
// registered by the eco_<name>.go files, numbered in file-name order.
type Mirror uint8

// MirrorNone is the Mirror of a rule that is not a mirror rule.
const MirrorNone Mirror = 0

// Probe is a request that publishes or uploads to an ecosystem: what the
// self-test sends through a mirror rule, which must refuse it. It carries
// no credentials and no real package.
type Probe struct {
	Method      string
	Path        string // absolute path, no query
	ContentType string
	Body        string
}

// ecosystem is what one eco_<name>.go file declares.
type ecosystem struct {
	name string
	// grammar is the download grammar: it allows what the ecosystem's
	// clients fetch and denies everything else with a reason.
	grammar func(c *mirrorCheck) MirrorVerdict
	// knownWrites names the ecosystem's publish, upload and credential
	// endpoints for ClassifyPage, on any rule: it returns a write type and
	// a "known:" signal, or "" when r is none of them. It only ever returns
	// write types, so it cannot hide a signal.
	knownWrites func(r *Request, p *pgPath, q *pgQuery, safe bool) (PageType, string)
	// body checks the buffered body of a request the grammar allowed with
	// BodyCap > 0; nil for grammars that allow no body.
	body func(r *Request, body []byte) (bool, string)
	// headers are the request headers this ecosystem's clients send beyond
	// clientHeaders (canonical spelling); a mirror rule forwards no others.
	headers []string
	// publish is the request a publish sends.
	publish Probe
	// fallback: knownWrites runs after every other ecosystem's, because it
	// matches any host (generic file servers).
	fallback bool
	// maxQuery caps the query forms the grammar names when the rule sets
	// no max_query; 0 for grammars with no query form.
	maxQuery int
}

// ecosystems is indexed by Mirror; entry 0 (MirrorNone) is nil.
var ecosystems = []*ecosystem{nil}

func register(e *ecosystem) Mirror {
	if e.name == "" || len(ecosystems) > 255 {
		panic("classify: bad ecosystem registration")
	}
	for _, o := range ecosystems[1:] {
		if o.name == e.name {
			panic("classify: ecosystem " + e.name + " registered twice")
		}
	}
	ecosystems = append(ecosystems, e)
	return Mirror(len(ecosystems) - 1)
}

func (m Mirror) eco() *ecosystem {
	if m == MirrorNone || int(m) >= len(ecosystems) {
		return nil
	}
	return ecosystems[m]
}

func (m Mirror) String() string {
	if m == MirrorNone {
		return ""
	}
	if e := m.eco(); e != nil {
		return e.name
	}
	return "unknown"
}

// ParseMirror maps a config spelling ("pypi") to its Mirror.
func ParseMirror(s string) (Mirror, bool) {
	for i, e := range ecosystems {
		if e != nil && e.name == s {
			return Mirror(i), true
		}
	}
	return MirrorNone, false
}

// Mirrors lists every registered ecosystem, in Mirror order.
func Mirrors() []Mirror {
	out := make([]Mirror, 0, len(ecosystems)-1)
	for i := 1; i < len(ecosystems); i++ {
		out = append(out, Mirror(i))
	}
	return out
}

// MirrorNames lists the config spellings of every ecosystem.
func MirrorNames() []string {
	out := make([]string, 0, len(ecosystems)-1)
	for _, e := range ecosystems[1:] {
		out = append(out, e.name)
	}
	return out
}

// PublishProbe returns the publish request of ecosystem m.
func PublishProbe(m Mirror) (Probe, bool) {
	if e := m.eco(); e != nil {
		return e.publish, true
	}
	return Probe{}, false
}

// ecosystemKnownWrites runs every ecosystem's known writes; the first that
// fires wins.
func ecosystemKnownWrites(r *Request, p *pgPath, q *pgQuery, safe bool) (PageType, string) {
	for _, fallback := range [2]bool{false, true} {
		for _, e := range ecosystems[1:] {
			if e.fallback != fallback {
				continue
			}
			if t, why := e.knownWrites(r, p, q, safe); why != "" {
				return t, why
			}
		}
	}
	return PageRead, ""
}

// clientHeaders are the request headers every package client may send: what
// a mirror rule of any ecosystem forwards (Authorization for private
// registries; Content-Type, Content-Encoding and Content-Length for the
// protocol reads made with POST).
var clientHeaders = []string{"Accept", "Accept-Encoding", "Accept-Language", "User-Agent", "Range", "If-Range",
	"If-None-Match", "If-Modified-Since", "Cache-Control", "Pragma", "Authorization", "Content-Type",
	"Content-Length", "Content-Encoding", "Connection", "Keep-Alive", "Te"}

// MirrorHeaderAllowed reports whether a mirror rule of ecosystem m forwards
// the header named (in canonical form, as net/http keys it) name.
func MirrorHeaderAllowed(m Mirror, name string) bool {
	e := m.eco()
	if e == nil {
		return false
	}
	for _, h := range clientHeaders {
		if h == name {
			return true
		}
	}
	for _, h := range e.headers {
		if h == name {
			return true
		}
	}
	return false
}
