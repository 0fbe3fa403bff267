package classify

import "testing"

// TestEcosystemsDeclareAll holds every registered ecosystem to its three
// declarations: a download grammar, known writes, and a publish probe that
// the grammar refuses and the ecosystem's own known writes call a write
// (on a host named registry.<domain>, as npm's known writes need).
func TestEcosystemsDeclareAll(t *testing.T) {
	if len(Mirrors()) < 10 {
		t.Fatalf("only %d ecosystems registered", len(Mirrors()))
	}
	for _, m := range Mirrors() {
		e := m.eco()
		t.Run(e.name, func(t *testing.T) {
			if e.grammar == nil || e.knownWrites == nil {
				t.Fatalf("grammar or known writes missing")
			}
			pr := e.publish
			if pr.Method == "" || pr.Path == "" || pr.ContentType == "" {
				t.Fatalf("publish probe incomplete: %+v", pr)
			}
			if got, ok := ParseMirror(e.name); !ok || got != m {
				t.Errorf("ParseMirror(%q) = %v, %v", e.name, got, ok)
			}
			req := &Request{Method: pr.Method, Host: "registry.example", Port: 443, Path: pr.Path,
				ContentType: pr.ContentType, ContentLength: int64(len(pr.Body))}
			if v := CheckMirror(m, req, nil); v.Allow {
				t.Errorf("grammar allows its own publish probe %s %s", pr.Method, pr.Path)
			}
			var sc pgScratch
			sc.p = pgParsePath(req.Path, sc.buf[:0], sc.segs[:0])
			sc.q.scan(req.Query)
			if pt, why := e.knownWrites(req, &sc.p, &sc.q, false); !pt.IsWrite() || why == "" {
				t.Errorf("known writes miss the publish probe: %v %q", pt, why)
			}
			if pt, why := ClassifyPage(req); !pt.IsWrite() {
				t.Errorf("ClassifyPage(publish probe) = %v (%s), want a write", pt, why)
			}
		})
	}
}
