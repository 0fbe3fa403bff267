package classify

// MirrorGeneric is any static file server: GET and HEAD of paths that pass
// the shared path filter.
var MirrorGeneric = register(&ecosystem{
	name:        "generic",
	grammar:     checkGeneric,
	knownWrites: genericKnownWrites,
	fallback:    true,
	publish:     Probe{"PUT", "/egressd-selftest", "application/octet-stream", "egressd-selftest"},
})

// genericKnownWrites: a file server takes uploads as PUT with a body (not
// a JSON or form update) or as WebDAV methods, at any path.
func genericKnownWrites(r *Request, _ *pgPath, _ *pgQuery, safe bool) (PageType, string) {
	switch {
	case safe:
	case r.Method == "PUT" && r.ContentLength != 0 && !pgStructured(r.ContentType):
		return PageUpload, "method:PUT-body"
	case r.Method == "MKCOL", r.Method == "PROPPATCH", r.Method == "MOVE", r.Method == "COPY", r.Method == "LOCK", r.Method == "UNLOCK":
		return PageUpload, "method:webdav"
	}
	return PageRead, ""
}

// Generic: GET/HEAD, the path filter every grammar shares, no query unless
// MaxQuery allows one, no body.

func checkGeneric(c *mirrorCheck) MirrorVerdict {
	if !c.read {
		return mdeny(methodReason(c.r.Method))
	}
	if c.r.Query != "" && (c.o == nil || c.o.MaxQuery <= 0) {
		return mdeny(rNoQuery)
	}
	for _, x := range c.segs() {
		if len(x) > 255 {
			return mdeny("generic: path segment too long")
		}
	}
	return mallow
}
